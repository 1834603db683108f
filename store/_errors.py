"""Errors raised by the store.

    StoreError                  anything the store could not do
    +-- StoreOpenError          the database file cannot be opened, is corrupt or too new
    +-- LeaseLost               a fenced write found another owner or epoch (BaseException-free:
                                the runtime turns it into its own control-flow signal)
    +-- Conflict                a guarded transition matched no row (for example a duplicate key)
    +-- StopRequested           a turn tried to end otherwise after a cancel or steer was recorded
    +-- LaneBusy                a `reject` turn found its lane busy (nothing was written)
    +-- QueueFull               the lane already has the most queued turns allowed
    +-- IdempotencyMismatch     an idempotency key was reused with a different request

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


class StopRequested(StoreError):
    """A cancel (G9) or a steer was recorded before the turn's end: it wins. `kind` is
    `cancelled`, `rollback` or `interrupt`."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"a {kind} request was recorded first")
        self.kind = kind


class LaneBusy(StoreError):
    """The lane has an unfinished turn and the new one asked not to wait."""


class QueueFull(StoreError):
    def __init__(self, queued: int, where: str) -> None:
        super().__init__(f"{queued} turns are already queued in this {where}")
        self.queued = queued
        self.where = where  # "lane" or "tenant"


class IdempotencyMismatch(StoreError):
    """The key was used before, for a different request body."""


@contextmanager
def translate_sqlite_errors(what: str) -> Iterator[None]:
    try:
        yield
    except sqlite3.IntegrityError as exc:
        raise Conflict(f"{what}: {exc}") from exc
    except sqlite3.Error as exc:
        raise StoreError(f"{what}: {exc}") from exc
