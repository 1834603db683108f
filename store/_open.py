"""`open_store(location)`: the store a location names. A file path or `sqlite:///path`
opens SQLite (the default); `postgresql://user:password@host:port/database` (or
`postgres://`) opens PostgreSQL, for several server processes on several hosts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from ._contract import Store
from .sqlite import open_sqlite_store

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_SQLITE_SCHEME = "sqlite://"


def is_postgres(location: str | Path) -> bool:
    return str(location).startswith(_POSTGRES_SCHEMES)


def sqlite_path(location: str | Path) -> Path | None:
    """The SQLite file a location names (None for PostgreSQL). `sqlite:///data/x.db` is
    relative, `sqlite:////srv/x.db` absolute, as SQLAlchemy writes them."""
    text = str(location)
    if is_postgres(text):
        return None
    if text.startswith(_SQLITE_SCHEME):
        text = text.removeprefix(_SQLITE_SCHEME).removeprefix("/")
    return Path(text)


def redacted(location: str | Path) -> str:
    """The location without its password, for logs."""
    text = str(location)
    if not is_postgres(text):
        return text
    parts = urlsplit(text)
    if parts.password is None:
        return text
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


@asynccontextmanager
async def open_store(location: str | Path) -> AsyncIterator[Store]:
    """Open (creating and migrating as needed) the store at `location` for the block.
    Raises StoreOpenError with a clear message if it cannot be used."""
    path = sqlite_path(location)
    if path is None:
        # Imported here: the PostgreSQL backend and its driver cost some 50-70 ms of
        # start-up (python -X importtime), which a SQLite server need not pay.
        from .postgres import open_postgres_store

        async with open_postgres_store(str(location)) as pg:
            yield pg
    else:
        async with open_sqlite_store(path) as lite:
            yield lite
