"""Lease renewals on a thread of their own, with a connection of their own.

The lease keeper (recovery/_leases.py) renews from a thread that is not the event
loop's, so that a tool blocking the loop cannot make a live process lose its leases
(G8). SQLite's writer thread answers such calls itself; here a small thread runs an event
loop of its own with one connection, outside the pool, and answers `renew` through a
`concurrent.futures.Future`. The connection is opened on first use and again after it
fails, so a database that went away and came back is found again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from .._errors import StoreError, StoreUnavailable
from .._records import Fence
from ._errors import RETRYABLE, translate_asyncpg_errors
from ._sql import EXPIRES

if TYPE_CHECKING:
    from ._sql import Conn

T = TypeVar("T")

RENEW = (
    f"UPDATE responses AS r SET lease_expires_at = {EXPIRES.format('$4')}"
    " FROM unnest($1::text[], $2::text[], $3::bigint[]) AS l (id, owner, epoch)"
    " WHERE r.id = l.id AND r.owner = l.owner AND r.epoch = l.epoch"
    " AND r.status = 'in_progress' RETURNING r.id"
)
TIMEOUT = 10.0  # seconds a renewal may take before it counts as failed, at most
RETRIES = 3


class LeaseConnection:
    def __init__(self, connect: Callable[[], Awaitable[Conn]]) -> None:
        self._connect = connect
        self._conn: Conn | None = None
        self._loop = asyncio.new_event_loop()
        self._lock: asyncio.Lock | None = None  # one statement at a time on the connection
        self._closed = False
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="store-leases", daemon=True
        )
        self._thread.start()

    def renew(
        self, leases: Sequence[tuple[str, Fence]], ttl: float
    ) -> concurrent.futures.Future[list[str]]:
        """Callable from any thread; see PostgresStore.renew_leases."""
        if self._closed:
            fut: concurrent.futures.Future[list[str]] = concurrent.futures.Future()
            fut.set_exception(StoreError("the store is closed"))
            return fut
        ids = [response_id for response_id, _ in leases]
        owners = [fence.owner for _, fence in leases]
        epochs = [fence.epoch for _, fence in leases]

        async def renew(conn: Conn) -> list[str]:
            rows = await conn.fetch(RENEW, ids, owners, epochs, float(ttl))
            renewed = {row[0] for row in rows}
            return [response_id for response_id in ids if response_id in renewed]

        # A stalled connection must fail the renewal while the leases still hold, so that
        # the keeper tries again on a new connection before a live peer may take them. The
        # bound is the statement's: a new connection has its own (a slow link connects
        # slowly, but then renews in time).
        within = min(TIMEOUT, ttl / 3)
        return asyncio.run_coroutine_threadsafe(
            self._run("renew leases", renew, within), self._loop
        )

    async def _run(self, what: str, op: Callable[[Conn], Awaitable[T]], within: float) -> T:
        """Run `op` on the connection (connecting first if need be, within the connect's
        own timeout), each try within `within` seconds; every failure reaches the caller
        as a StoreError, and one of the connection (a timeout included) drops it: the
        next call connects again."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            try:
                with translate_asyncpg_errors(what):
                    for attempt in range(RETRIES - 1):
                        try:
                            conn = await self._connection()
                            async with asyncio.timeout(within):
                                return await op(conn)
                        except RETRYABLE:
                            await asyncio.sleep(0.01 * (attempt + 1))
                    conn = await self._connection()
                    async with asyncio.timeout(within):
                        return await op(conn)
            except StoreUnavailable:
                await self._drop()
                raise
            except StoreError:
                raise
            except Exception as exc:
                raise StoreError(f"{what}: {exc!r}") from exc

    async def _connection(self) -> Conn:
        if self._conn is None or self._conn.is_closed():
            self._conn = await self._connect()  # bounded by its own connect timeout
        return self._conn

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()

    def close(self) -> None:
        """Close the connection and end the thread (blocking: call it from a thread)."""
        if self._closed:
            return
        self._closed = True

        async def close() -> None:
            if self._conn is not None:
                try:
                    await asyncio.wait_for(self._conn.close(), 5)
                except Exception:  # gone already: nothing to close
                    self._conn.terminate()
                self._conn = None

        with contextlib.suppress(concurrent.futures.TimeoutError):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
