"""Metric names as the Curves page lists them: grouped by their prefix (train, val, test_audio, ...), with
per-clip keys folded under the metric they break down. Pure.

A per-clip key is `<metric>/<clip>` where `<metric>` is itself a recorded key: a speech run records the mean
`test_audio/stoi` and `test_audio/stoi/<utterance>` for each of its utterances (ortholab/evaluation/audio.py), ~130
keys that would otherwise flood the list with one-point charts.
"""

from __future__ import annotations

from collections.abc import Iterable


def prefix(key: str) -> str:
    """'val/loss' -> 'val'; a key without a slash is its own group ('loss' -> 'other')."""
    return key.split("/", 1)[0] if "/" in key else "other"


def parent(key: str, keys: set[str]) -> str | None:
    """The recorded metric a per-clip key breaks down ('test_audio/stoi/u1' -> 'test_audio/stoi'), else None."""
    head, _, tail = key.rpartition("/")
    return head if head and tail and head in keys else None


def split_per_clip(keys: Iterable[str]) -> tuple[list[str], dict[str, list[str]]]:
    """(the keys that are no per-clip key, sorted; per parent metric its per-clip keys, sorted)."""
    known = set(keys)
    main, clips = [], {}
    for key in sorted(known):
        owner = parent(key, known)
        if owner is None:
            main.append(key)
        else:
            clips.setdefault(owner, []).append(key)
    return main, clips


def groups(keys: Iterable[str]) -> dict[str, list[str]]:
    """Keys by prefix, prefixes in order (train, val, test first, then the others alphabetically)."""
    order = {"train": 0, "val": 1, "test": 2}
    grouped: dict[str, list[str]] = {}
    for key in sorted(keys):
        grouped.setdefault(prefix(key), []).append(key)
    return {p: grouped[p] for p in sorted(grouped, key=lambda p: (order.get(p, 3), p))}
