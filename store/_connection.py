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
from collections import deque
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

    def run_hooks(self) -> None:
        for hook in self._after:
            hook()


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
    """The process's single writer connection, committing queued operations in groups.

    A batch runs in one transaction with no per-operation savepoint (each statement is a
    hop to aiosqlite's thread, so fewer is faster). If an operation fails, the batch is
    rolled back and its operations are committed one by one, so that the failure is
    reported to its own caller only; operations are pure functions of the database
    state, so running one again after a rollback is safe.
    """

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn
        self.commit_listeners: list[Callable[[float, int], None]] = []  # (seconds, operations)
        self._queue: deque[tuple[Operation[Any], asyncio.Future[Any]]] = deque()
        self._urgent: deque[tuple[Operation[Any], asyncio.Future[Any]]] = deque()
        self._ready = asyncio.Event()
        self._stopping = False

    def submit(self, op: Operation[T], *, urgent: bool = False) -> asyncio.Future[T]:
        """Queue an operation; the future resolves after its transaction commits. An
        `urgent` one (a lease renewal) goes into the next batch, ahead of the queue."""
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        (self._urgent if urgent else self._queue).append((op, fut))
        self._ready.set()
        return fut

    async def run(self, op: Operation[T], *, urgent: bool = False) -> T:
        # shield: cancelling the caller must not cancel the future the writer resolves.
        return await asyncio.shield(self.submit(op, urgent=urgent))

    async def serve(self) -> None:
        """Commit batches until `stop`. Runs as a task of the store's task group."""
        while True:
            if not self._queue and not self._urgent:
                if self._stopping:
                    return
                self._ready.clear()
                await self._ready.wait()
                continue
            batch: list[tuple[Operation[Any], asyncio.Future[Any]]] = []
            while self._urgent and len(batch) < MAX_BATCH:
                batch.append(self._urgent.popleft())
            while self._queue and len(batch) < MAX_BATCH:
                batch.append(self._queue.popleft())
            await self._commit(batch)

    def stop(self) -> None:
        """Let `serve` return once everything queued so far is committed."""
        self._stopping = True
        self._ready.set()

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
        started = time.perf_counter()
        try:
            tx, results = await self._transaction([op for op, _ in batch])
        except _OperationFailed:
            for item in batch:  # isolate the failure: one transaction each
                await self._commit_alone(item)
            return
        except BaseException as exc:
            self._fail(batch, exc)
            if not isinstance(exc, Exception):
                raise
            return
        elapsed = time.perf_counter() - started
        for listener in self.commit_listeners:
            listener(elapsed, len(batch))
        tx.run_hooks()
        for value, (_, fut) in zip(results, batch, strict=True):
            if not fut.done():
                fut.set_result(value)

    async def _commit_alone(self, item: tuple[Operation[Any], asyncio.Future[Any]]) -> None:
        op, fut = item
        try:
            tx, (value,) = await self._transaction([op])
        except _OperationFailed as failed:
            if not fut.done():
                fut.set_exception(failed.error)
            return
        except BaseException as exc:
            self._fail([item], exc)
            if not isinstance(exc, Exception):
                raise
            return
        tx.run_hooks()
        if not fut.done():
            fut.set_result(value)

    async def _transaction(self, ops: list[Operation[Any]]) -> tuple[Tx, list[Any]]:
        """Run `ops` in one transaction and commit; roll back and raise on any failure
        (_OperationFailed when an operation raised an ordinary exception)."""
        tx = Tx(self._conn)
        try:
            await self._begin()
            results = []
            for op in ops:
                try:
                    results.append(await op(tx))
                except Exception as exc:
                    raise _OperationFailed(exc) from exc
            await self._conn.execute("COMMIT")
        except BaseException:
            await _quiet_rollback(self._conn)
            raise
        return tx, results

    @staticmethod
    def _fail(batch: list[tuple[Operation[Any], asyncio.Future[Any]]], exc: BaseException) -> None:
        error = exc if isinstance(exc, StoreError) else _as_store_error(exc)
        for _, fut in batch:
            if not fut.done():
                fut.set_exception(error)


class _OperationFailed(Exception):
    def __init__(self, error: Exception) -> None:
        super().__init__(repr(error))
        self.error = error


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
        # execute_fetchall: one hop to the connection's thread (execute, fetch and close).
        rows = await next(self._next).execute_fetchall(sql, tuple(params))
        return list(rows)

    async def fetchone(self, sql: str, params: Iterable[Any] = ()) -> sqlite3.Row | None:
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None


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
