"""Persistence for durable-responses: one SQLite file, schema migrations, group commit.

Nothing here knows about HTTP or agents. All SQL of the project lives in this package.
"""

from ._errors import CancelRequested, Conflict, LeaseLost, StoreError, StoreOpenError
from ._records import (
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
    "CancelRequested",
    "Conflict",
    "ConversationRecord",
    "EventRow",
    "Fence",
    "ItemRow",
    "JournalEntry",
    "LeaseLost",
    "NewResponse",
    "ResponseRecord",
    "SQLiteStore",
    "StoreError",
    "StoreOpenError",
    "open_store",
]
