"""Pure ASGI middleware: an `x-request-id` on every response, and the last line of
defence that turns an unexpected exception into a 500 envelope (never a traceback)."""

from __future__ import annotations

import itertools
import json
import logging
import secrets

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._errors import APIError
from ._logging import current_request_id

log = logging.getLogger("server")

# Request ids only need to be unique, not secret: a per-process prefix and a counter are
# cheaper than random bytes on every request.
_PROCESS = secrets.token_hex(6)
_SEQUENCE = itertools.count()

_SERVER_ERROR = APIError(
    500, "The server had an error processing your request.", type="server_error"
)
# Sent by hand: the app that would render it is what just failed.
_SERVER_ERROR_BODY = json.dumps(_SERVER_ERROR.envelope()).encode()
_SERVER_ERROR_HEADERS = [
    (b"content-type", b"application/json"),
    *((name.encode(), value.encode()) for name, value in _SERVER_ERROR.response_headers().items()),
]


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = f"req_{_PROCESS}{next(_SEQUENCE):012x}"
        scope.setdefault("state", {})["request_id"] = request_id
        current_request_id.set(request_id)
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception("unhandled error (request %s)", request_id)
            if started:
                raise
            await send_with_id(
                {
                    "type": "http.response.start",
                    "status": _SERVER_ERROR.status,
                    "headers": _SERVER_ERROR_HEADERS,
                }
            )
            await send_with_id({"type": "http.response.body", "body": _SERVER_ERROR_BODY})
