"""`translate_sqlite_errors`: the one place where `sqlite3` errors become the store's
(`from_sqlite`, which it uses, tells a failing disk from a failed statement)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from .._errors import Conflict, StoreError, StoreUnavailable

# SQLite's primary result codes for a database that cannot be written, whatever the
# statement: the disk is full, an I/O error, the file cannot be opened or is read-only.
_UNAVAILABLE = frozenset(
    {sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY}
)


def from_sqlite(what: str, exc: sqlite3.Error) -> StoreError:
    """Ours for a `sqlite3` error (its cause is set by `raise ... from exc`)."""
    if isinstance(exc, sqlite3.IntegrityError):
        return Conflict(f"{what}: {exc}")
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in _UNAVAILABLE:
        return StoreUnavailable(f"{what}: {exc}")
    return StoreError(f"{what}: {exc}")


@contextmanager
def translate_sqlite_errors(what: str) -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        raise from_sqlite(what, exc) from exc
