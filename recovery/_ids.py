"""Identifiers: a type prefix, the time in milliseconds, and 160 random bits.

The random part makes ids unguessable (tenancy); the time in front makes ids created
later sort later, so the tables keyed by a response id (the event log, input items, the
primary key) grow at their right edge instead of at a random page for each new
response: a commit then writes a few pages, not one per response in it.
"""

from __future__ import annotations

import secrets
import time


def new_id(prefix: str) -> str:
    return f"{prefix}_{time.time_ns() // 1_000_000:012x}{secrets.token_hex(20)}"
