"""An OpenAI-compatible Responses API client (OpenAI, Azure OpenAI, vLLM, Ollama),
streaming, as a `recovery.Model` (`--upstream-api responses`).

Each model call is one stateless streamed `POST {base_url}/responses` with `store: false`
and the step's whole item history as `input`: the upstream is only the model, and the
runtime, the journal and recovery stay this server's. The request's parameters keep their
Responses names (`text`, `reasoning`, `include`, `truncation`, ...). The streamed events
become model events, item by item: messages (each with its `phase`; text with its
logprobs, refusal), reasoning (summary parts and raw reasoning, and the item's
`encrypted_content` once it is done), function calls, usage (cached, cache-write and
reasoning tokens), the incomplete reason, and the `model` and `service_tier` that
answered. A `response.failed` or `error` event is a `ModelError` with the upstream's
code and message, retryable for `server_error`, `rate_limit_exceeded` or no code. HTTP failures,
retries and `truncation` are shared with the Chat Completions upstream
(`_upstream_http.py`).

Deliberate divergences (docs/protocol.md sections 3, 4 and 7):

- Input items are sent in the shapes OpenAI takes without a stored response: message ids
  only on assistant messages (an id OpenAI refuses, one not starting `msg`, is left out),
  with their `phase`; none on calls and outputs, and no server fields. A reasoning item
  is sent only when it carries `encrypted_content` (the upstream's, kept when `include`
  asked for it, under the upstream's id, which the content names) and the item it led to
  follows it: without the content, OpenAI looks its id up, and with `store: false` finds
  nothing (a 404); without its item, OpenAI refuses it.
- A function call is taken whole, once its item is done: a call cut off by
  `max_output_tokens` is not a call (the turn ends `incomplete`), never run half-read.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from recovery import (
    FunctionCallDelta,
    Incomplete,
    MessageStart,
    ModelError,
    ModelEvent,
    ModelInfo,
    ModelRequest,
    ReasoningDelta,
    ReasoningDone,
    ReasoningStart,
    RefusalDelta,
    TextDelta,
    Usage,
    new_id,
)

from ._upstream_http import Body, HTTPUpstream, logprobs, text

Item = dict[str, Any]


class ResponsesUpstreamModel(HTTPUpstream):
    """Streams steps from `{base_url}/responses`, statelessly. `model` pins the upstream
    model name; without it the request's `model` passes through."""

    path = "/responses"
    history = "input"
    # Compaction items another server made (OpenAI's) are sent as they are: OpenAI reads
    # its own. This server's are never sent: the model is sent their summary instead.
    takes_compaction_items = True

    def request_body(self, request: ModelRequest) -> Body:
        return responses_request(request, self._pinned)

    def events(self, response: httpx.Response) -> AsyncIterator[ModelEvent]:
        return _stream_events(response, self._pinned)


# -- the request ----------------------------------------------------------------------


def responses_request(request: ModelRequest, pinned: str | None) -> Body:
    body: Body = {
        "model": pinned or request.model,
        "input": input_items(request.input),
        "store": False,
        "stream": True,
    }
    if request.instructions is not None:
        body["instructions"] = request.instructions
    if request.tools:
        body["tools"] = [_present(tool) for tool in request.tools]
        body["tool_choice"] = request.tool_choice
        body["parallel_tool_calls"] = request.parallel_tool_calls
    for key, value in (
        ("temperature", request.temperature),
        ("top_p", request.top_p),
        ("max_output_tokens", request.max_output_tokens),
        # Not OpenAI's (it refuses them, and the response fails saying so), but vLLM's
        # and Open Responses': sent when asked, never dropped.
        ("presence_penalty", request.presence_penalty),
        ("frequency_penalty", request.frequency_penalty),
        ("service_tier", request.service_tier),
        ("prompt_cache_key", request.prompt_cache_key),
        ("prompt_cache_retention", request.prompt_cache_retention),
        ("safety_identifier", request.safety_identifier),
        ("user", request.user),
    ):
        if value is not None:
            body[key] = value
    body.update(_answer_options(request))
    if request.truncation == "auto":
        body["truncation"] = "auto"
    return body


def _answer_options(request: ModelRequest) -> Body:
    """`text`, `reasoning`, `include` and `top_logprobs`, when the request asks."""
    options: Body = {}
    text_options = _present({"format": request.text_format, "verbosity": request.verbosity})
    if text_options:
        options["text"] = text_options
    reasoning = _present(
        {
            "effort": request.reasoning_effort,
            "summary": request.reasoning_summary,
            "context": request.reasoning_context,
            "mode": request.reasoning_mode,
        }
    )
    if reasoning:
        options["reasoning"] = reasoning
    include = []
    if request.logprobs:
        include.append("message.output_text.logprobs")
        if request.top_logprobs is not None:
            options["top_logprobs"] = request.top_logprobs
    if request.encrypted_reasoning:
        include.append("reasoning.encrypted_content")
    if include:
        options["include"] = include
    return options


def input_items(items: list[Item]) -> list[Item]:
    """The history as stateless Responses input (see the module's docstring)."""
    sent: list[Item] = []
    for item in items:
        kind = item.get("type") or "message"
        if kind == "message":
            sent.append(_message(item))
        elif kind == "function_call":
            sent.append(_pick(item, "type", "call_id", "name", "arguments", "status", "namespace"))
        elif kind == "function_call_output":
            sent.append(_pick(item, "type", "call_id", "output", "status"))
        elif kind == "reasoning" and item.get("encrypted_content"):
            sent.append(_reasoning(item))
        elif kind == "compaction":
            sent.append(_pick(item, "type", "id", "encrypted_content"))
    return [
        item
        for item, following in zip(sent, [*sent[1:], {}], strict=True)
        if item["type"] != "reasoning" or _led_to(following)
    ]


def _reasoning(item: Item) -> Item:
    reasoning = _pick(item, "type", "id", "summary", "encrypted_content", "status")
    reasoning.setdefault("summary", [])
    if item.get("content"):
        reasoning["content"] = item["content"]
    return reasoning


def _led_to(item: Item) -> bool:
    """Whether `item` can be what a reasoning item led to: OpenAI refuses a reasoning
    item followed by anything else (a retried step's cut attempt may leave one so)."""
    return item.get("type") == "function_call" or (
        item.get("type") == "message" and item.get("role") == "assistant"
    )


def _message(item: Item) -> Item:
    message = _pick(item, "role", "content", "status")
    message["type"] = "message"
    if isinstance(message["content"], list):
        message["content"] = [_part(part) for part in message["content"]]
    if item["role"] == "assistant":
        if str(item.get("id") or "").startswith("msg"):
            message["id"] = item["id"]
        if item.get("phase"):
            message["phase"] = item["phase"]
    return message


def _part(part: Item) -> Item:
    """A content part as sent: an `output_text` without its logprobs (the model does not
    read them back), any part without null fields."""
    if part.get("type") == "output_text":
        return {
            "type": "output_text",
            "text": part["text"],
            "annotations": part.get("annotations") or [],
        }
    return _present(part)


def _pick(item: Item, *keys: str) -> Item:
    return {key: item[key] for key in keys if item.get(key) is not None}


def _present(value: Item) -> Item:
    return {key: each for key, each in value.items() if each is not None}


# -- the stream -----------------------------------------------------------------------


async def _stream_events(response: httpx.Response, pinned: str | None) -> AsyncIterator[ModelEvent]:
    """The model events of one streamed response. A body that ends before the response's
    terminal event was cut off: a retryable error, not a short answer."""
    reader = _Reader(pinned)
    async for event in _server_sent(response):
        for each in reader.read(event):
            yield each
        if reader.ended:
            return
    raise ModelError(
        "The upstream model's stream ended before the answer was finished.", retryable=True
    )


async def _server_sent(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Each event's JSON (its `data:` lines); `type` names the event."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            yield _decoded("\n".join(data))
            data = []
    if data:
        yield _decoded("\n".join(data))


def _decoded(data: str) -> dict[str, Any]:
    try:
        event = json.loads(data)
    except json.JSONDecodeError:
        raise ModelError(f"The upstream model sent malformed output: {data[:200]!r}") from None
    if not isinstance(event, dict):
        raise ModelError(f"The upstream model sent malformed output: {data[:200]!r}")
    return event


@dataclass
class _Call:
    call_id: str
    name: str
    arguments: list[str] = field(default_factory=list)
    final: str | None = None  # from `response.function_call_arguments.done`


class _Reader:
    """One response's events, read in order, as model events."""

    def __init__(self, pinned: str | None) -> None:
        self.pinned = pinned
        self.ended = False
        self._reported = ModelInfo()
        self._calls: dict[str, _Call] = {}  # by item: calls not yet done
        self._started: set[str] = set()  # messages and reasoning items announced
        self._streamed: set[str] = set()  # items some of whose text was streamed
        self._done: set[str] = set()  # items finished (their text or call yielded)
        self._call_ids: set[str] = set()  # of every call of this answer

    def read(self, event: dict[str, Any]) -> Iterator[ModelEvent]:
        kind = event.get("type")
        if kind in ("response.created", "response.in_progress"):
            yield from self._info(event.get("response") or {}, final=False)
        elif kind == "response.output_text.delta":
            found = logprobs(event.get("logprobs"))
            yield from self._delta(event, "message", lambda said: TextDelta(said, found))
        elif kind == "response.refusal.delta":
            yield from self._delta(event, "message", RefusalDelta)
        elif kind == "response.reasoning_text.delta":
            yield from self._delta(event, "reasoning", ReasoningDelta)
        elif kind == "response.reasoning_summary_text.delta":
            part = event.get("summary_index")
            part = part if isinstance(part, int) else 0
            yield from self._delta(event, "reasoning", lambda said: ReasoningDelta(said, part))
        elif kind == "response.output_item.added":
            item = event.get("item") or {}
            key = _item_key(item, event.get("output_index"))
            if item.get("type") == "function_call":
                self._added(item, key)
            else:
                yield from self._start(item, key)
        elif kind == "response.function_call_arguments.delta":
            call = self._calls.get(_event_key(event))
            if call is not None:
                call.arguments.append(str(event.get("delta") or ""))
        elif kind == "response.function_call_arguments.done":
            call = self._calls.get(_event_key(event))
            if call is not None and isinstance(event.get("arguments"), str):
                call.final = event["arguments"]
        elif kind == "response.output_item.done":
            item = event.get("item") or {}
            yield from self._item_done(item, _item_key(item, event.get("output_index")))
        elif kind in ("response.completed", "response.incomplete"):
            self.ended = True
            yield from self._end(event.get("response") or {}, kind)
        elif kind == "response.failed":
            raise _failure((event.get("response") or {}).get("error"), "failed")
        elif kind == "error":
            raise _failure(event.get("error") if isinstance(event.get("error"), dict) else event)

    def _info(self, response: dict[str, Any], *, final: bool) -> Iterator[ModelInfo]:
        tier = text(response.get("service_tier")) if final else None
        info = ModelInfo(
            text(response.get("model")) or self.pinned or self._reported.model,
            tier or self._reported.service_tier,
        )
        if info != self._reported:
            self._reported = info
            yield info

    def _start(self, item: Item, key: str) -> Iterator[ModelEvent]:
        """Where a message or a reasoning item begins (once, and before its text): the
        message's `phase`, the reasoning item's id (its encrypted content names it)."""
        if key in self._started:
            return
        self._started.add(key)
        if item.get("type") == "message":
            yield MessageStart(text(item.get("phase")))
        elif item.get("type") == "reasoning":
            yield ReasoningStart(text(item.get("id")))

    def _delta(
        self, event: dict[str, Any], kind: str, make: Callable[[str], ModelEvent]
    ) -> Iterator[ModelEvent]:
        """A text, refusal or reasoning delta of the item the event names."""
        delta = event.get("delta")
        if not isinstance(delta, str) or not delta:
            return
        key = _event_key(event)
        yield from self._start({"type": kind, "id": event.get("item_id")}, key)
        self._streamed.add(key)
        yield make(delta)

    def _added(self, item: Item, key: str) -> _Call:
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise ModelError("The upstream model sent a tool call without a name.")
        # A call without an id gets a fresh one, never one the next step would reuse;
        # so does one whose id another call of this answer has (they would merge).
        call_id = text(item.get("call_id")) or new_id("call")
        if call_id in self._call_ids:
            call_id = new_id("call")
        self._call_ids.add(call_id)
        call = self._calls[key] = _Call(call_id, name, [str(item.get("arguments") or "")])
        return call

    def _item_done(self, item: Item, key: str) -> Iterator[ModelEvent]:
        """A finished item: its call, whole; or its text, if none of it was streamed
        (an upstream that sends items only whole); a reasoning item's end, with its
        encrypted content unless it was cut off (`incomplete`)."""
        if key in self._done:
            return
        self._done.add(key)
        kind = item.get("type")
        if kind == "function_call":
            yield from self._call_done(item, key)
        elif kind in ("message", "reasoning"):
            yield from self._start(item, key)
            if key not in self._streamed:
                yield from _whole_text(item)
            if kind == "reasoning":
                cut = item.get("status") == "incomplete"
                yield ReasoningDone(None if cut else text(item.get("encrypted_content")))

    def _call_done(self, item: Item, key: str) -> Iterator[FunctionCallDelta]:
        call = self._calls.pop(key, None)
        if item.get("status") == "incomplete":
            return  # cut off (max_output_tokens): not a call anyone may run
        if call is None:  # never announced: the done item is all there is
            call = self._added(item, key)
            del self._calls[key]
        arguments = item.get("arguments")
        if not isinstance(arguments, str):
            arguments = call.final if call.final is not None else "".join(call.arguments)
        yield FunctionCallDelta(call.call_id, call.name, arguments)

    def _end(self, response: dict[str, Any], kind: str) -> Iterator[ModelEvent]:
        """The terminal response: items never reported done (when complete), who
        answered, usage, and why it is incomplete."""
        incomplete = kind == "response.incomplete" or response.get("status") == "incomplete"
        for index, item in enumerate(response.get("output") or ()):
            # In an incomplete response, a call not done yet was cut off.
            if isinstance(item, dict) and not (incomplete and item.get("type") == "function_call"):
                yield from self._item_done(item, _item_key(item, index))
        yield from self._info(response, final=True)
        usage = response.get("usage")
        if isinstance(usage, dict):
            yield _usage(usage)
        if incomplete:
            reason = (response.get("incomplete_details") or {}).get("reason")
            yield Incomplete(text(reason) or "max_output_tokens")


def _item_key(item: Item, index: Any) -> str:
    """An item's key: its id, else its output index."""
    return text(item.get("id")) or f"#{index}"


def _event_key(event: dict[str, Any]) -> str:
    """The key of the item an event is about (`_item_key`)."""
    return text(event.get("item_id")) or f"#{event.get('output_index')}"


def _whole_text(item: Item) -> Iterator[ModelEvent]:
    if item.get("type") == "reasoning":
        for index, part in enumerate(_parts(item, "summary")):
            if text(part.get("text")):
                yield ReasoningDelta(part["text"], index)
        said = "\n\n".join(p["text"] for p in _parts(item, "content") if text(p.get("text")))
        if said:
            yield ReasoningDelta(said)
        return
    for part in _parts(item, "content"):
        if part.get("type") == "output_text" and text(part.get("text")):
            yield TextDelta(part["text"], logprobs(part.get("logprobs")))
        elif part.get("type") == "refusal" and text(part.get("refusal")):
            yield RefusalDelta(part["refusal"])


def _parts(item: Item, key: str) -> list[Item]:
    return [part for part in item.get(key) or () if isinstance(part, dict)]


def _usage(usage: dict[str, Any]) -> Usage:
    input_details = usage.get("input_tokens_details") or {}
    output_details = usage.get("output_tokens_details") or {}
    return Usage(
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        cached_tokens=int(input_details.get("cached_tokens") or 0),
        reasoning_tokens=int(output_details.get("reasoning_tokens") or 0),
        cache_write_tokens=int(input_details.get("cache_write_tokens") or 0),
    )


# `error.code`s of OpenAI's Response that a failed response here may carry as they are.
_RESPONSE_CODES = frozenset(
    {
        "server_error",
        "rate_limit_exceeded",
        "invalid_prompt",
        "invalid_image",
        "invalid_image_format",
        "invalid_base64_image",
        "invalid_image_url",
        "image_too_large",
        "image_too_small",
        "image_parse_error",
        "image_content_policy_violation",
        "invalid_image_mode",
        "image_file_too_large",
        "unsupported_image_media_type",
        "empty_image_file",
        "failed_to_download_image",
        "image_file_not_found",
    }
)
_RETRYABLE = ("server_error", "rate_limit_exceeded", None)


def _failure(error: Any, how: str = "sent an error") -> ModelError:
    """A `response.failed` response's `error`, or an `error` event, as a ModelError."""
    error = error if isinstance(error, dict) else {}
    code = text(error.get("code"))
    message = text(error.get("message")) or "no message"
    said = f"The upstream model {how}: {message}" + (f" ({code})" if code else "")
    return ModelError(
        said,
        code=code if code in _RESPONSE_CODES else "server_error",
        retryable=code in _RETRYABLE,
    )
