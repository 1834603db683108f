"""What every route needs from the running app: the runtime, its conversations and
read-only views, the settings, and the models it serves; a 503 while there is none yet
(the store was not reachable at start-up: server/_store_wait.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import HTTPConnection, Request

from recovery import Conversations, Inspector, Runtime

from ._errors import APIError
from ._settings import Settings

if TYPE_CHECKING:
    from ._models_routes import ModelCatalog
    from ._sse import StreamSlots
    from ._store_wait import StoreWait


@dataclass(frozen=True, slots=True)
class AppContext:
    runtime: Runtime
    conversations: Conversations
    inspector: Inspector
    settings: Settings
    streams: StreamSlots
    models: ModelCatalog  # what /v1/models lists


def context(request: HTTPConnection) -> AppContext:
    """The running app's context; an APIError 503 with `Retry-After` while the app waits
    for its store (nothing is stored, nothing runs)."""
    ctx: AppContext | None = getattr(request.app.state, "context", None)
    if ctx is None:
        raise not_serving(store_wait(request))
    return ctx


def store_wait(request: HTTPConnection) -> StoreWait | None:
    """The wait for a store that was unreachable at start-up, if the app had to wait."""
    wait: StoreWait | None = getattr(request.app.state, "store_wait", None)
    return wait


def not_serving(wait: StoreWait | None) -> APIError:
    if wait is not None and wait.failure is not None:
        message = "The store cannot be opened; the server is stopping."
    else:
        message = "The store is not reachable yet; send the request again later."
    retry = wait.retry_after if wait is not None else 1
    return APIError(503, message, type="server_error", headers={"retry-after": str(retry)})


def tenant(request: Request) -> str:
    """The caller's tenant, resolved from its API key by the edge middleware ("" when open)."""
    value: str = request.scope.get("state", {}).get("tenant", "")
    return value


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing more than `limit` bytes without reading them all, and
    any `Content-Encoding` but `identity` (a compressed body would otherwise be read as
    bad JSON, and a header claiming one be ignored)."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding != "identity":
        raise APIError(
            415,
            f"Content-Encoding '{encoding}' is not supported: send the body uncompressed.",
            code="unsupported_content_encoding",
        )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(size: int, limit: int) -> APIError:
    return APIError(
        413,
        f"The request body is too large ({size} bytes or more; the limit is {limit} bytes).",
        code="request_too_large",
    )
