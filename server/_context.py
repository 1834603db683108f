"""What every route needs from the running app: the runtime, its conversations and
read-only views, the settings, and the models it serves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request

from recovery import Conversations, Inspector, Runtime

from ._errors import APIError
from ._settings import Settings

if TYPE_CHECKING:
    from ._models_routes import ModelCatalog
    from ._sse import StreamSlots


@dataclass(frozen=True, slots=True)
class AppContext:
    runtime: Runtime
    conversations: Conversations
    inspector: Inspector
    settings: Settings
    streams: StreamSlots
    models: ModelCatalog  # what /v1/models lists


def context(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.context
    return ctx


def tenant(request: Request) -> str:
    """The caller's tenant, resolved from its API key by the edge middleware ("" when open)."""
    value: str = request.scope.get("state", {}).get("tenant", "")
    return value


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing more than `limit` bytes without reading them all."""
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
