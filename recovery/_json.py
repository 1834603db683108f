"""The one JSON encoding of stored snapshots, items and events: compact, UTF-8 as is."""

from __future__ import annotations

import json
from typing import Any


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
