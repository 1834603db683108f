"""The SQLite store, the default: one file (WAL), one writer thread with group commit,
readers beside it. Several processes on one host may share the file.

    _store.py          SQLiteStore (responses, events, leases, lanes) and open_sqlite_store
    _base.py           listeners, fenced appends, shared SQL fragments, row mappers
    _journal.py        step records and the tool journal
    _conversations.py  the conversations API
    _connection.py     the group-commit writer, readers, migrations
    _schema.py         the numbered migrations
    _health.py         the write probe and the file's identity
    _errors.py         sqlite3 errors translated into the store's, in one place
"""

from ._schema import SCHEMA_VERSION
from ._store import SQLiteStore, open_sqlite_store

__all__ = ["SCHEMA_VERSION", "SQLiteStore", "open_sqlite_store"]
