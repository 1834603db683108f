"""Where a test's server keeps its store: an SQLite file or a PostgreSQL database.

The integration and crash suites run on both backends (issue 15): their tests start
servers through `start_server` or the shared `server` (tests/conftest.py), which take a
store from `stores`, the session's maker of stores for the backend under test. A test that
shares one store between several server processes (a restart, a survivor, many hosts)
asks `new_store(name)` for a location, passes it as `db=` to each server, and reads it
with tests/support/peek.py.

- `sqlite`: a location is a file path, in the folder given.
- `postgres`: a location is the URL of a new database on the session's throwaway
  PostgreSQL (tests/support/postgres.py); it is dropped when its test ends.

`backend_params` parametrizes a suite over both; `sqlite_only(reason)` keeps a test on
SQLite (it is about SQLite itself: its file, its disk); `postgres_xfail(reason)` marks
the PostgreSQL case of a test as a known bug, strictly unless `strict=False`.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from tests.support.postgres import ThrowawayPostgres

# What `--db` takes: a file path (SQLite) or a postgresql:// URL.
Location = Path | str

BACKENDS = ("sqlite", "postgres")


def is_postgres(location: Location) -> bool:
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


def as_location(text: str) -> Location:
    """A location given as text (an environment variable): a URL stays one."""
    return text if is_postgres(text) else Path(text)


class Stores:
    """Makes new, empty stores of one backend, and drops them again."""

    def __init__(self, backend: str, cluster: ThrowawayPostgres | None) -> None:
        assert backend in BACKENDS, backend
        assert (backend == "postgres") == (cluster is not None)
        self.backend = backend
        self._cluster = cluster
        self._numbers = itertools.count()

    def new(self, name: str, folder: Path) -> Location:
        """A new store called after `name`: `folder / name.db` on SQLite, a new database
        on PostgreSQL (`folder` unused)."""
        if self._cluster is None:
            return folder / f"{name}.db"
        slug = re.sub(r"[^a-z0-9]+", "_", name.lower())[:40]
        return self._cluster.create_database(f"{slug}_{next(self._numbers)}")

    def drop(self, location: Location) -> None:
        """Drop a PostgreSQL database made by `new` (its servers must be gone; a
        connection left over is closed). A file stays with its test's folder."""
        if self._cluster is not None and is_postgres(location):
            self._cluster.drop_database(str(location).rsplit("/", 1)[1])

    def check(self, location: Location) -> None:
        """Fail a test that hands a file to a server while its suite runs on PostgreSQL:
        it would quietly test SQLite twice."""
        if self.backend == "postgres" and not is_postgres(location):
            raise AssertionError(
                f"{location} is an SQLite file, but this test runs on PostgreSQL: take the "
                "store from new_store(), or mark the test sqlite_only(reason)"
            )


def backend_params(metafunc: pytest.Metafunc) -> None:
    """Run each test of the calling suite that starts a server on both backends (only on
    SQLite if it is marked sqlite_only), grouped by backend (session scope)."""
    if "backend" not in metafunc.fixturenames:
        return
    backends = ["sqlite"] if metafunc.definition.get_closest_marker("sqlite_only") else BACKENDS
    metafunc.parametrize("backend", backends, indirect=True, scope="session", ids=backends)


def mark_postgres_xfails(items: list[pytest.Item]) -> None:
    """A test (or one of its params) marked postgres_xfail(reason) is a strict xfail in
    its PostgreSQL case only; postgres_xfail(reason, strict=False) for a bug that shows
    only now and then (a soak's random schedule)."""
    for item in items:
        marker = item.get_closest_marker("postgres_xfail")
        callspec = getattr(item, "callspec", None)
        if marker is None or callspec is None or callspec.params.get("backend") != "postgres":
            continue
        reason = marker.args[0] if marker.args else marker.kwargs["reason"]
        strict = marker.kwargs.get("strict", True)
        item.add_marker(pytest.mark.xfail(strict=strict, reason=f"PostgreSQL: {reason}"))
