"""Waiting in tests: poll until something holds, or fail saying what never came.

Every wait polls at an interval (an interval, not synchronization) until its deadline,
then raises AssertionError naming what it waited for. The response waits read a response
through whichever client the test holds: the openai SDK (an SDK `Response` back), an
`httpx.Client` with the server as its base URL, or the server's URL (the JSON body back).
Waiting for a server process to be healthy is `tests/support/server.py`'s `wait_healthy`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeVar, overload

import httpx
import openai
from openai.types.responses import Response

T = TypeVar("T")

TERMINAL: Final = frozenset({"completed", "failed", "cancelled", "incomplete"})
DEADLINE: Final = 30.0  # seconds: generous for a loaded machine
Client = openai.OpenAI | httpx.Client | str


def _said(what: str | Callable[[], str]) -> str:
    return what if isinstance(what, str) else what()


def wait_until(
    condition: Callable[[], object],
    what: str | Callable[[], str],
    deadline: float = DEADLINE,
    interval: float = 0.02,
) -> None:
    """Poll `condition()` until it is true; fail after `deadline` seconds. `what` names
    what was awaited (a callable is asked only on failure, e.g. for a server's log)."""
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline}s waiting for {_said(what)}")
        time.sleep(interval)


def poll_until(
    read: Callable[[], T],
    done: Callable[[T], bool],
    what: str,
    deadline: float = DEADLINE,
    interval: float = 0.02,
) -> T:
    """Poll `read()` until `done(value)`, and return that value; fail after `deadline`
    seconds, showing the last value read."""
    end = time.monotonic() + deadline
    while True:
        value = read()
        if done(value):
            return value
        if time.monotonic() > end:
            raise AssertionError(f"{what} not reached after {deadline}s; last: {value!r:.2000}")
        time.sleep(interval)


def _read(client: Client, response_id: str) -> Response | dict[str, Any]:
    if isinstance(client, openai.OpenAI):
        return client.responses.retrieve(response_id)
    if isinstance(client, httpx.Client):
        body: dict[str, Any] = client.get(f"/v1/responses/{response_id}").json()
    else:
        body = httpx.get(f"{client}/v1/responses/{response_id}", timeout=10).json()
    return body


def _status(response: Response | dict[str, Any]) -> str:
    return str(response.status if isinstance(response, Response) else response["status"])


@overload
def wait_status(
    client: openai.OpenAI, response_id: str, status: str, deadline: float = ...
) -> Response: ...
@overload
def wait_status(
    client: httpx.Client | str, response_id: str, status: str, deadline: float = ...
) -> dict[str, Any]: ...
def wait_status(
    client: Client, response_id: str, status: str, deadline: float = DEADLINE
) -> Response | dict[str, Any]:
    """Poll the response until its status is `status`; return it."""
    return poll_until(
        lambda: _read(client, response_id),
        lambda response: _status(response) == status,
        f"status {status!r} of {response_id}",
        deadline,
        interval=0.05,
    )


@overload
def wait_terminal(client: openai.OpenAI, response_id: str, deadline: float = ...) -> Response: ...
@overload
def wait_terminal(
    client: httpx.Client | str, response_id: str, deadline: float = ...
) -> dict[str, Any]: ...
def wait_terminal(
    client: Client, response_id: str, deadline: float = DEADLINE
) -> Response | dict[str, Any]:
    """Poll the response until it is terminal (completed, failed, cancelled or
    incomplete); return it."""
    return poll_until(
        lambda: _read(client, response_id),
        lambda response: _status(response) in TERMINAL,
        f"a terminal status of {response_id}",
        deadline,
        interval=0.05,
    )


def wait_all_terminal(
    url: str, ids: Iterable[str], deadline: float, interval: float = 0.2
) -> dict[str, dict[str, Any]]:
    """Poll many responses until every one is terminal; their final bodies by id (each
    read until it was terminal, and not again)."""
    pending, finals = list(ids), {}
    end = time.monotonic() + deadline
    with httpx.Client(base_url=url, timeout=30) as http:
        while True:
            for response_id in pending:
                body: dict[str, Any] = http.get(f"/v1/responses/{response_id}").json()
                if body.get("status") in TERMINAL:
                    finals[response_id] = body
            pending = [i for i in pending if i not in finals]
            if not pending:
                return finals
            if time.monotonic() > end:
                raise AssertionError(
                    f"{len(pending)} responses are not terminal after {deadline}s: {pending[:5]}"
                )
            time.sleep(interval)
