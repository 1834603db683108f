"""The one JSON encoding of stored snapshots, items and events: compact, UTF-8 as is, and
standard: a NaN or an infinity raises ValueError rather than being written as `NaN` or
`Infinity`, which no JSON parser but Python's reads back."""

from __future__ import annotations

import json
from typing import Any


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
