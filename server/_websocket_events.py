"""What a WebSocket sends (docs/protocol.md section 13): the response events as they are
stored, each in a text message of its own and tagged with its lane's `stream_id`; the
`error` event, whose `error` is the HTTP error envelope's; and the steer events.

`Outbox` is the socket's one way out: one send lock, so that messages from concurrent
lanes never interleave inside a batch, and the time of the last activity, which the idle
timeout reads. Once the socket is closed (or the client has gone) sends are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketDisconnected

from recovery import EventRow

from ._errors import EXCEPTION_HANDLERS, APIError

log = logging.getLogger("server")

Event = dict[str, Any]

SERVER_ERROR = "The server had an error processing your request."


def tagged(row: EventRow, stream_id: str | None) -> str:
    """A stored event as sent on a socket: with its lane's `stream_id`, when it has one.
    (A stored event is a JSON object: the tag is spliced in before its closing brace.)"""
    if stream_id is None:
        return row.data
    return f'{row.data[:-1]},"stream_id":{json.dumps(stream_id)}}}'


def error_event(error: APIError, stream_id: str | None = None) -> Event:
    """The `error` event: the HTTP envelope's `error`, with the HTTP status beside it, and
    the error's headers (a 429's `retry-after`) inside it, as the SDK's `ResponseWsError`
    reads them."""
    event: Event = {"type": "error", "status": error.status, **error.envelope()}
    headers = error.response_headers()
    if headers:
        event["error"]["headers"] = headers
    if stream_id is not None:
        event["stream_id"] = stream_id
    return event


async def api_error(exc: Exception, websocket: WebSocket) -> APIError:
    """`exc` as the error the HTTP routes would answer for it: the app's exception
    handlers (server/_errors.py) render it, so the mapping stays in one place. Anything
    they do not know is a bug in the handling of one message: logged with its traceback,
    and a 500 `server_error` to the client."""
    if isinstance(exc, APIError):
        return exc
    for kind in type(exc).__mro__:
        handler = EXCEPTION_HANDLERS.get(kind)
        if handler is not None:
            request = Request({**websocket.scope, "type": "http", "method": "GET"})
            response = await handler(request, exc)
            error = json.loads(bytes(response.body))["error"]
            headers = {k: v for k, v in response.headers.items() if k == "retry-after"}
            return APIError(
                response.status_code,
                error["message"],
                type=error["type"],
                param=error["param"],
                code=error["code"],
                headers=headers,
            )
    log.exception("unexpected error handling a WebSocket message", exc_info=exc)
    return APIError(500, SERVER_ERROR, type="server_error", code="server_error")


def steer_event(
    kind: str, steer: dict[str, Any], sequence_number: int, stream_id: str | None, **fields: Any
) -> Event:
    """A `response.steer.<kind>` event (`accepted`, `pending`, `failed`)."""
    event: Event = {
        "type": f"response.steer.{kind}",
        "sequence_number": sequence_number,
        "steer": steer,
        **fields,
    }
    if stream_id is not None:
        event["stream_id"] = stream_id
    return event


def steer_failed(
    code: str,
    message: str,
    *,
    target_id: str,
    input: Any,
    steer_id: str | None = None,
    sequence_number: int = 0,
    stream_id: str | None = None,
) -> Event:
    """`response.steer.failed`: the input handed back, with the steer's id once it had one."""
    steer: dict[str, Any] = {"input": input, "previous_response_id": target_id}
    if steer_id is not None:
        steer["id"] = steer_id
    error = {"code": code, "message": message, "type": "invalid_request_error"}
    return steer_event("failed", steer, sequence_number, stream_id, error=error)


class Outbox:
    """The socket's sends, one at a time, and the time of its last activity."""

    def __init__(self, websocket: WebSocket) -> None:
        self._websocket = websocket
        self._lock = asyncio.Lock()
        self.closed = False
        self.last_activity = time.monotonic()

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    async def rows(self, batch: Sequence[EventRow], stream_id: str | None) -> int:
        """Send a batch of stored events in order; the characters sent."""
        texts = [tagged(row, stream_id) for row in batch]
        async with self._lock:
            for text in texts:
                await self._send(text)
        self.touch()
        return sum(len(text) for text in texts)

    async def event(self, event: Event) -> None:
        text = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
        async with self._lock:
            await self._send(text)
        self.touch()

    async def error(self, exc: Exception, stream_id: str | None = None) -> None:
        await self.event(error_event(await api_error(exc, self._websocket), stream_id))

    async def close(self, code: int, reason: str) -> None:
        async with self._lock:
            if self.closed:
                return
            self.closed = True
            with contextlib.suppress(WebSocketDisconnect, WebSocketDisconnected):
                await self._websocket.close(code, reason)

    async def _send(self, text: str) -> None:
        if self.closed:
            return
        try:
            await self._websocket.send_text(text)
        except (WebSocketDisconnect, WebSocketDisconnected):
            self.closed = True  # the client has gone: the reader sees it and ends the socket
