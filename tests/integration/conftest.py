"""Fixtures of the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_responses_upstream import FakeResponsesUpstream
from tests.support.fake_upstream import FakeUpstream
from tests.support.stores import backend_params


@pytest.fixture
def fake_upstream() -> Iterator[FakeUpstream]:
    """A scripted OpenAI-compatible Chat Completions server on a loopback port."""
    upstream = FakeUpstream().start()
    yield upstream
    upstream.stop()


@pytest.fixture
def responses_upstream() -> Iterator[FakeResponsesUpstream]:
    """A scripted Responses API server on a loopback port, as strict as OpenAI's."""
    upstream = FakeResponsesUpstream().start()
    yield upstream
    upstream.stop()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test here that starts a server runs on SQLite and on PostgreSQL."""
    backend_params(metafunc)
