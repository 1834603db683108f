"""SQLite connections: one writer with group commit, a few readers.

Deliberate divergence: reads use aiosqlite, but the writer is a plain `sqlite3`
connection owned by one dedicated thread. Every write is an *operation*: a synchronous
function run inside the writer's transaction, and a whole batch of operations (group
commit) runs in one hand-off to that thread. aiosqlite hands each statement over
separately, which made the writer's thread hops, not SQLite, the limit of throughput.

Callers await their own operation's result; a caller that is cancelled does not cancel
the operation (it may already be running on the writer thread), so a cancelled write's
outcome is unknown and must be re-read.

A thread other than the event loop's may also submit an operation (`submit_threadsafe`):
it runs in a transaction of its own, ahead of queued work, and the writer thread resolves
its future itself, so a blocked event loop delays neither its commit nor its answer. The
lease renewal thread relies on that.

The writer remembers how its last transaction went (`unavailable`, `committed_at`): a
failing disk shows there first, and readiness reads it (store/sqlite/_health.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import random
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import cycle
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from .._errors import StoreError, StoreOpenError, StoreUnavailable
from ._errors import from_sqlite, translate_sqlite_errors

log = logging.getLogger("store")

T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000
MAX_BATCH = 256
BEGIN_RETRIES = 8


@dataclass(slots=True)
class Tx:
    """What an operation sees: the writer connection and a hook run after commit."""

    conn: sqlite3.Connection
    _after: list[Callable[[], None]] = field(default_factory=list)

    def after_commit(self, fn: Callable[[], None]) -> None:
        self._after.append(fn)

    def run_hooks(self) -> None:
        for hook in self._after:
            hook()


Operation = Callable[[Tx], T]


async def connect(path: Path, *, readonly: bool = False) -> aiosqlite.Connection:
    conn = await aiosqlite.connect(path, isolation_level=None, check_same_thread=False)
    try:
        conn.row_factory = sqlite3.Row
        await conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        await conn.execute("PRAGMA foreign_keys = ON")
        # WAL survives process crashes with synchronous=NORMAL; only power loss can drop
        # the newest commits, which is outside what this server promises (docs/guarantees.md).
        await conn.execute("PRAGMA synchronous = NORMAL")
        if readonly:
            await conn.execute("PRAGMA query_only = ON")
    except BaseException:
        await conn.close()  # its thread would keep the process alive
        raise
    return conn


class Writer:
    """The process's single writer connection, committing queued operations in groups.

    Its own thread takes every operation queued so far as one batch, runs the batch in one
    transaction with no per-operation savepoint, commits, and hands all the results back
    to the event loop in one callback: a write costs the loop no task wake-up of its own
    and one hop back. If an operation fails, the batch is rolled back and its operations
    are committed one by one, so that the failure is reported to its own caller only;
    operations are pure functions of the database state, so running one again after a
    rollback is safe.
    """

    def __init__(self, conn: sqlite3.Connection, guard: Callable[[], None] | None = None) -> None:
        self._conn = conn
        self._guard = guard  # on the writer thread, before each transaction: may refuse it
        # How the last transaction went, for readiness: why it could not be written (a
        # full disk; None once one commits again), and when one last committed.
        self.unavailable: StoreUnavailable | None = None
        self.committed_at = time.monotonic()
        self.commit_listeners: list[Callable[[float, int], None]] = []  # (seconds, operations)
        # deque appends and pops are atomic: the loop appends, the writer thread pops.
        self._queue: deque[_Queued] = deque()
        self._urgent: deque[_Queued] = deque()
        self._threaded: deque[_Threaded] = deque()  # from other threads, not the loop
        self._wake = threading.Event()
        self._lock = threading.Lock()  # a submit and the thread's last look at the queues
        self._stopping = False
        self._stopped = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def submit(self, op: Operation[T], *, urgent: bool = False) -> asyncio.Future[T]:
        """Queue an operation; the future resolves after its transaction commits. An
        `urgent` one (a lease renewal) goes into the next batch, ahead of the queue."""
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        with self._lock:
            if self._stopped:
                fut.set_exception(StoreError("the store is closed"))
                return fut
            (self._urgent if urgent else self._queue).append((op, fut))
        self._wake.set()
        return fut

    def submit_threadsafe(self, op: Operation[T]) -> concurrent.futures.Future[T]:
        """Queue an operation from any thread; it commits in a transaction of its own,
        ahead of the queue, and its future is resolved on the writer thread, without
        the event loop. It has no after-commit hooks and no commit listeners."""
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._stopped:
                fut.set_exception(StoreError("the store is closed"))
                return fut
            self._threaded.append((op, fut))
        self._wake.set()
        return fut

    async def run(self, op: Operation[T], *, urgent: bool = False) -> T:
        # shield: cancelling the caller must not cancel the future the writer resolves.
        return await asyncio.shield(self.submit(op, urgent=urgent))

    async def serve(self) -> None:
        """Run the writer thread until `stop`, and return once everything queued so far is
        committed. Runs as a task of the store's task group."""
        loop = self._loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()

        def main() -> None:
            try:
                self._serve()
            finally:
                with self._lock:
                    self._stopped = True
                    left = [*self._urgent, *self._queue]  # only if the thread itself failed
                    threaded = list(self._threaded)
                    self._urgent.clear()
                    self._queue.clear()
                    self._threaded.clear()
                for _, orphan in threaded:
                    orphan.set_exception(StoreError("the writer stopped"))
                with contextlib.suppress(RuntimeError):  # the loop is already closed
                    if left:
                        loop.call_soon_threadsafe(_fail, left, StoreError("the writer stopped"))
                    loop.call_soon_threadsafe(_resolve, ended, None)

        self._thread = threading.Thread(target=main, name="store-writer", daemon=True)
        self._thread.start()
        try:
            await asyncio.shield(ended)
        except asyncio.CancelledError:
            self.stop()
            raise

    def stop(self) -> None:
        """Let `serve` return once everything queued so far is committed."""
        self._stopping = True
        self._wake.set()

    def _serve(self) -> None:
        """On the writer thread: commit batches until stopped and drained."""
        while True:
            self._wake.wait()
            self._wake.clear()  # before draining: a submit from now on wakes us again
            while self._threaded or self._urgent or self._queue:
                if self._threaded:
                    self._commit_threaded(*self._threaded.popleft())
                    continue
                batch: list[_Queued] = []
                while self._urgent and len(batch) < MAX_BATCH:
                    batch.append(self._urgent.popleft())
                while self._queue and len(batch) < MAX_BATCH:
                    batch.append(self._queue.popleft())
                settle = self._commit(batch)
                assert self._loop is not None
                with contextlib.suppress(RuntimeError):  # the loop is already closed
                    self._loop.call_soon_threadsafe(settle)
            with self._lock:
                if self._stopping and not (self._threaded or self._urgent or self._queue):
                    self._stopped = True  # under the lock: no submit slips in after this
                    return

    def _commit(self, batch: list[_Queued]) -> Callable[[], None]:
        """On the writer thread: commit `batch`; return what the loop must then do."""
        started = time.perf_counter()
        try:
            tx, results = self._transaction([op for op, _ in batch])
        except _OperationFailed:
            return self._commit_each(batch)  # isolate the failure: one transaction each
        except Exception as exc:
            return functools.partial(_fail, batch, exc)
        elapsed = time.perf_counter() - started

        def settle() -> None:
            try:
                for listener in self.commit_listeners:
                    listener(elapsed, len(batch))
                tx.run_hooks()
            finally:  # committed: every caller learns it, whatever a listener does
                for value, (_, fut) in zip(results, batch, strict=True):
                    _resolve(fut, value)

        return settle

    def _commit_threaded(self, op: Operation[T], fut: concurrent.futures.Future[T]) -> None:
        """On the writer thread: commit one operation of another thread and answer it."""
        try:
            _, (value,) = self._transaction([op])
        except _OperationFailed as failed:
            fut.set_exception(failed.error)
        except Exception as exc:
            fut.set_exception(_as_store_error(exc))
        else:
            fut.set_result(value)

    def _commit_each(self, batch: list[_Queued]) -> Callable[[], None]:
        settles: list[Callable[[], None]] = []
        for item in batch:
            try:
                tx, (value,) = self._transaction([item[0]])
            except _OperationFailed as failed:
                settles.append(functools.partial(_fail, [item], failed.error, wrap=False))
            except Exception as exc:
                settles.append(functools.partial(_fail, [item], exc))
            else:
                settles.append(functools.partial(_settle_one, tx, item[1], value))

        def settle() -> None:
            for each in settles:
                each()

        return settle

    def _transaction(self, ops: list[Operation[Any]]) -> tuple[Tx, list[Any]]:
        """Run `ops` in one transaction and commit; roll back and raise on any failure
        (_OperationFailed when an operation raised). Remember whether it could write."""
        changes = self._conn.total_changes
        try:
            if self._guard is not None:
                self._guard()
            committed = self._commit_ops(ops)
        except Exception as exc:
            failure = _as_store_error(exc.error if isinstance(exc, _OperationFailed) else exc)
            if isinstance(failure, StoreUnavailable):
                self.unavailable = failure
            raise
        # Only a commit that changed rows wrote to the disk: one that changed none (a
        # guarded UPDATE that matched nothing) succeeds on a full disk too.
        if self._conn.total_changes != changes:
            self.unavailable = None
            self.committed_at = time.monotonic()
        return committed

    def _commit_ops(self, ops: list[Operation[Any]]) -> tuple[Tx, list[Any]]:
        conn = self._conn
        tx = Tx(conn)
        _begin(conn)
        try:
            results = []
            for op in ops:
                try:
                    results.append(op(tx))
                except Exception as exc:
                    raise _OperationFailed(exc) from exc
            conn.execute("COMMIT")
        except BaseException:
            _quiet_rollback(conn)
            raise
        return tx, results

    async def close(self) -> None:
        """Close the connection once the writer thread has ended (`stop`, then `serve`)."""
        self.stop()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
        await asyncio.to_thread(self._conn.close)


_Queued = tuple[Operation[Any], asyncio.Future[Any]]
_Threaded = tuple[Operation[Any], concurrent.futures.Future[Any]]


def _resolve(fut: asyncio.Future[Any], value: Any) -> None:
    if not fut.done():  # a caller may have given up on it
        fut.set_result(value)


def _settle_one(tx: Tx, fut: asyncio.Future[Any], value: Any) -> None:
    try:
        tx.run_hooks()
    finally:
        _resolve(fut, value)


def _fail(batch: list[_Queued], exc: BaseException, *, wrap: bool = True) -> None:
    # An operation's own error reaches its caller as it is, unless it is SQLite's.
    error = _as_store_error(exc) if wrap or isinstance(exc, sqlite3.Error) else exc
    for _, fut in batch:
        if not fut.done():
            fut.set_exception(error)


def _begin(conn: sqlite3.Connection) -> None:
    for attempt in range(BEGIN_RETRIES):
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if attempt == BEGIN_RETRIES - 1:
                raise
            time.sleep(random.uniform(0.01, 0.05) * (attempt + 1))


class _OperationFailed(Exception):
    def __init__(self, error: Exception) -> None:
        super().__init__(repr(error))
        self.error = error


def _as_store_error(exc: BaseException) -> StoreError:
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, sqlite3.Error):
        err = from_sqlite("write", exc)
    else:
        err = StoreError(f"write failed: {exc!r}")
    err.__cause__ = exc
    return err


def _quiet_rollback(conn: sqlite3.Connection) -> None:
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except Exception:  # the connection may be gone; the transaction is gone with it
        log.debug("rollback failed", exc_info=True)


class Readers:
    """A few read-only connections used in turn; WAL lets them read while the writer writes.

    `point` reads (a primary-key lookup, a few rows by index) run on the caller's thread
    instead: in WAL mode a reader takes no lock and such a query costs tens of
    microseconds, less than one hop to another thread and back.
    """

    def __init__(self, conns: list[aiosqlite.Connection], direct: sqlite3.Connection) -> None:
        self.conns = conns
        self._next = cycle(conns)
        self._direct = direct

    def point(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        with translate_sqlite_errors("read"):
            return self._direct.execute(sql, tuple(params)).fetchall()

    def close_direct(self) -> None:
        self._direct.close()

    async def fetchall(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        # execute_fetchall: one hop to the connection's thread (execute, fetch and close).
        with translate_sqlite_errors("read"):
            rows = await next(self._next).execute_fetchall(sql, tuple(params))
        return list(rows)

    async def fetchone(self, sql: str, params: Iterable[Any] = ()) -> sqlite3.Row | None:
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None


def migrate(conn: sqlite3.Connection, migrations: tuple[str, ...]) -> int:
    """Apply the migrations this database lacks; return the version it now has."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
    current = int(row[0]) if row and row[0] is not None else 0
    if current > len(migrations):
        raise StoreOpenError(
            f"the database has schema version {current}, newer than this server knows "
            f"({len(migrations)}); run a newer durable-responses"
        )
    for version in range(current + 1, len(migrations) + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
            if row and row[0] is not None and int(row[0]) >= version:
                conn.execute("ROLLBACK")  # another process applied it meanwhile
                continue
            for statement in _statements(migrations[version - 1]):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
            conn.execute("COMMIT")
        except BaseException:
            _quiet_rollback(conn)
            raise
        log.info("store migrated to schema version %d", version)
    return len(migrations)


def open_direct_reader(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
    )
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA query_only = ON")
    return conn


def open_writer(path: Path, migrations: tuple[str, ...]) -> sqlite3.Connection:
    """On the writer thread: the writer connection, in WAL mode, migrated."""
    conn = sqlite3.connect(
        path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
    )
    try:
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        # WAL survives process crashes with synchronous=NORMAL; only power loss can drop
        # the newest commits, which is outside what this server promises (docs/guarantees.md).
        conn.execute("PRAGMA synchronous = NORMAL")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if mode is None or str(mode[0]).lower() != "wal":
            raise StoreOpenError(f"{path}: could not switch the database to WAL mode")
        migrate(conn, migrations)
    except BaseException:
        conn.close()
        raise
    return conn


def _statements(script: str) -> list[str]:
    """Split a migration into statements (ours contain no semicolons inside literals)."""
    lines = [line.split("--", 1)[0] for line in script.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
