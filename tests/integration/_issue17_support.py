"""Sockets for the WebSocket tests (issue 17): the openai SDK's `responses.connect()`, or a
raw `websockets` client for what the SDK cannot send (malformed frames, the
`response.follow` extension). Either way every message received is kept as the JSON the
server sent, and the SDK's own parser must read it too (`parse_event`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import websockets
from openai import AsyncOpenAI
from openai.resources.responses.responses import AsyncResponsesConnection

from tests.integration._responses_support import checked_events
from tests.support.stream_rules import parse_sse
from tests.support.waiting import DEADLINE

MODEL = "embedded"
KEY = "test-key"
TERMINAL = frozenset({"response.completed", "response.failed", "response.incomplete"})

Event = dict[str, Any]
Predicate = Callable[[Event], bool]


def http(url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, timeout=DEADLINE)


async def replay(url: str, response: str, after: int = -1) -> list[Event]:
    """The response's event log over HTTP (GET ?stream=true&starting_after=N)."""
    async with http(url) as client:
        answer = await client.get(f"/v1/responses/{response}?stream=true&starting_after={after}")
    assert answer.status_code == 200, answer.text
    return parse_sse(answer.text)


async def get(url: str, path: str) -> Any:
    """The JSON of GET `path` (200 expected)."""
    async with http(url) as client:
        answer = await client.get(path)
    assert answer.status_code == 200, answer.text
    return answer.json()


def sdk(url: str, key: str = KEY) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=DEADLINE)


def ws_url(url: str, path: str = "/v1/responses") -> str:
    return url.replace("http://", "ws://", 1) + path


class Socket:
    """One socket, and every event it has received (`events`), in order."""

    def __init__(
        self,
        send_text: Callable[[str], Awaitable[None]],
        recv_bytes: Callable[[], Awaitable[bytes | str]],
        parse: Callable[[bytes], object],
    ) -> None:
        self._send_text = send_text
        self._recv_bytes = recv_bytes
        self._parse = parse
        self.events: list[Event] = []

    async def send(self, event: Event | str | bytes) -> None:
        if isinstance(event, dict):
            event = json.dumps(event)
        await self._send_text(event)  # type: ignore[arg-type]

    async def create(self, **body: Any) -> None:
        await self.send({"type": "response.create", "model": MODEL, **body})

    async def steer(self, target: str, input: Any) -> None:
        await self.send({"type": "response.steer", "previous_response_id": target, "input": input})

    async def recv(self, within: float = DEADLINE) -> Event:
        raw = await asyncio.wait_for(self._recv_bytes(), within)
        data = raw.encode() if isinstance(raw, str) else raw
        self._parse(data)  # the SDK reads it
        event: Event = json.loads(data)
        self.events.append(event)
        return event

    async def until(self, predicate: Predicate, what: str, within: float = DEADLINE) -> list[Event]:
        """The events received from now up to the first that matches, included."""
        got: list[Event] = []
        end = time.monotonic() + within
        while True:
            left = end - time.monotonic()
            try:
                event = await self.recv(max(left, 0.01))
            except TimeoutError:
                raise AssertionError(f"no {what} within {within}s; got {types(got)}") from None
            got.append(event)
            if predicate(event):
                return got

    async def response(self, stream_id: str | None = None) -> list[Event]:
        """The events from now up to a terminal event (of lane `stream_id`, if given)."""
        return await self.until(
            lambda e: (
                e["type"] in TERMINAL and (stream_id is None or e.get("stream_id") == stream_id)
            ),
            f"terminal event (lane {stream_id})",
        )

    async def quiet(self, seconds: float) -> list[Event]:
        """What arrives within `seconds` (usually asserted to be nothing)."""
        got: list[Event] = []
        end = time.monotonic() + seconds
        with contextlib.suppress(TimeoutError):
            while (left := end - time.monotonic()) > 0:
                got.append(await self.recv(left))
        return got


@contextlib.asynccontextmanager
async def connect(url: str, key: str = KEY) -> AsyncIterator[Socket]:
    """A socket opened by the openai SDK (`client.responses.connect()`)."""
    async with sdk(url, key) as client, client.responses.connect() as conn:
        yield _sdk_socket(conn)


def _sdk_socket(conn: AsyncResponsesConnection) -> Socket:
    return Socket(conn.send_raw, conn.recv_bytes, conn.parse_event)


@contextlib.asynccontextmanager
async def raw(url: str, key: str | None = KEY) -> AsyncIterator[Socket]:
    """A socket of a plain `websockets` client, for what the SDK does not send."""
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    async with websockets.connect(ws_url(url), additional_headers=headers, max_size=None) as ws:
        parser = AsyncResponsesConnection.parse_event

        async def recv() -> bytes:
            return await ws.recv(decode=False)

        yield Socket(ws.send, recv, lambda data: parser(None, data))  # type: ignore[arg-type]


def types(events: list[Event]) -> list[str]:
    return [e["type"] for e in events]


def of_lane(events: list[Event], stream_id: str | None) -> list[Event]:
    return [e for e in events if e.get("stream_id") == stream_id]


def unlaned(events: list[Event]) -> list[Event]:
    """The events without their `stream_id` tag: what an HTTP stream sends."""
    return [{k: v for k, v in e.items() if k != "stream_id"} for e in events]


def as_published(value: Any) -> Any:
    """`value` with incomplete_details.reason "steered" read as "max_output_tokens": the
    vendored OpenAI schema's enum does not list the reason a steered response ends with
    (as tests/integration/test_steering.py explains); every other field is checked."""
    if isinstance(value, dict):
        if value.get("incomplete_details") == {"reason": "steered"}:
            value = {**value, "incomplete_details": {"reason": "max_output_tokens"}}
        return {k: as_published(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_published(v) for v in value]
    return value


def checked(events: list[Event], **kwargs: Any) -> list[Event]:
    """Schema and stream-order checks of one response's events, as over HTTP."""
    checked_events(as_published(unlaned(events)), **kwargs)
    return events


def split_responses(events: list[Event]) -> list[list[Event]]:
    """A lane's events cut into its responses' (each starts with response.created)."""
    responses: list[list[Event]] = []
    for event in events:
        if event["type"] == "response.created":
            responses.append([])
        if event["type"].startswith("response.steer") or event["type"] == "error":
            continue
        responses[-1].append(event)
    return responses


def text_of(events: list[Event]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def response_id(events: list[Event]) -> str:
    created = next(e for e in events if e["type"] == "response.created")
    value: str = created["response"]["id"]
    return value
