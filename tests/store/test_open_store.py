"""`open_store` with a `sqlite://` URL: the file it opens is the one the URL names, read as
SQLAlchemy reads it (`sqlite:///relative`, `sqlite:////absolute`), never a file named after
the URL itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import SQLiteStore, open_store, sqlite_path
from tests.store.test_sqlite import new_response


def databases(directory: Path) -> list[str]:
    """The database files below `directory`, relative to it: where a store put its file."""
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*.db"))


async def check_opens_sqlite_at(location: str, expected: Path) -> None:
    """The store at `location` is SQLite in the file `expected`, and keeps what it is given
    across a reopen."""
    assert sqlite_path(location) == expected
    async with open_store(location) as store:
        assert isinstance(store, SQLiteStore)
        await store.create_response(new_response("resp_url"), [], [])
    async with open_store(location) as store:
        record = await store.get_response("resp_url", "")
        assert record is not None and record.status == "queued"


async def test_an_absolute_sqlite_url_opens_that_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    expected = tmp_path / "abs" / "store.db"
    location = f"sqlite:///{expected}"  # four slashes: tmp_path is absolute
    assert location.startswith("sqlite:////")

    await check_opens_sqlite_at(location, expected)
    assert databases(tmp_path) == ["abs/store.db"]  # none named after the URL itself


async def test_a_relative_sqlite_url_opens_that_file_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    await check_opens_sqlite_at("sqlite:///data/store.db", Path("data/store.db"))
    assert databases(tmp_path) == ["data/store.db"]


async def test_a_plain_path_opens_sqlite(tmp_path: Path) -> None:
    await check_opens_sqlite_at(str(tmp_path / "store.db"), tmp_path / "store.db")
    assert databases(tmp_path) == ["store.db"]
