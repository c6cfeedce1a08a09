"""What is wrong with a NIST SPHERE header, in words a user can act on (libsndfile only says "SF_INFO struct
incomplete" or "Unspecified internal error").

A SPHERE file starts with a 1024-byte (or larger) ASCII header: `NIST_1A`, the header size, then one field a line
as `name -type value` (`-i` integer, `-r` real, `-sN` string of N characters) up to `end_head`.
"""

from __future__ import annotations

from pathlib import Path

MAGIC = b"NIST_1A"
END = "end_head"
POSITIVE_INTEGERS = ("sample_rate", "channel_count")  # the fields a reader cannot do without


def header_fields(head: bytes) -> dict[str, tuple[str, str]]:
    """{name: (type, value)} of the header's field lines (after the magic and size lines, up to end_head)."""
    fields = {}
    for line in head.decode("ascii", errors="replace").splitlines()[2:]:
        if line.strip() == END:
            break
        parts = line.split(maxsplit=2)
        if len(parts) == 3:
            fields[parts[0]] = (parts[1], parts[2].strip())
    return fields


def field_problem(name: str, fields: dict[str, tuple[str, str]]) -> str | None:
    """Why field `name` is not a positive integer, or None when it is."""
    if name not in fields:
        return f"lacks the field {name}"
    kind, value = fields[name]
    if kind != "-i" or not value.isdigit() or int(value) <= 0:
        return f"has `{name} {kind} {value}` where {name} must be a positive integer (`{name} -i N`)"
    return None


def sphere_header_problem(path: Path) -> str | None:
    """What is wrong with `path`'s SPHERE header (which field, and why), or None when it looks sound or the file is
    not a SPHERE file at all."""
    try:
        with open(path, "rb") as stream:
            head = stream.read(1024)
    except OSError:
        return None
    if not head.startswith(MAGIC):
        return None
    fields = header_fields(head)
    return next((problem for name in POSITIVE_INTEGERS if (problem := field_problem(name, fields))), None)
