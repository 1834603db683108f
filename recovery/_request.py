"""What a turn's request parameters mean for its model calls and its budgets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._agent import Agent
from ._compaction import model_view
from ._model import Model, ModelRequest

Item = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Budgets:
    steps: int  # model calls one turn may make
    tool_calls: int  # server tool calls one turn may make, over all its steps


def budgets(agent: Agent, params: Item) -> Budgets:
    """The agent's budgets, `max_tool_calls` lowered by the request's."""
    requested = params.get("max_tool_calls")
    tool_calls = agent.max_tool_calls
    if requested is not None:
        tool_calls = min(tool_calls, requested)
    return Budgets(steps=agent.max_steps, tool_calls=tool_calls)


def model_request(agent: Agent, model: Model, params: Item, items: list[Item]) -> ModelRequest:
    """The request of one model call: the turn's request parameters, the agent's
    instructions and tools (the server's, then the client's), and `items` as input (with
    the latest compaction's summary in place of what it summarised: `model_view`)."""
    declared = [t for t in params.get("tools") or [] if t.get("type") == "function"]
    server = [tool.definition() for tool in agent.tools]
    text = params.get("text") or {}
    text_format = text.get("format")
    top_logprobs = params.get("top_logprobs")
    include = params.get("include") or ()
    logprobs = "message.output_text.logprobs" in include or bool(top_logprobs)
    reasoning = params.get("reasoning") or {}
    return ModelRequest(
        model=params.get("model") or model.name,
        instructions=params.get("instructions") or agent.instructions,
        input=model_view(items),
        tools=server + declared,
        tool_choice=params.get("tool_choice") or "auto",
        parallel_tool_calls=params.get("parallel_tool_calls", True) is not False,
        temperature=params.get("temperature"),
        top_p=params.get("top_p"),
        max_output_tokens=params.get("max_output_tokens"),
        presence_penalty=params.get("presence_penalty"),
        frequency_penalty=params.get("frequency_penalty"),
        text_format=text_format if (text_format or {}).get("type") != "text" else None,
        verbosity=text.get("verbosity"),
        reasoning_effort=reasoning.get("effort"),
        reasoning_summary=reasoning.get("summary") or reasoning.get("generate_summary"),
        reasoning_context=reasoning.get("context"),
        reasoning_mode=reasoning.get("mode"),
        encrypted_reasoning="reasoning.encrypted_content" in include,
        logprobs=logprobs,
        top_logprobs=top_logprobs if logprobs else None,
        truncation=params.get("truncation") or "disabled",
        service_tier=params.get("service_tier"),
        prompt_cache_key=params.get("prompt_cache_key"),
        prompt_cache_retention=params.get("prompt_cache_retention"),
        safety_identifier=params.get("safety_identifier"),
        user=params.get("user"),
    )
