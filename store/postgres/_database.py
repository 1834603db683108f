"""PostgreSQL connections for the event loop: a pool, transactions retried on
serialization failures and deadlocks, and writes that outlive their caller's cancel.

Deliberate divergence from SQLite's writer (store/sqlite/_connection.py): there is no group
commit. PostgreSQL takes concurrent transactions from many connections, so each write is
its own transaction on a pooled connection, and hot writes are single statements that
need no BEGIN and COMMIT (`atomic=False`). Two things SQLite's single writer gave for
free are kept explicitly:

- **Order per response.** Writes that name a response in `after` run after every write
  submitted before them for the same response has ended, as they would in SQLite's
  queue: an append submitted before a checkpoint commits before it, and a hand-over
  does not overtake the events it hands over.
- **A cancelled caller does not cancel its write.** Each write runs as a task of the
  store's task group, and callers await it shielded, so a write whose caller was
  cancelled may still commit: its outcome is unknown and must be re-read.

The database remembers how its last write went (`unavailable`, `committed_at`) for
readiness, as SQLite's writer does.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg
from asyncpg import exceptions as pgerr

from .._errors import StoreError, StoreUnavailable
from ._errors import RETRYABLE, LostInTransaction, translate_asyncpg_errors

if TYPE_CHECKING:
    from ._sql import Conn, Pool

T = TypeVar("T")
log = logging.getLogger("store")

RETRIES = 6  # attempts of a transaction that failed to serialize or deadlocked
ACQUIRE_TIMEOUT = 10.0  # seconds to wait for a pooled connection


@dataclass(slots=True)
class Tx:
    """What an operation sees: its connection and a hook run after commit."""

    conn: Conn
    _after: list[Callable[[], None]] = field(default_factory=list)

    def after_commit(self, fn: Callable[[], None]) -> None:
        self._after.append(fn)

    def run_hooks(self) -> None:
        for hook in self._after:
            hook()


Operation = Callable[[Tx], Awaitable[T]]


class Database:
    def __init__(self, pool: Pool, tg: asyncio.TaskGroup) -> None:
        self.pool = pool
        self._tg = tg
        self.commit_listeners: list[Callable[[float, int], None]] = []  # (seconds, writes)
        self.unavailable: StoreUnavailable | None = None
        self.committed_at = time.monotonic()
        self._tails: dict[str, asyncio.Future[None]] = {}  # per response: its last write
        self._closed = False

    def close(self) -> None:
        """Refuse new writes; those submitted already still run (the task group waits)."""
        self._closed = True

    # -- writes -----------------------------------------------------------------------

    def submit(
        self, what: str, op: Operation[T], *, after: Sequence[str] = (), atomic: bool = True
    ) -> asyncio.Future[T]:
        """Run `op` in a transaction of its own (or, not `atomic`, as one statement);
        the future resolves after it commits. See the module docstring for `after`."""
        return self.chain(what, lambda: self.commit(what, op, atomic=atomic), after=after)

    async def write(
        self, what: str, op: Operation[T], *, after: Sequence[str] = (), atomic: bool = True
    ) -> T:
        # shield: cancelling the caller must not cancel the write (module docstring).
        return await asyncio.shield(self.submit(what, op, after=after, atomic=atomic))

    def chain(
        self, what: str, run: Callable[[], Awaitable[T]], *, after: Sequence[str] = ()
    ) -> asyncio.Future[T]:
        """Run `run()` as a task of the store's once every write submitted before it
        for the responses `after` names has ended; the future gives its outcome."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        if self._closed:
            fut.set_exception(StoreError("the store is closed"))
            return fut
        waits = [self._tails[key] for key in after if key in self._tails]
        done: asyncio.Future[None] | None = None
        if after:
            done = loop.create_future()
            for key in after:
                self._tails[key] = done
        self._tg.create_task(self._settle(what, run, fut, waits, done, after))
        return fut

    async def commit(self, what: str, op: Operation[T], *, atomic: bool, writes: int = 1) -> T:
        """Run `op` until it commits, then tell the commit listeners and run its hooks."""
        tx, value, elapsed = await self._run(what, op, atomic)
        try:
            for listener in self.commit_listeners:
                listener(elapsed, writes)
            tx.run_hooks()
        except Exception:  # committed: the caller learns it, whatever a listener does
            log.exception("store: a commit listener failed")
        return value

    async def _settle(
        self,
        what: str,
        run: Callable[[], Awaitable[T]],
        fut: asyncio.Future[T],
        waits: list[asyncio.Future[None]],
        done: asyncio.Future[None] | None,
        keys: Sequence[str],
    ) -> None:
        """The task of one write: it never raises into the task group but into `fut`."""
        try:
            if waits:
                await asyncio.wait(waits)
            value = await run()
        except asyncio.CancelledError:
            _fail(fut, StoreError(f"{what}: the store closed before the write ended"))
            raise
        except Exception as exc:  # ours, translated by `_run`, or the operation's own
            _fail(fut, exc)
        else:
            if not fut.done():  # a caller may have given up on it
                fut.set_result(value)
        finally:
            if done is not None:
                done.set_result(None)
                for key in keys:
                    if self._tails.get(key) is done:
                        del self._tails[key]

    async def _run(self, what: str, op: Operation[T], atomic: bool) -> tuple[Tx, T, float]:
        """Run `op` until it commits, retrying what may simply run again (RETRYABLE);
        remember whether the database could be written, for readiness."""
        try:
            with translate_asyncpg_errors(what):
                for attempt in range(RETRIES - 1):
                    try:
                        result = await self._attempt(op, atomic)
                        break
                    except RETRYABLE:
                        await asyncio.sleep(random.uniform(0.002, 0.02) * (attempt + 1))
                else:
                    result = await self._attempt(op, atomic)
        except StoreUnavailable as exc:
            self.unavailable = exc
            raise
        self.unavailable = None
        self.committed_at = time.monotonic()
        return result

    async def _attempt(self, op: Operation[T], atomic: bool) -> tuple[Tx, T, float]:
        async with self.pool.acquire(timeout=ACQUIRE_TIMEOUT) as conn:
            tx = Tx(conn)
            started = time.perf_counter()
            if not atomic:
                value = await op(tx)
                return tx, value, time.perf_counter() - started
            sent = False  # its COMMIT: only a connection lost after that is ambiguous
            try:
                async with conn.transaction():
                    value = await op(tx)
                    sent = not conn.is_closed()
            except Exception as exc:
                # Lost before its COMMIT was sent, or ended by PostgreSQL as idle inside
                # it (a blocked event loop can leave it so between two statements):
                # nothing of it was committed, and it may run again.
                if conn.is_closed() and (not sent or _ended_idle(exc)):
                    raise LostInTransaction(str(exc)) from exc
                raise
            return tx, value, time.perf_counter() - started

    # -- reads ------------------------------------------------------------------------

    async def fetch(self, what: str, sql: str, *args: Any) -> list[asyncpg.Record]:
        with translate_asyncpg_errors(what):
            async with self.pool.acquire(timeout=ACQUIRE_TIMEOUT) as conn:
                return await conn.fetch(sql, *args)

    async def fetchrow(self, what: str, sql: str, *args: Any) -> asyncpg.Record | None:
        rows = await self.fetch(what, sql, *args)
        return rows[0] if rows else None


def _ended_idle(exc: BaseException | None) -> bool:
    """Whether PostgreSQL ended the session for sitting idle inside a transaction."""
    while exc is not None:
        if isinstance(exc, pgerr.IdleInTransactionSessionTimeoutError):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _fail(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():  # a caller may have given up on it
        fut.set_exception(exc)
