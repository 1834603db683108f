"""The PostgreSQL store: the same operations as the SQLite store (store/sqlite/_store.py), for
any number of server processes on any number of hosts sharing one database.

    open_postgres_store(url)   an async context manager giving a PostgresStore

Layout (one concept per module):

    _open.py           open_postgres_store: pool, schema, lease thread, listener
    _schema.py         numbered migrations, the version table, refusing a newer schema
    _database.py       the pool, transactions retried on serialization failures,
                       per-response write order, writes that outlive a cancelled caller
    _batches.py        group commit of event appends across responses
    _errors.py         asyncpg errors translated into the store's, in one place
    _sql.py            column lists, row mappers, shared SQL fragments, lock key spaces
    _base.py           listeners, fenced appends, conversation item appends, paging
    _lanes.py          admission, idempotent creates and claims under the lane lock
    _runs.py           leases, checkpoints, terminal writes, cancels
    _journal.py        step records and the tool journal
    _conversations.py  the conversations API
    _store.py          PostgresStore: reads, health, retention
    _leases.py         lease renewals on a thread and a connection of their own
    _listen.py         LISTEN/NOTIFY: other processes' commits and signals
"""

from ._open import open_postgres_store
from ._store import PostgresStore

__all__ = ["PostgresStore", "open_postgres_store"]
