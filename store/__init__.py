"""Persistence for durable-responses: one SQLite file, schema migrations, group commit.

Nothing here knows about HTTP or agents. All SQL of the project lives in this package.
"""

from ._errors import (
    Conflict,
    IdempotencyMismatch,
    LaneBusy,
    LeaseLost,
    QueueFull,
    StopRequested,
    StoreError,
    StoreOpenError,
    StoreUnavailable,
    StoreVanished,
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
from ._sqlite import TERMINAL, SQLiteStore, open_store

__all__ = [
    "SCHEMA_VERSION",
    "TERMINAL",
    "Admission",
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
    "QueueFull",
    "ResponseRecord",
    "SQLiteStore",
    "StopRequested",
    "StoreError",
    "StoreOpenError",
    "StoreUnavailable",
    "StoreVanished",
    "open_store",
]
