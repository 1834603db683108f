"""HTTP/1.1 keep-alive after an answer that does not wait for the request body.

Many answers are given before the request body has been read: a 405 or 404 from the
router, a 401 for a missing key, a 413 from `read_body` (on the declared length, or
part-way through a chunked body). Hypercorn then closes the connection once the response
is written, because the rest of the body is still unread (its `_maybe_recycle`), but the
response does not say so: a client that keeps connections alive (httpx, the OpenAI SDK)
puts the connection back in its pool and may send its next request on it before the
close arrives, and that request fails with "Server disconnected without sending a
response". Under load the gap between the response and the close is wide enough to hit.

The edge middleware (server/_middleware.py) watches every HTTP/1.x request with a body;
when the app answers before reading that body to its end, it first reads and drops the
rest of that body, a little of it (DRAIN_BYTES) for a short while (DRAIN_SECONDS): a
small body that is on its way (the usual case) is then read whole, and the connection
stays usable. Otherwise the response says `Connection: close`, so that no client reuses
a connection the server is closing.
"""

from __future__ import annotations

import asyncio

from starlette.types import Message, Receive, Scope

DRAIN_BYTES = 64 * 1024  # the most of an unread body read (and dropped) to keep a connection
DRAIN_SECONDS = 1.0  # the longest a response waits for the rest of an unread body


def unread_body(scope: Scope, receive: Receive) -> RequestBody | None:
    """The request's body to watch, for an HTTP/1.x request that has one; else None."""
    if scope.get("http_version") not in ("1.0", "1.1") or not _has_body(scope):
        return None
    return RequestBody(receive, _declared_length(scope))


async def framed(start: Message, body: RequestBody) -> Message:
    """The `http.response.start` message, saying `Connection: close` when the request's
    body could not be read to its end."""
    if await body.drained():
        return start
    headers = [
        (name, value) for name, value in start.get("headers", []) if name.lower() != b"connection"
    ]
    headers.append((b"connection", b"close"))
    return {**start, "headers": headers}


class RequestBody:
    """The request's `receive`, knowing whether the body's last part has been received."""

    def __init__(self, receive: Receive, declared: int | None) -> None:
        self._receive = receive
        self._declared = declared
        self._received = 0  # body bytes received so far
        self._ended = False  # the last part of the body (or the disconnect) was received
        self._disconnect: Message | None = None  # kept for the app if a drain received it
        self._waiting = 0  # calls of the app's own to `receive` under way

    async def receive(self) -> Message:
        if self._disconnect is not None:
            return self._disconnect
        self._waiting += 1
        try:
            return await self._next()
        finally:
            self._waiting -= 1

    async def drained(self) -> bool:
        """Whether the whole body has been received, after reading (and dropping) what
        is left of it within DRAIN_BYTES and DRAIN_SECONDS."""
        if self._ended:
            return self._disconnect is None
        if self._waiting:  # the app is reading too (a stream waiting for the disconnect)
            return False
        if self._declared is not None and self._declared - self._received > DRAIN_BYTES:
            return False
        budget = self._received + DRAIN_BYTES
        try:
            async with asyncio.timeout(DRAIN_SECONDS):
                while not self._ended and self._received <= budget:
                    await self._next()
        except TimeoutError:
            return False
        return self._ended and self._disconnect is None

    async def _next(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request":
            self._received += len(message.get("body", b""))
            if not message.get("more_body", False):
                self._ended = True
        elif message["type"] == "http.disconnect":
            self._ended = True
            self._disconnect = message
        return message


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name.lower() == b"transfer-encoding":
            return True
        if name.lower() == b"content-length" and value.strip() not in (b"", b"0"):
            return True
    return False


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name.lower() == b"content-length" and value.strip().isdigit():
            return int(value)
    return None
