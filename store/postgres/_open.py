"""`open_postgres_store`: the pool, the schema, the lease thread and the listener."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import asyncpg

from .._errors import StoreError, StoreOpenError, StoreUnreachableError
from ._database import Database
from ._errors import describe, redact, unreachable
from ._leases import LeaseConnection
from ._listen import Listener
from ._schema import migrate
from ._store import PostgresStore

if TYPE_CHECKING:
    from ._sql import Conn, Pool

log = logging.getLogger("store")

POOL_SIZE = 10
CONNECT_TIMEOUT = 10.0  # seconds to open one connection
COMMAND_TIMEOUT = 60.0  # seconds a statement may take before it counts as failed
CLOSE_TIMEOUT = 10.0
IDLE_IN_TRANSACTION_MS = 5000
SETTINGS = {
    "application_name": "durable-responses",
    "jit": "off",
    # A write of several statements holds its locks between them. A host stopped there
    # (SIGSTOP, a paused VM) keeps its connection open: PostgreSQL ends such a session
    # after this, rolling back, so another host can take its turns over (G8). Ours wait
    # inside a transaction only for the next statement; one held up longer by a blocked
    # event loop runs again (_database.py, LostInTransaction).
    "idle_in_transaction_session_timeout": str(IDLE_IN_TRANSACTION_MS),
    # A host cut off by the network is noticed in about 20 s, not the kernel's 2 hours.
    "tcp_keepalives_idle": "10",
    "tcp_keepalives_interval": "3",
    "tcp_keepalives_count": "3",
}


@asynccontextmanager
async def open_postgres_store(
    url: str, *, pool_size: int = POOL_SIZE
) -> AsyncIterator[PostgresStore]:
    """Open (migrating as needed) the PostgreSQL store at `url`
    (`postgresql://user:password@host:port/database`) for the duration of the block.
    Raises StoreUnreachableError if the server cannot be reached now (a later try may
    work), StoreOpenError with a clear message for anything else (a wrong password, a
    missing database, a schema newer than this server's). On leaving, the writes
    submitted already commit, then every connection is closed."""
    shown = redact(url)
    pool = await _open_pool(url, pool_size, shown)
    leases: LeaseConnection | None = None
    try:
        await _migrate(pool, shown)
        leases = LeaseConnection(lambda: _connect(url))
        body_error: BaseException | None = None
        instance = uuid.uuid4().hex[:16]
        async with asyncio.TaskGroup() as tg:
            db = Database(pool, tg)
            store = PostgresStore(db, leases, instance, shown)
            listener = Listener(
                lambda: _connect(url),
                instance,
                store._read_span,
                store._deliver,
                store._deliver_signal,
            )
            store._listener = listener
            listening = tg.create_task(listener.run())
            try:
                yield store
            except BaseException as exc:  # raised again below, not wrapped in a group
                body_error = exc
            finally:
                db.close()
                listening.cancel()
        if body_error is not None:
            raise body_error
    finally:
        if leases is not None:
            await asyncio.to_thread(leases.close)
        await _close_pool(pool)


async def _open_pool(url: str, size: int, shown: str) -> Pool:
    try:
        return await asyncpg.create_pool(
            url,
            min_size=1,
            max_size=size,
            timeout=CONNECT_TIMEOUT,
            command_timeout=COMMAND_TIMEOUT,
            server_settings=SETTINGS,
            reset=_keep_session,
        )
    except Exception as exc:
        if unreachable(exc):
            raise StoreUnreachableError(
                f"cannot reach the PostgreSQL store at {shown}: {describe(exc)}"
            ) from exc
        raise StoreOpenError(
            f"cannot open the PostgreSQL store at {shown}: {describe(exc)}"
        ) from exc


async def _keep_session(conn: Conn) -> None:
    """Release a pooled connection as it is. Ours keep no session state (no settings, no
    session-level advisory locks, no LISTEN, no cursors), and asyncpg rolls back an open
    transaction before this, so its default reset, one more round trip after every
    operation, would undo nothing."""


async def _migrate(pool: Pool, shown: str) -> None:
    try:
        async with pool.acquire(timeout=CONNECT_TIMEOUT) as conn:
            await migrate(conn)
    except StoreOpenError as exc:
        raise StoreOpenError(f"the PostgreSQL store at {shown}: {exc}") from exc
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
        if unreachable(exc):  # the connection was lost while migrating
            raise StoreUnreachableError(
                f"cannot reach the PostgreSQL store at {shown}: {describe(exc)}"
            ) from exc
        raise StoreOpenError(f"cannot migrate the PostgreSQL store at {shown}: {exc}") from exc


async def _connect(url: str) -> asyncpg.Connection[asyncpg.Record]:
    """A connection outside the pool (the listener's, the lease thread's)."""
    return await asyncpg.connect(
        url, timeout=CONNECT_TIMEOUT, command_timeout=COMMAND_TIMEOUT, server_settings=SETTINGS
    )


async def _close_pool(pool: Pool) -> None:
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await pool.close()
    except (TimeoutError, StoreError, asyncpg.PostgresError, OSError):
        log.warning("store: the PostgreSQL pool did not close in time; terminating it")
        with contextlib.suppress(Exception):
            pool.terminate()
