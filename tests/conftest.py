"""Shared fixtures: real server processes on loopback ports, and clients for them."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.postgres import INSTALL_HINT, ThrowawayPostgres, find_bindir
from tests.support.server import ServerProcess
from tests.support.stores import Location, Stores, mark_postgres_xfails

StartServer = Callable[..., ServerProcess]
NewStore = Callable[[str], Location]

_databases = itertools.count()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_postgres_xfails(items)


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> str:
    """The store backend of the servers a test starts: SQLite, unless its suite runs on
    both (tests/integration and tests/crash parametrize it, tests/support/stores.py)."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture(scope="session")
def stores(backend: str, request: pytest.FixtureRequest) -> Stores:
    """The session's maker of stores of the backend under test."""
    cluster = request.getfixturevalue("postgres") if backend == "postgres" else None
    return Stores(backend, cluster)


@pytest.fixture
def new_store(stores: Stores, tmp_path: Path) -> Iterator[NewStore]:
    """`new_store(name)`: a new empty store of the backend under test, for servers to
    share (pass it as `db=`); an SQLite file in the test's folder, or a PostgreSQL
    database dropped after the test."""
    made: list[Location] = []

    def new(name: str) -> Location:
        made.append(stores.new(name, tmp_path))
        return made[-1]

    yield new
    for location in made:
        stores.drop(location)


@pytest.fixture
def start_server(tmp_path: Path, stores: Stores, new_store: NewStore) -> Iterator[StartServer]:
    """Start a server of one's own: on a store of its own, unless `db` is given (from
    `new_store`, or an SQLite file in a test marked sqlite_only)."""
    started: list[ServerProcess] = []

    def start(
        *args: str,
        db: Location | None = None,
        env: dict[str, str] | None = None,
        wait: bool = True,
    ) -> ServerProcess:
        location = new_store(f"server{len(started)}") if db is None else db
        stores.check(location)
        log = tmp_path / f"server{len(started)}.log"
        server = ServerProcess(location, args=args, env=env, log=log)
        started.append(server)
        return server.start(wait=wait)

    yield start
    for server in started:
        server.kill()


@pytest.fixture(scope="session")
def postgres() -> Iterator[ThrowawayPostgres]:
    """A real PostgreSQL for the session, in a temporary directory on a loopback port.
    Without PostgreSQL installed the tests that need it skip, except under CI, where the
    skip would hide them: there they fail."""
    bindir = find_bindir()
    if bindir is None:
        if os.environ.get("CI"):
            pytest.fail(INSTALL_HINT)
        pytest.skip(INSTALL_HINT)
    cluster = ThrowawayPostgres(bindir)
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def postgres_url(postgres: ThrowawayPostgres, request: pytest.FixtureRequest) -> str:
    """The URL of a new empty database of its own for this test."""
    return postgres.create_database(f"t{next(_databases)}")


@contextlib.contextmanager
def serving(stores: Stores, folder: Path, *args: str) -> Iterator[ServerProcess]:
    """A server on a new store of the backend under test, for a fixture that outlives one
    test (module or session); stopped, and its store dropped, afterwards."""
    location = stores.new(folder.name, folder)
    process = ServerProcess(location, args=args, log=folder / "server.log").start()
    try:
        yield process
        process.stop()
    finally:
        process.kill()
        stores.drop(location)


@pytest.fixture(scope="session")
def server(stores: Stores, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server shared by the tests that only need a running server with defaults, on
    the backend under test."""
    with serving(stores, tmp_path_factory.mktemp("shared")) as process:
        yield process


def make_client(base_url: str, **kwargs: object) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{base_url}/v1", api_key="test-key", max_retries=0, timeout=30.0, **kwargs
    )


@pytest.fixture
def client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    with make_client(server.url) as sdk:
        yield sdk


@pytest.fixture
def strict_client(server: ServerProcess) -> Iterator[openai.OpenAI]:
    """An SDK client that fails on any missing or mistyped field."""
    with make_client(server.url, _strict_response_validation=True) as sdk:
        yield sdk


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30.0) as raw:
        yield raw
