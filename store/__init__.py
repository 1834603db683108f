"""Persistence for durable-responses: one SQLite file, schema migrations, group commit.

Nothing here knows about HTTP or agents. All SQL of the project lives in this package.
"""

from ._contract import CommitListener, Order, SignalListener, Store
from ._errors import (
    Conflict,
    IdempotencyMismatch,
    LaneBusy,
    LeaseLost,
    StopRequested,
    StoreError,
    StoreOpenError,
    StoreUnavailable,
    StoreVanished,
    TooManyQueued,
)
from ._records import (
    Admission,
    ConversationRecord,
    EventRow,
    Fence,
    ItemRow,
    JournalEntry,
    NewResponse,
    ResponseRecord,
)
from ._schema import SCHEMA_VERSION
from ._sqlite import SQLiteStore, open_store

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
    "Order",
    "ResponseRecord",
    "SQLiteStore",
    "SignalListener",
    "StopRequested",
    "Store",
    "StoreError",
    "StoreOpenError",
    "StoreUnavailable",
    "StoreVanished",
    "TooManyQueued",
    "open_store",
]
