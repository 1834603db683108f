"""The one pure ASGI middleware around every HTTP request (EdgeMiddleware)."""

from __future__ import annotations

import itertools
import json
import logging
import secrets
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._access import AccessLog
from ._auth import Keys, request_tenant
from ._connection import framed, unread_body
from ._errors import APIError
from ._logging import current_request_id

log = logging.getLogger("server")

# Request ids only need to be unique, not secret: a per-process prefix and a counter are
# cheaper than random bytes on every request.
_PROCESS = secrets.token_hex(6)
_SEQUENCE = itertools.count()

# Sent by hand: the app that would render it is what just failed.
_SERVER_ERROR = APIError(
    500, "The server had an error processing your request.", type="server_error"
)


class EdgeMiddleware:
    """Everything done around every HTTP request, in one wrapper of `send` (each layer of
    middleware costs a call per message, and a poll is a few hundred microseconds):

    - an `x-request-id` on the response, and in every log line of the request;
    - the caller's tenant from its API key (server/_auth.py), or a 401;
    - the access record when the response has ended (server/_access.py);
    - `Connection: close` when the request's body could not be read to its end
      (server/_connection.py);
    - the last line of defence: an unexpected exception becomes a 500 envelope (never a
      traceback) when no response has started.
    """

    def __init__(self, app: ASGIApp, keys: Keys, access: AccessLog) -> None:
        self.app = app
        self.keys = keys
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # not lifespan: its state is copied into every request
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        request_id = f"req_{_PROCESS}{next(_SEQUENCE):012x}"
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        current_request_id.set(request_id)
        body = unread_body(scope, receive)
        status = 0  # none started yet

        async def send_wrapped(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                message = {**message, "headers": headers}
                if body is not None:
                    message = await framed(message, body)
            await send(message)

        try:
            try:
                tenant = request_tenant(self.keys, scope)
            except APIError as refused:
                await _send_error(send_wrapped, refused)
                return
            if tenant is not None:
                state["tenant"] = tenant
            await self.app(scope, receive if body is None else body.receive, send_wrapped)
        except Exception:
            log.exception("unhandled error (request %s)", request_id)
            if status:
                raise
            await _send_error(send_wrapped, _SERVER_ERROR)
        finally:
            self.access.record(scope, status or 500, time.perf_counter() - began)


async def _send_error(send: Send, error: APIError) -> None:
    headers = [(b"content-type", b"application/json")]
    headers += [(k.encode(), v.encode()) for k, v in error.response_headers().items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(error.envelope()).encode()})
