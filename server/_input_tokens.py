"""POST /v1/responses/input_tokens (`client.responses.input_tokens.count(...)`).

A count is validated as a create would be (the same rules, the same 400s), then counts
what the turn's first model call would be sent: the history its `previous_response_id`
or `conversation` brings, then its own input, with the latest compaction's summary in
place of what it summarised (`model_view`). The agent is the one its `model` names, as
for a create. A model that can count (`count_input_tokens(request)`, as the embedded
model does: the words its usage reports) answers; any other gets an estimate of about
four characters a token over the instructions, the items and the tools (recovery's
`count_tokens`). A Chat Completions upstream offers no count, so an upstream's count is
such an estimate.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from recovery import (
    Agent,
    ModelRequest,
    Workflow,
    count_tokens,
    model_view,
    normalize_input,
)

from ._context import context, read_body, tenant
from ._errors import APIError
from ._ids import Id
from ._json_body import parse_json
from ._request_models import ConversationRef
from ._request_rules import validate_create
from ._validation_base import Json, _Strict, validate
from ._validation_output import ReasoningParam, TextParam


class CountInputTokens(_Strict):
    """The body of `responses.input_tokens.count(...)`."""

    model: str | None = None
    input: str | list[Json] | None = None
    instructions: str | None = None
    tools: list[Json] | None = None
    tool_choice: Literal["none", "auto", "required"] | Json | None = None
    parallel_tool_calls: bool | None = None
    previous_response_id: Id | None = None
    conversation: Id | ConversationRef | None = None
    reasoning: ReasoningParam | None = None
    text: TextParam | None = None
    truncation: Literal["auto", "disabled"] | None = None
    personality: Annotated[str, Field(max_length=64)] | None = None  # a style: no tokens


async def count_input_tokens(request: Request) -> Response:
    ctx = context(request)
    body = parse_json(await read_body(request, ctx.settings.max_body_bytes))
    model = validate(CountInputTokens, body).get("model")
    roster = ctx.runtime.roster
    if model is None and roster.default is None:
        raise APIError(
            400,
            "Missing required parameter: 'model'.",
            param="model",
            code="missing_required_parameter",
        )
    # The create's own rules, on the same parameters: what it would refuse is refused here.
    asked = {name: value for name, value in body.items() if name != "personality"}
    params = validate_create(
        {**asked, "model": model or ""},
        max_input_items=ctx.settings.max_input_items,
        max_tools=ctx.settings.max_tools,
        max_attachment_bytes=ctx.settings.max_attachment_bytes,
    )
    params["input"] = normalize_input(params["input"])
    agent, history, given = await ctx.runtime.check_create(params, tenant=tenant(request))
    counted = ModelRequest(
        model=model or "",
        instructions=params.get("instructions") or _instructions(agent),
        input=model_view(history + given),
        tools=_tools(agent) + params["tools"],
    )
    tokens = await count_tokens(
        roster.model_of(agent) if isinstance(agent, Agent) else None, counted
    )
    return JSONResponse({"object": "response.input_tokens", "input_tokens": tokens})


def _instructions(agent: Agent | Workflow) -> str | None:
    return agent.instructions if isinstance(agent, Agent) else None


def _tools(agent: Agent | Workflow) -> list[Json]:
    return [tool.definition() for tool in agent.tools] if isinstance(agent, Agent) else []
