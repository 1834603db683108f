"""Where asyncpg's errors become the store's (store/_errors.py draws the tree).

    asyncpg error                                   store error
    integrity violation (SQLSTATE class 23)         Conflict
    connection lost or refused (class 08, OSError,  StoreUnavailable: the database cannot
      a closed connection), too many connections      be written now; a later try may work
      or a full disk (class 53), an administrator
      or crash shutdown (class 57), a read-only
      server (25006, a standby after a fail-over),
      a timeout, serialization failures and
      deadlocks still failing after our retries
    any other                                       StoreError

Opening the store is sorted apart (`unreachable`): a connection that cannot be made now
(refused, a timeout, a host name that does not resolve, class 08, a server starting up
or shutting down, too many connections) is StoreUnreachableError, retried by the server;
anything else (a wrong password, an unknown role or database) is StoreOpenError, fatal.

`translate_asyncpg_errors` is the one place where that happens: the transaction runner,
the reads and the lease thread all run inside it. Serialization failures and deadlocks
(40001, 40P01) are retried first, inside it (`RETRYABLE`).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from asyncpg import exceptions as pgerr

from .._errors import Conflict, StoreError, StoreUnavailable


# A transaction that failed for one of these did nothing and may simply run again: a
# serialization failure, a deadlock, a cached statement whose result changed under it
# (another host migrated the schema; asyncpg prepares it again on the next try), or a
# session lost before its COMMIT was sent.
class LostInTransaction(Exception):
    """The connection was lost inside a transaction, before its COMMIT was sent."""


RETRYABLE: tuple[type[Exception], ...] = (
    LostInTransaction,
    pgerr.SerializationError,
    pgerr.DeadlockDetectedError,
    pgerr.InvalidCachedStatementError,
)

_UNAVAILABLE: tuple[type[BaseException], ...] = (
    LostInTransaction,  # past its retries
    pgerr.PostgresConnectionError,  # class 08, a connection lost mid-operation included
    pgerr.InsufficientResourcesError,  # class 53: disk full, out of memory, too many clients
    pgerr.OperatorInterventionError,  # class 57: shutdown, crash, cancelled by an admin
    pgerr.ReadOnlySQLTransactionError,  # a standby: a fail-over has not finished
    pgerr.TransactionRollbackError,  # serialization failures and deadlocks past retries
    asyncpg.InterfaceError,  # the client's side of a closed connection
    OSError,  # refused, reset, unreachable
    TimeoutError,  # no connection from the pool, or no answer, in time
)


# Why a connection could not be opened, when trying again later may work.
_UNREACHABLE: tuple[type[BaseException], ...] = (
    OSError,  # refused, reset, no route, a host name that does not resolve (gaierror)
    TimeoutError,  # no answer in time
    pgerr.PostgresConnectionError,  # class 08: the connection failed or dropped
    pgerr.CannotConnectNowError,  # 57P03: the database system is starting up
    pgerr.AdminShutdownError,  # 57P01: it is shutting down
    pgerr.CrashShutdownError,  # 57P02: it is restarting after a crash
    pgerr.InsufficientResourcesError,  # class 53: too many connections, out of memory
    asyncpg.InterfaceError,  # the client's side of a connection closed under it
)
# ... but not these, which the same settings meet again: a URL asyncpg cannot use, a
# server that does not speak the protocol, a feature either side lacks.
_NOT_UNREACHABLE: tuple[type[BaseException], ...] = (
    asyncpg.ClientConfigurationError,
    asyncpg.UnsupportedClientFeatureError,
    asyncpg.UnsupportedServerFeatureError,
    pgerr.ProtocolViolationError,
    ssl.SSLError,  # an OSError, but a certificate or TLS setting does not fix itself
    PermissionError,  # a Unix socket this user may not open
)
# asyncpg's own words for TLS the server will not speak (a plain ConnectionError).
_TLS_REFUSED = ("rejected SSL upgrade", "SSL exchange")


def unreachable(exc: BaseException) -> bool:
    """Whether opening the store failed because its server cannot be reached now."""
    if any(words in str(exc) for words in _TLS_REFUSED):
        return False
    return isinstance(exc, _UNREACHABLE) and not isinstance(exc, _NOT_UNREACHABLE)


def from_asyncpg(what: str, exc: BaseException) -> StoreError:
    """Ours for an asyncpg (or socket) error; its cause is set by `raise ... from exc`."""
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, pgerr.IntegrityConstraintViolationError):
        return Conflict(f"{what}: {exc}")
    if isinstance(exc, _UNAVAILABLE):
        return StoreUnavailable(f"{what}: the database is unavailable ({describe(exc)})")
    return StoreError(f"{what}: {describe(exc)}")


def is_translatable(exc: BaseException) -> bool:
    return isinstance(exc, (asyncpg.PostgresError, *_UNAVAILABLE))


@contextmanager
def translate_asyncpg_errors(what: str) -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        if not is_translatable(exc):
            raise
        raise from_asyncpg(what, exc) from exc


def redact(url: str) -> str:
    """`url` without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    state = getattr(exc, "sqlstate", None)
    return f"{text} [SQLSTATE {state}]" if state else text
