"""POST /v1/responses/compact (`client.responses.compact(...)`): a history compacted into its
user messages and one compaction item that holds the model's summary of the rest
(recovery's `Runtime.compact`; what the compaction item is: recovery/_compaction.py).

The body is OpenAI's: `model` (required; it names the agent whose model summarises),
`input`, `instructions`, `previous_response_id`, and what only tunes OpenAI's service
(`prompt_cache_key`, `prompt_cache_retention`, `prompt_cache_options`, `service_tier`,
`image`). Any other parameter is a 400 naming it (`conversation` too: OpenAI's compact
takes none), and the rest is checked by the create's own rules, with the same 400s.
Nothing is stored.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from recovery import normalize_input

from ._context import context, read_body, tenant
from ._ids import Id
from ._json_body import parse_json
from ._request_models import ImageOptions
from ._request_rules import validate_create
from ._validation_base import Json, _Strict, validate


class CompactPromptCacheOptions(_Strict):
    ttl: Literal["30m"] | None = None
    mode: Literal["implicit", "explicit"] | None = None


class CompactRequest(_Strict):
    """The body of `responses.compact(...)`."""

    model: str
    input: str | list[Json] | None = None
    instructions: str | None = None
    previous_response_id: Id | None = None
    prompt_cache_key: Annotated[str, Field(max_length=64)] | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    service_tier: (
        Literal["auto", "default", "flex", "scale", "priority", "fast", "ultrafast"] | None
    ) = None
    # They only tune OpenAI's service: checked (in the shapes of OpenAI's compact), then
    # dropped, as by a create.
    prompt_cache_options: CompactPromptCacheOptions | None = None
    image: ImageOptions | None = None


async def compact_response(request: Request) -> Response:
    ctx = context(request)
    body = parse_json(await read_body(request, ctx.settings.max_body_bytes))
    validate(CompactRequest, body)
    params = validate_create(
        body,
        max_input_items=ctx.settings.max_input_items,
        max_tools=ctx.settings.max_tools,
        max_attachment_bytes=ctx.settings.max_attachment_bytes,
    )
    params["input"] = normalize_input(params["input"])
    return JSONResponse(await ctx.runtime.compact(params, tenant=tenant(request)))
