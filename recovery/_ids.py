"""Identifiers: a type prefix, the time in milliseconds, and 160 random bits.

The random part makes ids unguessable (tenancy); the time in front makes ids created
later sort later, so the tables keyed by a response id (the event log, input items, the
primary key) grow at their right edge instead of at a random page for each new
response: a commit then writes a few pages, not one per response in it.
"""

from __future__ import annotations

import os
import threading
import time

_RANDOM_BYTES = 20
_POOL_SIZE = 4096

# os.urandom drawn a page at a time: one system call per 200 ids instead of one each.
_lock = threading.Lock()
_pool = b""
_used = 0


def _reset_pool() -> None:
    global _lock, _pool, _used
    _lock = threading.Lock()  # another thread of the parent may have held it
    _pool, _used = b"", 0


os.register_at_fork(after_in_child=_reset_pool)  # a child must not reuse the parent's bytes


def new_id(prefix: str) -> str:
    global _pool, _used
    with _lock:
        if _used + _RANDOM_BYTES > len(_pool):
            _pool, _used = os.urandom(_POOL_SIZE), 0
        random = _pool[_used : _used + _RANDOM_BYTES]
        _used += _RANDOM_BYTES
    return f"{prefix}_{time.time_ns() // 1_000_000:012x}{random.hex()}"
