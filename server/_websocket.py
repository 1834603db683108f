"""WebSocket mode (docs/protocol.md section 13): `client.responses.connect()` on
`/v1/responses` (and `/responses`). This module admits a socket; `_websocket_session.py`
serves it, on `_websocket_lanes.py` (its responses), `_websocket_steer.py` (its steers)
and `_websocket_events.py` (what it sends).

The upgrade is checked as an HTTP request is: the API key in its `Authorization` header
gives the tenant (server/_auth.py; the middleware there sees HTTP requests only, so the
socket checks its own upgrade the same way, with the same answers), and a tenant holds at
most `--ws-max-sockets-per-tenant` open sockets on this process. A refusal is the HTTP
answer to the upgrade (401, 429, a 503 while the store is not reachable yet) in the
OpenAI envelope. One access-log line is written per socket, when it ends (or is refused).
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from starlette.routing import BaseRoute, WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from ._auth import OPEN_TENANT, Keys, authenticate
from ._context import context
from ._errors import APIError, error_response
from ._settings import Settings
from ._websocket_events import error_event
from ._websocket_session import Session

access_log = logging.getLogger("server.access")

_CHALLENGE = {"www-authenticate": 'Bearer realm="durable-responses"'}


def routes(keys: Keys) -> list[BaseRoute]:
    """The WebSocket route, for the app's route table (under /v1 and at the root)."""
    return [WebSocketRoute("/responses", SocketEndpoint(keys))]


class SocketEndpoint:
    """The ASGI app of the route: admits a socket, then runs its `Session`."""

    def __init__(self, keys: Keys) -> None:
        self._keys = keys
        self._open: Counter[str] = Counter()  # sockets per tenant, on this process

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        websocket = WebSocket(scope, receive, send)
        settings: Settings = websocket.app.state.settings
        started = time.perf_counter()
        who: str | None = None
        status = 101
        try:
            who = self._tenant(websocket)
            ctx = context(websocket)  # a 503 while the store is not reachable yet
            self._take(who, settings.ws_max_sockets_per_tenant)
        except APIError as error:
            status = error.status
            await _refuse(websocket, error)
        else:
            try:
                await websocket.accept()
                await Session(websocket, ctx, who).run()
            finally:
                self._give_back(who)
        finally:
            if settings.access_log:
                _log(websocket, status, who, time.perf_counter() - started)

    def _tenant(self, websocket: WebSocket) -> str:
        """The tenant of the upgrade's API key, as the edge middleware finds it for HTTP."""
        if self._keys.open:
            return OPEN_TENANT
        return authenticate(self._keys, websocket.headers.get("authorization", ""))

    def _take(self, who: str, limit: int) -> None:
        if self._open[who] >= limit:
            raise APIError(
                429,
                f"Too many open WebSockets ({limit}) for this API key; close one or retry.",
                code="too_many_streams",
                headers={"retry-after": "1"},
            )
        self._open[who] += 1

    def _give_back(self, who: str) -> None:
        self._open[who] -= 1
        if self._open[who] <= 0:
            del self._open[who]


async def _refuse(websocket: WebSocket, error: APIError) -> None:
    """Refuse the upgrade with an HTTP answer in the OpenAI envelope, where the server
    can send one (Hypercorn can: the ASGI `websocket.http.response` extension); else
    accept, send the `error` event and close with 1008 (policy: the SDK does not
    reconnect after it)."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(error_response(error))
        return
    await websocket.accept()
    await websocket.send_json(error_event(error))
    await websocket.close(code=1008, reason=error.message[:120])


def _log(websocket: WebSocket, status: int, who: str | None, seconds: float) -> None:
    """The socket's access-log line, as server/_access.py writes one per HTTP request:
    101 for a socket that was open (written when it closes), else the refusal's status."""
    path = websocket.scope.get("raw_path", b"").decode("latin-1") or websocket.url.path
    milliseconds = round(seconds * 1000, 1)
    access_log.info(
        "WEBSOCKET %s %d %.1fms route=websocket tenant=%s",
        path,
        status,
        milliseconds,
        "-" if who is None else who or '""',
        extra={
            "fields": {
                "method": "WEBSOCKET",
                "path": path,
                "route": "websocket",
                "status": status,
                "duration_ms": milliseconds,
                "tenant": who,
            }
        },
    )
