"""Errors raised by the store.

    StoreError                  anything the store could not do
    +-- StoreOpenError          the database file cannot be opened, is corrupt or too new
    +-- LeaseLost               a fenced write found another owner or epoch (BaseException-free:
                                the runtime turns it into its own control-flow signal)
    +-- Conflict                a guarded transition matched no row (for example a duplicate key)
    +-- CancelRequested         a turn tried to end otherwise after a cancel was recorded

`translate_sqlite_errors` is the one place where `sqlite3` errors become ours.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager


class StoreError(Exception):
    """The store failed to do what was asked."""


class StoreOpenError(StoreError):
    """The database cannot be opened, migrated, read or written at start-up."""


class LeaseLost(StoreError):
    """A fenced write was refused: the response is driven by another owner or epoch now."""


class Conflict(StoreError):
    """A write collided with existing data (for example a reused id)."""


class CancelRequested(StoreError):
    """The client's cancel was recorded first: the turn must end `cancelled` (G9)."""


@contextmanager
def translate_sqlite_errors(what: str) -> Iterator[None]:
    try:
        yield
    except sqlite3.IntegrityError as exc:
        raise Conflict(f"{what}: {exc}") from exc
    except sqlite3.Error as exc:
        raise StoreError(f"{what}: {exc}") from exc
