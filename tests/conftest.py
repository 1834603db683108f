"""Shared fixtures: real server processes on loopback ports, and clients for them."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.postgres import INSTALL_HINT, ThrowawayPostgres, find_bindir
from tests.support.server import ServerProcess

StartServer = Callable[..., ServerProcess]

_databases = itertools.count()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[StartServer]:
    """Start a server of one's own (its own SQLite file unless `db` is given)."""
    started: list[ServerProcess] = []

    def start(
        *args: str, db: Path | None = None, env: dict[str, str] | None = None, wait: bool = True
    ) -> ServerProcess:
        path = db or tmp_path / f"server{len(started)}.db"
        server = ServerProcess(path, args=args, env=env, log=tmp_path / f"server{len(started)}.log")
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


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server shared by the tests that only need a running server with defaults."""
    folder = tmp_path_factory.mktemp("shared-server")
    process = ServerProcess(folder / "responses.db").start()
    yield process
    process.stop()


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
