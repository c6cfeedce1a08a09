"""`ortholab runs --sort KEY [--desc]`: the listed runs ordered by a column or a --columns key."""

from __future__ import annotations

import math
import re

from ortholab.errors import ConfigError, did_you_mean

SORT_FIELDS = {"eta": "eta_s"}  # a shown column sorted by the value behind it (seconds, not '3 min')
NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
NUMERIC_TEXT = re.compile(rf"\s*({NUMBER})(?:\s*/\s*({NUMBER}))?\s*")  # '0.01', '1e-3', an epoch's '3/10'


def sort_rows(rows: list[dict], key: str, columns: list[str], desc: bool = False) -> list[dict]:
    """`rows` ordered by `key` (one of `columns`), numbers (also as text: an epoch's '3/10', '1e-3') before text, a run
    without a value last either way; ties keep the default order, newest first. An unknown key is one line naming the
    nearest."""
    if key not in columns:
        raise ConfigError(
            f"--sort {key}: no such column; {did_you_mean(key, columns)}sort by one of {', '.join(columns)} "
            f"or a key given to --columns"
        )
    field = SORT_FIELDS.get(key, key)

    def value(row: dict):  # (kind, value): numbers and text never compared with each other
        held = row.get(field)
        if isinstance(held, (int, float)) and not isinstance(held, bool):
            return (0, (held,))
        number = NUMERIC_TEXT.fullmatch(str(held))  # numbers written as text by their value: '3/10' before '10/10'
        if number:
            return (0, tuple(float(part) for part in number.groups() if part is not None))
        return (1, str(held))

    def held(row: dict) -> bool:  # no value, or NaN: listed last
        return row.get(field) is not None and not (isinstance(row[field], float) and math.isnan(row[field]))

    return sorted(filter(held, rows), key=value, reverse=desc) + [row for row in rows if not held(row)]
