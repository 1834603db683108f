"""SQLite connections: one writer with group commit, a few readers.

Every write is an *operation*: an async function run inside the writer's transaction.
Operations that arrive while a commit is under way are batched into the next transaction
(group commit), each in its own savepoint so that one failing operation does not undo
its neighbours. Callers await their own operation's result; a caller that is cancelled
does not cancel the operation (aiosqlite cannot stop a statement already handed to its
thread), so a cancelled write's outcome is unknown and must be re-read.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from itertools import cycle
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from ._errors import StoreError, StoreOpenError

log = logging.getLogger("store")

T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000
MAX_BATCH = 256
BEGIN_RETRIES = 8


@dataclass(slots=True)
class Tx:
    """What an operation sees: the writer connection and a hook run after commit."""

    conn: aiosqlite.Connection
    _after: list[Callable[[], None]] = field(default_factory=list)

    def after_commit(self, fn: Callable[[], None]) -> None:
        self._after.append(fn)


Operation = Callable[[Tx], Awaitable[T]]


async def connect(path: Path, *, readonly: bool = False) -> aiosqlite.Connection:
    if await asyncio.to_thread(path.is_dir):
        # Checked here: a failed aiosqlite.connect leaves a stop future nobody can await.
        raise StoreOpenError(f"{path} is a directory, not a database file")
    conn = await aiosqlite.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.row_factory = sqlite3.Row
        await conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        await conn.execute("PRAGMA foreign_keys = ON")
        # WAL survives process crashes with synchronous=NORMAL; only power loss can drop
        # the newest commits, which is outside what this server promises (durability.md).
        await conn.execute("PRAGMA synchronous = NORMAL")
        if readonly:
            await conn.execute("PRAGMA query_only = ON")
    except BaseException:
        await conn.close()  # its thread would keep the process alive
        raise
    return conn


class Writer:
    """The process's single writer connection, committing queued operations in groups."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn
        self.commit_listeners: list[Callable[[float, int], None]] = []  # (seconds, operations)
        # None is the stop sentinel: everything queued before it is committed first.
        self._queue: asyncio.Queue[tuple[Operation[Any], asyncio.Future[Any]] | None] = (
            asyncio.Queue()
        )

    def submit(self, op: Operation[T]) -> asyncio.Future[T]:
        """Queue an operation; the future resolves after its transaction commits."""
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((op, fut))
        return fut

    async def run(self, op: Operation[T]) -> T:
        # shield: cancelling the caller must not cancel the future the writer resolves.
        return await asyncio.shield(self.submit(op))

    async def serve(self) -> None:
        """Commit batches until `stop`. Runs as a task of the store's task group."""
        while True:
            first = await self._queue.get()
            if first is None:
                return
            batch = [first]
            stopping = False
            while len(batch) < MAX_BATCH and not self._queue.empty():
                item = self._queue.get_nowait()
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            await self._commit(batch)
            if stopping:
                return

    def stop(self) -> None:
        """Let `serve` return once everything queued so far is committed."""
        self._queue.put_nowait(None)

    async def _begin(self) -> None:
        for attempt in range(BEGIN_RETRIES):
            try:
                await self._conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if attempt == BEGIN_RETRIES - 1:
                    raise
                await asyncio.sleep(random.uniform(0.01, 0.05) * (attempt + 1))

    async def _commit(self, batch: list[tuple[Operation[Any], asyncio.Future[Any]]]) -> None:
        tx = Tx(self._conn)
        started = time.perf_counter()
        results: list[tuple[bool, Any]] = []
        savepoints = len(batch) > 1
        try:
            await self._begin()
            for op, _ in batch:
                if savepoints:
                    await self._conn.execute("SAVEPOINT op")
                try:
                    results.append((True, await op(tx)))
                except Exception as exc:
                    if not savepoints:
                        raise
                    await self._conn.execute("ROLLBACK TO op")
                    results.append((False, exc))
                if savepoints:
                    await self._conn.execute("RELEASE op")
            await self._conn.execute("COMMIT")
        except BaseException as exc:
            await _quiet_rollback(self._conn)
            error = exc if isinstance(exc, StoreError) else _as_store_error(exc)
            for _, fut in batch:
                if not fut.done():
                    fut.set_exception(error)
            if not isinstance(exc, Exception):
                raise
            return
        elapsed = time.perf_counter() - started
        for listener in self.commit_listeners:
            listener(elapsed, len(batch))
        for hook in tx._after:
            hook()
        for (ok, value), (_, fut) in zip(results, batch, strict=True):
            if fut.done():
                continue
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)


def _as_store_error(exc: BaseException) -> StoreError:
    err = StoreError(f"write failed: {exc!r}")
    err.__cause__ = exc
    return err


async def _quiet_rollback(conn: aiosqlite.Connection) -> None:
    try:
        if conn.in_transaction:
            await asyncio.shield(conn.execute("ROLLBACK"))
    except Exception:  # the connection may be gone; the transaction is gone with it
        log.debug("rollback failed", exc_info=True)


class Readers:
    """A few read-only connections used in turn; WAL lets them read while the writer writes."""

    def __init__(self, conns: list[aiosqlite.Connection]) -> None:
        self.conns = conns
        self._next = cycle(conns)

    async def fetchall(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        conn = next(self._next)
        async with conn.execute(sql, tuple(params)) as cur:
            return list(await cur.fetchall())

    async def fetchone(self, sql: str, params: Iterable[Any] = ()) -> sqlite3.Row | None:
        conn = next(self._next)
        async with conn.execute(sql, tuple(params)) as cur:
            row: sqlite3.Row | None = await cur.fetchone()
            return row


async def migrate(conn: aiosqlite.Connection, migrations: tuple[str, ...]) -> int:
    """Apply the migrations this database lacks; return the version it now has."""
    await conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    async with conn.execute("SELECT max(version) FROM schema_version") as cur:
        row = await cur.fetchone()
    current = int(row[0]) if row and row[0] is not None else 0
    if current > len(migrations):
        raise StoreOpenError(
            f"the database has schema version {current}, newer than this server knows "
            f"({len(migrations)}); run a newer durable-responses"
        )
    for version in range(current + 1, len(migrations) + 1):
        await conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _statements(migrations[version - 1]):
                await conn.execute(statement)
            await conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
            await conn.execute("COMMIT")
        except BaseException:
            await _quiet_rollback(conn)
            raise
        log.info("store migrated to schema version %d", version)
    return len(migrations)


def _statements(script: str) -> list[str]:
    """Split a migration into statements (ours contain no semicolons inside literals)."""
    lines = [line.split("--", 1)[0] for line in script.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
