"""`--model.optimizers.other.lr 0.01` changes that one option and keeps the group's other options.

jsonargparse merges a dotted flag into a mapping one level deep only: `--model.optimizers.other.lr 0.01` would
replace the whole `other` group by `{lr: 0.01}` (dropping its optimizer's name). Before parsing, each such flag
is rewritten into the whole mapping as the command line has built it so far (config files and earlier flags, in
order) with that one option changed, which jsonargparse then takes as given.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

MAPPINGS = (("model", "optimizers"), ("model", "family_args"))  # free-form mappings of the model's options


def _flag(arg: str) -> tuple[str, str | None]:
    """('--key', 'value') of `--key=value`; ('--key', None) of `--key`."""
    key, eq, value = arg.partition("=")
    return (key, value) if eq else (arg, None)


def _value(text: str):
    """A flag's value as jsonargparse reads it: YAML, with 1e-3 a number (YAML 1.1 would keep it a string)."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _from_config_file(path: str, mapping: tuple[str, ...]):
    """The mapping as a config file sets it, or None where it does not (unreadable files: the parser says)."""
    try:
        node = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    for part in mapping:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def merge_deep_mapping_flags(argv: list[str]) -> list[str]:
    """`argv` with every flag two or more levels inside a free-form mapping replaced by the whole mapping."""
    deep_prefixes = {"--" + ".".join(m) + ".": m for m in MAPPINGS}
    if not any(
        _flag(a)[0].startswith(p) and _flag(a)[0][len(p) :].count(".") >= 1 for a in argv for p in deep_prefixes
    ):
        return argv
    from ortholab.models.optimizers import DEFAULT_OPTIMIZERS

    state: dict[tuple[str, ...], object] = {m: None for m in MAPPINGS}
    state[("model", "optimizers")] = DEFAULT_OPTIMIZERS  # what the run uses where no config names its optimizers
    out, i = [], 0
    while i < len(argv):
        key, inline = _flag(argv[i])
        whole = next((m for m in MAPPINGS if key == "--" + ".".join(m)), None)
        prefix = next((p for p in deep_prefixes if key.startswith(p)), None)
        if key != "--config" and whole is None and prefix is None:
            out.append(argv[i])  # not ours: passed on as it is, one token at a time
            i += 1
            continue
        value = inline if inline is not None else (argv[i + 1] if i + 1 < len(argv) else None)
        step = 1 if inline is not None else 2
        if value is None:
            out += argv[i:]  # a flag without its value: the parser names it
            break
        if key == "--config":
            for mapping in MAPPINGS:
                found = _from_config_file(value, mapping)
                state[mapping] = found if found is not None else state[mapping]
        elif whole is not None:
            state[whole] = _value(value)
        else:
            mapping, path = deep_prefixes[prefix], key[len(prefix) :].split(".")
            current = json.loads(json.dumps(state[mapping] if isinstance(state[mapping], dict) else {}, default=str))
            node = current
            for part in path[:-1]:
                if not isinstance(node.get(part), dict):
                    node[part] = {}
                node = node[part]
            node[path[-1]] = _value(value)
            state[mapping] = current
            if len(path) > 1:  # one level deep is jsonargparse's own merge; deeper: the whole mapping
                out += ["--" + ".".join(mapping), json.dumps(current)]
                i += step
                continue
        out += argv[i : i + step]
        i += step
    return out
