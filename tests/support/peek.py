"""A read-only look into a store beside its running servers, on either backend.

Tests read what the API cannot show them: rows a refused request must not have left,
the response a client died before learning of, a lease's owner. `query(location, sql)`
runs one read-only query and returns its rows as tuples, from an SQLite file or a
PostgreSQL database (tests/support/stores.py).

The SQL is written once, in SQLite's words; on PostgreSQL two of them are translated:
`?` placeholders become `$1, $2, ...`, and `rowid` (a lane's first-in, first-out order)
becomes `ord`, the column that holds that order there (store/postgres/_schema.py). A
boolean column reads as True/False there and 1/0 on SQLite, which compare equal.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import sqlite3
import threading
from typing import Any

import asyncpg

from tests.support.stores import Location, is_postgres


def query(location: Location, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """The rows of a read-only `sql` on the store at `location`."""
    with contextlib.closing(Peek(location)) as peek:
        return peek.query(sql, *params)


def count(location: Location, sql: str, *params: Any) -> int:
    """The one number a `SELECT count(*) ...` gives."""
    with contextlib.closing(Peek(location)) as peek:
        return peek.count(sql, *params)


class Peek:
    """One read-only connection to a store, kept open for a caller that reads it often (a
    new PostgreSQL connection is a new server process: tens of milliseconds on a loaded
    machine). Each query sees what was committed before it. Any thread may use it, one
    at a time (schemathesis calls its hooks from worker threads). Close it after use."""

    def __init__(self, location: Location) -> None:
        self._sqlite: sqlite3.Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._postgres: asyncpg.Connection | None = None
        self._lock = threading.Lock()
        if not is_postgres(location):
            uri = f"file:{location}?mode=ro"
            self._sqlite = sqlite3.connect(uri, uri=True, timeout=10, check_same_thread=False)
            return
        self._loop = asyncio.new_event_loop()
        settings = {"default_transaction_read_only": "on"}
        try:
            connecting = asyncpg.connect(str(location), timeout=10, server_settings=settings)
            self._postgres = self._loop.run_until_complete(connecting)
        except BaseException:
            self._loop.close()
            raise

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with self._lock:
            if self._sqlite is not None:
                return self._sqlite.execute(sql, params).fetchall()
            assert self._loop is not None and self._postgres is not None
            fetch = self._postgres.fetch(_to_postgres(sql), *params)
            rows = self._loop.run_until_complete(fetch)
            return [tuple(row) for row in rows]

    def count(self, sql: str, *params: Any) -> int:
        """The one number a `SELECT count(*) ...` gives."""
        [(number,)] = self.query(sql, *params)
        return int(number)

    def close(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()
        if self._loop is not None:
            try:
                if self._postgres is not None:
                    self._loop.run_until_complete(self._postgres.close())
            finally:
                self._loop.close()


def _to_postgres(sql: str) -> str:
    numbers = itertools.count(1)
    sql = re.sub(r"\?", lambda _: f"${next(numbers)}", sql)
    return re.sub(r"\browid\b", "ord", sql)
