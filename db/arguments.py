"""What the store's calls take: run ids and choices checked, params and JSON values as the store's columns hold them."""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping
from typing import Any

from ortholab.db.schema import Run
from ortholab.db.store_errors import InvalidArgument

JSON_FIELDS = ("config", "info", "tags")
LEASE_FIELDS = frozenset({"lease_owner", "lease_expires_at"})  # written only through leases
RUN_FIELDS = frozenset(Run.__table__.columns.keys()) - {"id"} - LEASE_FIELDS


def checked_run_id(run_id: Any) -> int:
    """A run id as the store's calls take it: an int (a TypeError naming the argument otherwise)."""
    if isinstance(run_id, bool) or not isinstance(run_id, numbers.Integral):
        raise TypeError(f"run_id must be an int (a run's id), got {run_id!r}")
    return int(run_id)


def storable_run_id(run_id: int) -> bool:
    """Whether an id fits the 64-bit integer column both SQLite and PostgreSQL hold ids in: one past it names no run
    (`ortholab runs show 99999999999999999999`), where the driver would raise OverflowError (or a DataError)."""
    return -(2**63) <= run_id < 2**63


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InvalidArgument(f"Invalid {name} {value!r}; expected one of {list(choices)}.")


def flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of dotted keys: {'model': {'hidden_size': 8}} -> {'model.hidden_size': 8}."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = dict(value) if isinstance(value, Mapping) else value
    return flat


def to_json(value: Any) -> Any:
    """`value` reduced to what a JSON column holds; anything unserialisable becomes its str()."""
    return json.loads(json.dumps(value, default=str))
