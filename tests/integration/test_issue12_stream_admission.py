"""Issue 12, item 2: a create refused for want of a stream slot stores and runs nothing.

The bug: with the tenant's stream slots full (`--max-streams-per-tenant`), `POST
/v1/responses` with `stream: true` (with or without `background`) answered 429
`too_many_streams`, but only after the response had been stored and started: it ran to
completion, and since the SDK retries a 429, every retry made another one. The fix: the
create takes its stream slot before anything is stored, and gives it back if the create
fails; a refusal stores nothing and runs nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import StartServer
from tests.support.peek import count
from tests.support.server import ServerProcess
from tests.support.stores import Location
from tests.support.waiting import poll_until


def stored(db: Location) -> int:
    return count(db, "SELECT count(*) FROM responses")


@pytest.fixture
def server(start_server: StartServer) -> ServerProcess:
    return start_server("--max-streams-per-tenant", "1")


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30.0) as client:
        yield client


@pytest.fixture
def slot_taken(http: httpx.Client) -> Iterator[str]:
    """The tenant's one stream slot, held by a slow background stream; yields its id."""
    body = {"model": "embedded", "input": "[[delay 200]] hold", "background": True}
    with http.stream("POST", "/v1/responses", json={**body, "stream": True}) as held:
        assert held.status_code == 200
        lines = held.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        yield first.split('"id":"', 1)[1].split('"', 1)[0]


def wait_until_a_stream_is_admitted(http: httpx.Client) -> httpx.Response:
    # The closed stream gives its slot back once its handler ends.
    return poll_until(
        lambda: http.post(
            "/v1/responses", json={"model": "embedded", "input": "again", "stream": True}
        ),
        lambda response: response.status_code != 429,
        "the stream slot given back",
        deadline=15,
        interval=0.05,
    )


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param({}, id="foreground"),
        pytest.param({"background": True}, id="background"),
    ],
)
def test_a_stream_refused_for_want_of_a_slot_stores_and_runs_nothing(
    server: ServerProcess, http: httpx.Client, slot_taken: str, extra: dict[str, Any]
) -> None:
    before = stored(server.db)

    refused = http.post(
        "/v1/responses", json={"model": "embedded", "input": "x", "stream": True, **extra}
    )

    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "too_many_streams"
    assert refused.headers["retry-after"] == "1"
    time.sleep(0.3)  # a response wrongly started would be stored (and running) by now
    assert stored(server.db) == before, "a refused create stored a response"


def test_a_create_without_a_stream_needs_no_slot(
    server: ServerProcess, http: httpx.Client, slot_taken: str
) -> None:
    created = http.post("/v1/responses", json={"model": "embedded", "input": "x"})
    assert created.status_code == 200, created.text
    assert created.json()["status"] == "completed"


def test_a_retried_refusal_creates_the_response_once(server: ServerProcess) -> None:
    """What the SDK does on a 429: the same request again, until a slot is free."""
    body = {"model": "embedded", "input": "retried", "stream": True}
    headers = {"Idempotency-Key": "issue12-retry"}
    with httpx.Client(base_url=server.url, timeout=30.0) as http:
        holder = {"model": "embedded", "input": "[[delay 100]] hold", "stream": True}
        with http.stream("POST", "/v1/responses", json=holder) as held:
            assert held.status_code == 200
            before = stored(server.db)
            for _ in range(3):
                refused = http.post("/v1/responses", json=body, headers=headers)
                assert refused.status_code == 429, refused.text
            assert stored(server.db) == before
        answer = poll_until(
            lambda: http.post("/v1/responses", json=body, headers=headers),
            lambda response: response.status_code != 429,
            "the stream slot given back",
            deadline=15,
            interval=0.05,
        )
        assert answer.status_code == 200, answer.text
        assert "response.completed" in answer.text
    assert stored(server.db) == before + 1  # the retried request, once


def test_a_create_that_fails_after_taking_its_slot_gives_it_back(http: httpx.Client) -> None:
    body = {"model": "embedded", "input": "x", "stream": True, "conversation": "conv_nope"}
    for _ in range(3):  # one slot: a slot kept by a failed create would refuse the next
        failed = http.post("/v1/responses", json=body)
        assert failed.status_code == 404, failed.text
    admitted = http.post("/v1/responses", json={"model": "embedded", "input": "x", "stream": True})
    assert admitted.status_code == 200, admitted.text


def test_the_slot_comes_back_when_the_stream_ends(http: httpx.Client) -> None:
    holder = {"model": "embedded", "input": "[[delay 100]] hold", "stream": True}
    with http.stream("POST", "/v1/responses", json=holder) as held:
        assert held.status_code == 200
        refused = http.post(
            "/v1/responses", json={"model": "embedded", "input": "x", "stream": True}
        )
        assert refused.status_code == 429
    admitted = wait_until_a_stream_is_admitted(http)
    assert admitted.status_code == 200, admitted.text
