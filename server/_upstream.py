"""An OpenAI-compatible Chat Completions client (vLLM, llama.cpp, Ollama, LM Studio,
OpenAI, Azure OpenAI), streaming, as a `recovery.Model`.

It maps Responses items to chat messages, the request's parameters to their Chat
Completions names (`text.format` -> `response_format`, `reasoning.effort` ->
`reasoning_effort`, logprobs, ...), and the streamed chunks back to model events,
including the `model` (and `service_tier`) the upstream says answered. Function tools
keep `strict`, and `tool_choice` `allowed_tools` becomes Chat Completions' own
`allowed_tools` choice, so the model may call only the tools it lists; a tool field Chat
Completions has no place for fails the step, never dropped (`chat_tool`). Streamed
`reasoning_content` (vLLM, DeepSeek, llama.cpp) or `reasoning` (Ollama, OpenRouter)
deltas become the step's reasoning, `refusal` deltas its refusal. Input images and
files become `image_url` and `file` parts; reasoning items of the input are not sent
(Chat Completions has no field for them: each step reasons afresh).
The HTTP client, failures as `recovery.ModelError` (retryable or not) and
`truncation: "auto"` are shared with the Responses upstream (`_upstream_http.py`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from recovery import (
    FunctionCallDelta,
    Incomplete,
    ModelError,
    ModelEvent,
    ModelInfo,
    ModelRequest,
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
    Usage,
    new_id,
)

from ._chat_messages import chat_messages, tool_choice
from ._upstream_http import Body, HTTPUpstream, logprobs, text


class UpstreamModel(HTTPUpstream):
    """Streams steps from `{base_url}/chat/completions`. `model` pins the upstream model
    name; without it the request's `model` passes through."""

    path = "/chat/completions"
    history = "messages"

    def request_body(self, request: ModelRequest) -> Body:
        return chat_request(request, self._pinned)

    def events(self, response: httpx.Response) -> AsyncIterator[ModelEvent]:
        return _chunks_to_events(response, self._pinned)


def chat_request(request: ModelRequest, pinned: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": pinned or request.model,
        "messages": chat_messages(request.instructions, request.input),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [chat_tool(tool) for tool in request.tools]
        body["tool_choice"] = tool_choice(request.tool_choice)
        body["parallel_tool_calls"] = request.parallel_tool_calls
    for key, value in (
        ("temperature", request.temperature),
        ("top_p", request.top_p),
        ("max_tokens", request.max_output_tokens),
        ("presence_penalty", request.presence_penalty),
        ("frequency_penalty", request.frequency_penalty),
        ("reasoning_effort", request.reasoning_effort),
        ("verbosity", request.verbosity),
        ("service_tier", request.service_tier),
        ("prompt_cache_key", request.prompt_cache_key),
        ("prompt_cache_retention", request.prompt_cache_retention),
        ("safety_identifier", request.safety_identifier),
        ("user", request.user),
    ):
        if value is not None:
            body[key] = value
    if request.text_format is not None:
        body["response_format"] = response_format(request.text_format)
    if request.logprobs:
        body["logprobs"] = True
        if request.top_logprobs is not None:
            body["top_logprobs"] = request.top_logprobs
    return body


# A function without parameters: no arguments, and a schema strict mode takes.
_NO_PARAMETERS = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}


def chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A Responses function tool as a Chat Completions one: `name`, `description`,
    `parameters` and `strict`, the fields its `function` has. A field of the tool that
    asks for more than that (`defer_loading`, `allowed_callers` other than `direct`,
    `output_schema`) fails the step rather than being left out (`_unsendable`)."""
    unsendable = _unsendable(tool)
    if unsendable is not None:
        raise ModelError(
            f"Function tool '{tool['name']}' sets '{unsendable}', which a Chat Completions "
            "upstream has no field for; leave it out, or use a Responses upstream.",
            code="invalid_prompt",
        )
    function = {
        "name": tool["name"],
        "description": tool.get("description") or "",
        "parameters": tool.get("parameters") or _NO_PARAMETERS,
    }
    if tool.get("strict") is not None:
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _unsendable(tool: dict[str, Any]) -> str | None:
    """The first field of `tool` that asks what a Chat Completions function cannot say.
    `defer_loading: false` and `allowed_callers: ["direct"]` are what every Chat
    Completions function already is."""
    if tool.get("defer_loading"):
        return "defer_loading"
    callers = tool.get("allowed_callers")
    if callers is not None and set(callers) != {"direct"}:
        return "allowed_callers"
    if tool.get("output_schema") is not None:
        return "output_schema"
    return None


def response_format(text_format: dict[str, Any]) -> dict[str, Any]:
    """A Responses `text.format` (json_schema or json_object) as a `response_format`."""
    if text_format["type"] != "json_schema":
        return {"type": text_format["type"]}
    schema = {"name": text_format["name"], "schema": text_format["schema"]}
    for key in ("description", "strict"):
        if text_format.get(key) is not None:
            schema[key] = text_format[key]
    return {"type": "json_schema", "json_schema": schema}


async def _chunks_to_events(
    response: httpx.Response, pinned: str | None = None
) -> AsyncIterator[ModelEvent]:
    """The model events of one streamed answer. A body that ends before `[DONE]` and
    before any `finish_reason` was cut off (a connection closed mid-answer reads as a
    clean end when the body has no length, e.g. HTTP/1.0): that is a retryable error, not
    a short answer. The model that answered is the chunks' `model`, else `pinned`."""
    calls: dict[int, tuple[str, str]] = {}  # tool call index -> (call id, name)
    truncated = False
    finished = False
    reported = ModelInfo()
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            finished = True
            break
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            raise ModelError(f"The upstream model sent malformed output: {data[:200]!r}") from None
        if not isinstance(chunk, dict):
            raise ModelError(f"The upstream model sent malformed output: {data[:200]!r}")
        if chunk.get("error"):
            raise ModelError(f"The upstream model failed mid-stream: {chunk['error']}")
        info = ModelInfo(
            text(chunk.get("model")) or pinned or reported.model,
            text(chunk.get("service_tier")) or reported.service_tier,
        )
        if info != reported:
            reported = info
            yield info
        usage = chunk.get("usage")
        if usage:
            prompt_details = usage.get("prompt_tokens_details") or {}
            completion_details = usage.get("completion_tokens_details") or {}
            yield Usage(
                input_tokens=int(usage.get("prompt_tokens") or 0),
                output_tokens=int(usage.get("completion_tokens") or 0),
                cached_tokens=int(prompt_details.get("cached_tokens") or 0),
                reasoning_tokens=int(completion_details.get("reasoning_tokens") or 0),
            )
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            reasoning = text(delta.get("reasoning_content")) or text(delta.get("reasoning"))
            if reasoning:
                yield ReasoningDelta(reasoning)
            if delta.get("content"):
                yield TextDelta(delta["content"], _choice_logprobs(choice.get("logprobs")))
            if delta.get("refusal"):  # the model declined: a refusal part, not text
                yield RefusalDelta(delta["refusal"])
            for call in delta.get("tool_calls") or []:
                index = int(call.get("index", 0))
                function = call.get("function") or {}
                if index not in calls:
                    # Some servers omit the id: a fresh one, never `call_<index>`, which
                    # the next step would reuse (sharing a journal entry and history).
                    # One given to two calls of this answer would merge them into one.
                    call_id = call.get("id") or new_id("call")
                    if any(call_id == used for used, _ in calls.values()):
                        call_id = new_id("call")
                    name = function.get("name")
                    if not name:
                        raise ModelError("The upstream model sent a tool call without a name.")
                    calls[index] = (call_id, name)
                call_id, name = calls[index]
                yield FunctionCallDelta(call_id, name, function.get("arguments") or "")
            if choice.get("finish_reason"):
                finished = True
            if choice.get("finish_reason") == "length":
                truncated = True
    if not finished:
        raise ModelError(
            "The upstream model's stream ended before the answer was finished.", retryable=True
        )
    if truncated:
        yield Incomplete("max_output_tokens")


def _choice_logprobs(found: Any) -> tuple[dict[str, Any], ...]:
    """A chunk's `logprobs.content` as Responses logprobs (the same fields; `bytes`,
    which Chat Completions may leave null, filled in)."""
    return logprobs(found.get("content") if isinstance(found, dict) else None)
