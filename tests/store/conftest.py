"""The store contract's fixtures: a store of each backend, SQLite (one file) and
PostgreSQL (a throwaway server, tests/support/postgres.py). A test that asks for `store`
runs on both; one that asks for `open_backend` may open several stores on one database
(several processes, or hosts)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from store import open_store
from store.postgres import open_postgres_store

Opener = Callable[[], AbstractAsyncContextManager[Any]]


@pytest.fixture(params=["sqlite", "postgres"])
def open_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens a store of the backend under test; every call opens the same database (a
    second call is a second process, or host, on it)."""
    if request.param == "sqlite":
        path = tmp_path / "store.db"
        return lambda: open_store(path)
    url = request.getfixturevalue("postgres_url")
    return lambda: open_postgres_store(url)


@pytest.fixture
async def store(open_backend: Opener) -> AsyncIterator[Any]:
    async with open_backend() as opened:
        yield opened
