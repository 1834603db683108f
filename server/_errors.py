"""HTTP errors in the OpenAI envelope (docs/protocol.md section 9).

`APIError` is what routes raise; `error_response` renders it. The exception handlers
installed by the app map the runtime's errors and anything unexpected to the envelope
in this one place. No response ever carries a traceback.
"""

from __future__ import annotations

import logging

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.types import Scope

from recovery import (
    InvalidRequest,
    LaneLocked,
    ModelError,
    NotFound,
    QueueFull,
    StoreError,
    Unavailable,
)

log = logging.getLogger("server")


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def envelope(self) -> dict[str, dict[str, str | None]]:
        """The OpenAI error envelope: the one place its shape is written."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response_headers(self) -> dict[str, str]:
        """The error's own headers, and whether the SDK should retry (a conflict or a
        server error; only 502 and 503 are worth retrying)."""
        headers = dict(self.headers)
        if self.status == 409 or self.status >= 500:
            headers.setdefault("x-should-retry", "true" if self.status in (502, 503) else "false")
        return headers


def error_response(error: APIError) -> JSONResponse:
    return JSONResponse(
        error.envelope(), status_code=error.status, headers=error.response_headers()
    )


async def handle_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    return error_response(exc)


async def handle_invalid_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, InvalidRequest)
    return error_response(APIError(400, exc.message, param=exc.param, code=exc.code))


async def handle_not_found(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, NotFound)
    return error_response(APIError(404, exc.message, param=exc.param, code=exc.code))


async def handle_unavailable(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Unavailable)
    return error_response(APIError(503, exc.message, type="server_error"))


# A model's failure outside a response (a summary for POST /v1/responses/compact), by code:
# the upstream refused the request (400) or is rate-limited (429); anything else is the
# upstream's failure, worth retrying (502).
_MODEL_STATUS = {"invalid_prompt": 400, "rate_limit_exceeded": 429}


async def handle_model_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ModelError)
    status = _MODEL_STATUS.get(exc.code, 502)
    kind = {400: "invalid_request_error", 429: "rate_limit_error"}.get(status, "server_error")
    return error_response(APIError(status, exc.message, type=kind, code=exc.code))


async def handle_lane_locked(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, LaneLocked)
    return error_response(APIError(409, exc.message, param=exc.param, code="conversation_locked"))


async def handle_queue_full(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, QueueFull)
    return error_response(
        APIError(
            429,
            exc.message,
            code="queue_full",
            headers={"retry-after": str(max(1, round(exc.retry_after)))},
        )
    )


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 404:
        message = f"Invalid URL ({request.method} {request.url.path})"
        return error_response(APIError(404, message, headers=headers))
    if exc.status_code == 405:
        # Starlette's `Allow` names the methods of the first route of the path only; each
        # method of a path is a route of its own here, so list them all (RFC 9110), in
        # one header in place of Starlette's.
        headers = {name: value for name, value in headers.items() if name.lower() != "allow"}
        headers["allow"] = ", ".join(sorted(_allowed_methods(request.app.routes, request.scope)))
        message = f"Method {request.method} is not allowed on {request.url.path}."
        return error_response(APIError(405, message, code="method_not_allowed", headers=headers))
    return error_response(APIError(exc.status_code, str(exc.detail), headers=headers))


def _allowed_methods(routes: list[BaseRoute], scope: Scope) -> set[str]:
    allowed: set[str] = set()
    for route in routes:
        match, child = route.matches(scope)
        if match is Match.NONE:
            continue
        if isinstance(route, Mount):
            allowed |= _allowed_methods(route.routes, {**scope, **child})
        elif isinstance(route, Route) and route.methods:
            allowed |= route.methods
    return allowed


async def handle_store_error(request: Request, exc: Exception) -> Response:
    log.error("store error on %s %s: %s", request.method, request.url.path, exc)
    return error_response(
        APIError(503, "The store is unavailable; try again.", type="server_error")
    )


async def handle_client_disconnect(request: Request, exc: Exception) -> Response:
    # The client left before its request's body arrived: no one reads an answer, and the
    # access log and metrics count it as the client's (499, nginx's usage), not a 500.
    log.info("the client disconnected before its request body was read")
    return Response(status_code=499)


EXCEPTION_HANDLERS = {
    APIError: handle_api_error,
    InvalidRequest: handle_invalid_request,
    NotFound: handle_not_found,
    Unavailable: handle_unavailable,
    ModelError: handle_model_error,
    LaneLocked: handle_lane_locked,
    QueueFull: handle_queue_full,
    HTTPException: handle_http_exception,
    StoreError: handle_store_error,
    ClientDisconnect: handle_client_disconnect,
}
