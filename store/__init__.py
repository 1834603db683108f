"""Persistence for durable-responses: SQLite (one file, group commit; the default) or
PostgreSQL (many processes on many hosts), behind one `Store` protocol.

Nothing here knows about HTTP or agents. All SQL of the project lives in this package.
"""

from ._contract import CommitListener, Order, SignalListener, Store
from ._errors import (
    Conflict,
    IdempotencyMismatch,
    LaneBusy,
    LeaseLost,
    StaleSteers,
    SteerNotAdded,
    StopRequested,
    StoreError,
    StoreOpenError,
    StoreUnavailable,
    StoreUnreachableError,
    StoreVanished,
    TooManyQueued,
)
from ._open import is_postgres, open_store, redacted, sqlite_path
from ._records import (
    Admission,
    ConversationRecord,
    EventRow,
    Fence,
    ItemRow,
    JournalEntry,
    NewResponse,
    NewSteer,
    ResponseRecord,
    SteerRecord,
)
from .sqlite import SCHEMA_VERSION, SQLiteStore, open_sqlite_store

__all__ = [
    "SCHEMA_VERSION",
    "Admission",
    "CommitListener",
    "Conflict",
    "ConversationRecord",
    "EventRow",
    "Fence",
    "IdempotencyMismatch",
    "ItemRow",
    "JournalEntry",
    "LaneBusy",
    "LeaseLost",
    "NewResponse",
    "NewSteer",
    "Order",
    "ResponseRecord",
    "SQLiteStore",
    "SignalListener",
    "StaleSteers",
    "SteerNotAdded",
    "SteerRecord",
    "StopRequested",
    "Store",
    "StoreError",
    "StoreOpenError",
    "StoreUnavailable",
    "StoreUnreachableError",
    "StoreVanished",
    "TooManyQueued",
    "is_postgres",
    "open_sqlite_store",
    "open_store",
    "redacted",
    "sqlite_path",
]
