"""The poll without the framework (PollShortcut): `GET /v1/responses/{id}` with no query
string, for a response the caller can see, is answered with its stored snapshot straight
through ASGI.

A client waiting on a background response polls this route a few times per response, and
on it Starlette's routing, its request and response objects and its exception middleware
cost about as much as the read itself. Only that success is answered here. Anything else
(a query string, another method or path, an unknown id, a store error, an app still
waiting for its store) goes on to the routes, which answer it as they always did, so the
two paths cannot disagree about an error; a miss costs the route one more read.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Receive, Scope, Send

from ._context import AppContext
from ._responses_routes import ResponseIdConvertor, get_response

_POLL_PATH = re.compile(rf"/(?:v1/)?responses/({ResponseIdConvertor.regex})")


class PollShortcut:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope["query_string"]:
            found = _POLL_PATH.fullmatch(scope["path"])
            body = None if found is None else await _snapshot(scope, found.group(1))
            if body is not None:
                scope["endpoint"] = get_response  # the route it stands for, in metrics and log
                # The headers Starlette's Response gives the route's answer, in its order.
                length = str(len(body)).encode()
                headers = [(b"content-length", length), (b"content-type", b"application/json")]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


async def _snapshot(scope: Scope, response_id: str) -> bytes | None:
    """The response's snapshot, or None for the route to answer."""
    ctx: AppContext | None = getattr(scope["app"].state, "context", None)
    if ctx is None:  # waiting for its store: the route gives the 503
        return None
    try:
        snapshot, _ = await ctx.runtime.snapshot(response_id, scope["state"].get("tenant", ""))
    except Exception:  # the route reads again and renders the error itself
        return None
    return snapshot.encode()
