"""Errors raised by the store.

    StoreError                  anything the store could not do
    +-- StoreOpenError          the database file cannot be opened, is corrupt or too new
    |   +-- StoreUnreachableError  the database server cannot be reached now (refused,
    |                           a timeout, a name that does not resolve, starting up, too
    |                           many connections): a later try may work
    +-- StoreUnavailable        the database cannot be written now: its disk is full or
    |   |                       failing (this may pass by itself)
    |   +-- StoreVanished       its file was deleted or replaced while open: writes are
    |                           refused until a restart (this does not pass)
    +-- LeaseLost               a fenced write found another owner or epoch; the runtime
    |                           turns it into its own control-flow signal (a BaseException)
    |                           before the code of a turn can see it
    +-- Conflict                a guarded transition matched no row (for example a duplicate key)
    +-- StopRequested           a turn tried to end otherwise after a cancel or steer was
    |                           recorded (raised only by a turn's terminal write)
    +-- LaneBusy                a `reject` turn found its lane busy (nothing was written)
    +-- TooManyQueued           the lane or the tenant already has the most queued turns allowed
    +-- IdempotencyMismatch     an idempotency key was reused with a different request
    +-- SteerNotAdded           a steer was refused (`reason` says why; nothing was written)
    +-- StaleSteers             a create meant to take over steers found one settled already

The runtime translates the admission errors (LaneBusy, TooManyQueued, IdempotencyMismatch)
into its own (`recovery.LaneLocked`, `recovery.QueueFull`, `recovery.InvalidRequest`).

Each backend translates its driver's errors into these in one place
(store/sqlite/_errors.py, store/postgres/_errors.py).
"""

from __future__ import annotations


class StoreError(Exception):
    """The store failed to do what was asked."""


class StoreOpenError(StoreError):
    """The database cannot be opened, migrated, read or written at start-up."""


class StoreUnreachableError(StoreOpenError):
    """The database server cannot be reached now (PostgreSQL only): the connection is
    refused or times out, its host name does not resolve, or the server is starting up
    or has no connection left. Unlike the other open errors (a wrong password, a missing
    database, a schema newer than the code), trying again later may work."""


class StoreUnavailable(StoreError):
    """The database could not be written for a reason outside the statement: the disk is
    full, an I/O error, a file that cannot be opened or written. Retrying later may work."""


class StoreVanished(StoreUnavailable):
    """The database file was deleted or replaced under the open store. Its writes would
    go into a file that nobody opens again (lost at the next start), so none is made."""


class LeaseLost(StoreError):
    """A fenced write was refused: the response is driven by another owner or epoch now."""


class Conflict(StoreError):
    """A write collided with existing data (for example a reused id)."""


class StopRequested(StoreError):
    """A cancel (G9) or a steer was recorded before the turn's end: it wins. `kind` is
    `cancelled`, `rollback`, `interrupt`, or `steer` (a `response.steer` over a stop of the
    driver's own)."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"a {kind} request was recorded first")
        self.kind = kind


class LaneBusy(StoreError):
    """The lane has an unfinished turn and the new one asked not to wait."""


class TooManyQueued(StoreError):
    """Admitting the turn would pass a limit of queued turns: of its lane, or of its tenant."""

    def __init__(self, queued: int, where: str) -> None:
        super().__init__(f"{queued} turns are already queued in this {where}")
        self.queued = queued
        self.where = where  # "lane" or "tenant"


class IdempotencyMismatch(StoreError):
    """The key was used before, for a different request body."""


class SteerNotAdded(StoreError):
    """A steer was not committed. `reason`: `not_found` (no such response of the
    tenant), `ended` (the target is terminal; `status` says how it ended), `running`
    (a pending steer's target is not terminal), `continued` (a later turn already
    continues the target), `too_many` (the target has the most steers waiting)."""

    def __init__(self, reason: str, status: str | None = None) -> None:
        super().__init__(f"steer not added: {reason}" + (f" ({status})" if status else ""))
        self.reason = reason
        self.status = status


class StaleSteers(StoreError):
    """A create that takes over steers found one of them settled by someone else."""
