"""The one JSON encoding of stored snapshots, items and events: compact, UTF-8 as is, and
standard: a NaN or an infinity raises ValueError rather than being written as `NaN` or
`Infinity`, which no JSON parser but Python's reads back. And the copy of a JSON value
that an event takes of an item that goes on changing."""

from __future__ import annotations

import json
from typing import Any


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def copied(value: Any) -> Any:
    """A copy of a JSON value (dicts, lists, scalars). A third of `copy.deepcopy`'s cost:
    it keeps no memo, which only cycles and shared parts need, and a JSON value has none."""
    if isinstance(value, dict):
        return {key: copied(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copied(item) for item in value]
    return value
