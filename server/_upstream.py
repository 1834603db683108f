"""An OpenAI-compatible Chat Completions client (vLLM, llama.cpp, Ollama, LM Studio,
OpenAI, Azure OpenAI), streaming, as a `recovery.Model`.

It maps Responses items to chat messages, the request's parameters to their Chat
Completions names (`text.format` -> `response_format`, `reasoning.effort` ->
`reasoning_effort`, logprobs, ...), and the streamed chunks back to model events,
including the `model` (and `service_tier`) the upstream says answered. Streamed
`reasoning_content` (vLLM, DeepSeek, llama.cpp) or `reasoning` (Ollama, OpenRouter)
deltas become the step's reasoning, `refusal` deltas its refusal. Input images and
files become `image_url` and `file` parts; reasoning items of the input are not sent
(Chat Completions has no field for them: each step reasons afresh).
Failures become `recovery.ModelError`: 429, 5xx, connection errors and timeouts are
`retryable` (with the upstream's `Retry-After`), and the runtime retries them with
backoff; nothing here retries those by itself, so there is one retry budget per step.
The one retry made here: with `truncation: "auto"`, a request the upstream refuses for
its context window is sent again without its oldest turns.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import AsyncIterator, Callable
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

from ._chat_messages import chat_messages, drop_oldest_turns, tool_choice

Item = dict[str, Any]


class UpstreamModel:
    """Streams steps from `{base_url}/chat/completions`. `model` pins the upstream model
    name; without it the request's `model` passes through."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.name = model or "upstream"
        self._pinned = model
        self.passes_model_through = model is None  # metrics label calls by request model
        # Told each answer's HTTP status, or "timeout" / "connection_error" (metrics).
        self.on_status: Callable[[str], None] = lambda status: None
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        body = chat_request(request, self._pinned)
        messages, dropped = body["messages"], 0
        while True:
            try:
                async for event in self._stream(body):
                    yield event
                return
            except ContextOverflow:
                if request.truncation != "auto":
                    raise
                dropped = max(1, dropped * 2)  # 1, 2, 4, ... turns: few attempts
                shorter = drop_oldest_turns(messages, dropped)
                if shorter is None or len(shorter) == len(body["messages"]):
                    raise
                body = {**body, "messages": shorter}

    async def _stream(self, body: dict[str, Any]) -> AsyncIterator[ModelEvent]:
        try:
            async with self._client.stream("POST", "/chat/completions", json=body) as response:
                self.on_status(str(response.status_code))
                if response.status_code >= 400:
                    await response.aread()
                    raise _status_error(response)
                async for event in _chunks_to_events(response, self._pinned):
                    yield event
        except httpx.TimeoutException as exc:
            self.on_status("timeout")
            raise ModelError(
                f"The upstream model timed out ({type(exc).__name__}).", retryable=True
            ) from exc
        except httpx.TransportError as exc:
            self.on_status("connection_error")
            raise ModelError(
                f"The upstream model could not be reached ({type(exc).__name__}: {exc}).",
                retryable=True,
            ) from exc


def chat_request(request: ModelRequest, pinned: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": pinned or request.model,
        "messages": chat_messages(request.instructions, request.input),
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool["name"],
                    "description": tool.get("description") or "",
                    "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
                },
            }
            for tool in request.tools
        ]
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
            _text(chunk.get("model")) or pinned or reported.model,
            _text(chunk.get("service_tier")) or reported.service_tier,
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
            reasoning = _text(delta.get("reasoning_content")) or _text(delta.get("reasoning"))
            if reasoning:
                yield ReasoningDelta(reasoning)
            if delta.get("content"):
                yield TextDelta(delta["content"], _logprobs(choice.get("logprobs")))
            if delta.get("refusal"):  # the model declined: a refusal part, not text
                yield RefusalDelta(delta["refusal"])
            for call in delta.get("tool_calls") or []:
                index = int(call.get("index", 0))
                function = call.get("function") or {}
                if index not in calls:
                    # Some servers omit the id: a fresh one, never `call_<index>`, which
                    # the next step would reuse (sharing a journal entry and history).
                    call_id = call.get("id") or new_id("call")
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


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _logprobs(logprobs: Any) -> tuple[dict[str, Any], ...]:
    """A chunk's `logprobs.content` as Responses logprobs (the same fields; `bytes`,
    which Chat Completions may leave null, filled in)."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    return tuple(_logprob(entry, top=True) for entry in content or () if isinstance(entry, dict))


def _logprob(entry: dict[str, Any], *, top: bool) -> dict[str, Any]:
    token = str(entry.get("token", ""))
    found = entry.get("bytes")
    value: dict[str, Any] = {
        "token": token,
        "logprob": float(entry.get("logprob") or 0.0),
        "bytes": found if isinstance(found, list) else list(token.encode()),
    }
    if top:
        alternatives = entry.get("top_logprobs") or ()
        value["top_logprobs"] = [
            _logprob(alt, top=False) for alt in alternatives if isinstance(alt, dict)
        ]
    return value


class ContextOverflow(ModelError):
    """The upstream refused the request for its context window (`truncation` decides)."""


# How OpenAI, vLLM, llama.cpp and LM Studio word a request too long for the context.
_OVERFLOW = (
    "context_length_exceeded",
    "context length",
    "context window",
    "context size",
    "context_size",
    "maximum context",
)


def _status_error(response: httpx.Response) -> ModelError:
    status = response.status_code
    detail = response.text[:300]
    message = f"The upstream model returned HTTP {status}: {detail}"
    if status in (400, 413) and any(marker in response.text.lower() for marker in _OVERFLOW):
        return ContextOverflow(message, code="invalid_prompt")
    if status == 429:
        return ModelError(
            message,
            code="rate_limit_exceeded",
            retryable=True,
            retry_after=retry_after(response.headers),
        )
    if status >= 500 or status == 408:
        return ModelError(message, retryable=True, retry_after=retry_after(response.headers))
    return ModelError(message, code="invalid_prompt" if status == 400 else "server_error")


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds from `retry-after-ms` or `Retry-After` (seconds or an HTTP date)."""
    if "retry-after-ms" in headers:
        try:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, parsed.timestamp() - time.time())
