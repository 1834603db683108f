"""Bad input on every route gets the OpenAI error envelope and changes nothing.

For each case: the right status, `{"error": {message, type, param, code}}` with the expected
`code` and `param` (docs/protocol.md sections 3 and 9), an `x-request-id` header, no Python
traceback in the body, and the stored state (a conversation, its items, two responses and
their input items) exactly as it was before the request.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.conftest import StartServer, serving
from tests.support.schemas import validate_error_envelope
from tests.support.server import ServerProcess
from tests.support.stores import Stores
from tests.support.waiting import wait_terminal

# Placeholders in paths and bodies, replaced by the ids of the module's fixtures.
CONV = "@conv@"  # a conversation with two items and metadata
ITEM = "@item@"  # the first item of that conversation
RESP = "@resp@"  # a completed foreground response
BG = "@bg@"  # a completed background response

ANY = object()  # the code or param is not checked


@dataclass(frozen=True)
class Bad:
    method: str
    path: str
    body: bytes | dict[str, Any] | None = None
    status: int = 400
    code: object = ANY
    param: object = ANY
    mentions: tuple[str, ...] = ()
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Ids:
    conv: str
    item: str
    resp: str
    bg: str

    def fill(self, text: str) -> str:
        for token, value in (
            (CONV, self.conv),
            (ITEM, self.item),
            (RESP, self.resp),
            (BG, self.bg),
        ):
            text = text.replace(token, value)
        return text


def case(case_id: str, method: str, path: str, body: Any = None, **expected: Any) -> Any:
    return pytest.param(Bad(method, path, body, **expected), id=case_id)


def assert_error(response: httpx.Response, status: int) -> dict[str, Any]:
    """The checks every error shares; returns the inner error object."""
    assert "Traceback" not in response.text
    assert response.status_code == status, response.text
    assert response.headers.get("x-request-id"), "every response needs an x-request-id"
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    validate_error_envelope(body)
    error: dict[str, Any] = body["error"]
    assert error["message"]
    if status < 500:
        assert error["type"] == "invalid_request_error"
    return error


# -- the cases ----------------------------------------------------------------------------

JSON_BODY_ROUTES = [
    ("responses.create", "POST", "/v1/responses"),
    ("conversations.create", "POST", "/v1/conversations"),
    ("conversations.update", "POST", f"/v1/conversations/{CONV}"),
    ("conversations.items.create", "POST", f"/v1/conversations/{CONV}/items"),
]

UNPARSABLE_BODIES = [
    ("malformed", b'{"model": "embedded", "input": '),
    ("single-quotes", b"{'model': 'embedded'}"),
    ("trailing-garbage", b'{"model": "embedded", "input": "hi"} and more'),
    ("not-utf8", b'{"model": "\xff\xfe"}'),
    ("nan", b'{"model": "embedded", "input": "hi", "metadata": {"a": NaN}}'),
    ("infinity", b'{"model": "embedded", "input": "hi", "temperature": Infinity}'),
    ("lone-surrogate", b'{"model": "embedded", "input": "hi", "metadata": {"a": "\\ud800"}}'),
    ("nested-too-deeply", b"[" * 100_000 + b"]" * 100_000),
    # Issue 12: past MAX_JSON_DEPTH (64) but within what json.loads reads (about 1000).
    ("nested-65-levels", b'{"a":' + b"[" * 64 + b"]" * 64 + b"}"),
    ("nested-960-levels", b'{"a":' + b"[" * 959 + b"]" * 959 + b"}"),
    # Issue 12: numbers out of a double's range parse as infinity in Python.
    ("number-1e309", b'{"model": "embedded", "input": "hi", "metadata": {"a": 1e309}}'),
    ("number-minus-1e309", b'{"model": "embedded", "input": "hi", "top_p": -1e309}'),
    ("number-1E400-in-array", b'{"model": "embedded", "input": [1E400]}'),
    # past the digits Python reads into an int (its own message would name sys.set_int_...)
    (
        "integer-5000-digits",
        b'{"model": "embedded", "input": "hi", "top_p": 1' + b"0" * 5000 + b"}",
    ),
    ("array", b"[]"),
    ("string", b'"hello"'),
    ("number", b"5"),
    ("null", b"null"),
    ("empty", b""),
    ("whitespace", b"  \n "),
]

PARSE_CASES = [
    case(f"{name}-{kind}", method, path, body, code="invalid_json", param=None)
    for name, method, path in JSON_BODY_ROUTES
    for kind, body in UNPARSABLE_BODIES
]
# A compressed body, or one claiming to be: refused by name, never read as bad JSON nor
# the header ignored.
PARSE_CASES += [
    case(
        f"{name}-content-encoding-{encoding}",
        method,
        path,
        {"model": "embedded", "input": "hi"},
        status=415,
        code="unsupported_content_encoding",
        param=None,
        mentions=(encoding,),
        headers={"content-encoding": encoding},
    )
    for name, method, path in JSON_BODY_ROUTES
    for encoding in ("gzip", "br")
]

# Bodies for POST /v1/responses name the conversation, so a request wrongly accepted
# would append to it and the "nothing changed" check would see it.
TURN = {"model": "embedded", "input": "hi", "conversation": CONV}


def turn(**changes: Any) -> dict[str, Any]:
    body = {**TURN, **changes}
    return {k: v for k, v in body.items() if v is not None}


USER = {"role": "user", "content": "x"}


def _said(**fields: Any) -> dict[str, Any]:
    """An assistant message replayed with one `output_text` part holding `fields`."""
    return {"role": "assistant", "content": [{"type": "output_text", "text": "a", **fields}]}


def meta_17() -> dict[str, str]:
    return {f"key{i}": "v" for i in range(17)}


META_LONG_KEY = {"k" * 65: "v"}
META_LONG_VALUE = {"k": "v" * 513}

CREATE_CASES = [
    # two items of one input with one id: listed, paged and referred to by id, they could
    # not be told apart (the input_items pager looped on them)
    case(
        "duplicate-item-id",
        "POST",
        "/v1/responses",
        turn(
            input=[
                {"type": "message", "id": "msg_dup", "role": "user", "content": "one"},
                {"type": "message", "id": "msg_two", "role": "user", "content": "two"},
                {"type": "message", "id": "msg_dup", "role": "user", "content": "three"},
            ]
        ),
        code="duplicate_item",
        param="input[2].id",
        mentions=("msg_dup",),
    ),
    case(
        "duplicate-item-reference",
        "POST",
        "/v1/responses",
        turn(
            input=[{"type": "item_reference", "id": ITEM}, {"type": "item_reference", "id": ITEM}]
        ),
        code="duplicate_item",
        param="input[1].id",
    ),
    # a part of the wrong side: what a model says (output_text, refusal) only in an
    # assistant message, what it is given (input_*) only elsewhere, as OpenAI
    *(
        case(
            f"{role}-with-{part}",
            "POST",
            "/v1/responses",
            turn(input=[{"role": role, "content": [{"type": part, "text": "x"}]}]),
            code="invalid_value",
            param="input[0].content[0].type",
            mentions=(part,),
        )
        for role, part in (
            ("assistant", "input_text"),
            ("user", "output_text"),
            ("system", "refusal"),
        )
    ),
    # replayed items' parts in OpenAI's shapes, each field checked (stored and listed
    # otherwise, they broke OpenAI's ResponseItemList)
    case(
        "reasoning-summary-not-a-summary-part",
        "POST",
        "/v1/responses",
        turn(input=[{"type": "reasoning", "summary": [{"foo": 1}]}, USER]),
        code="missing_required_parameter",
        param="input[0].summary[0].type",
    ),
    case(
        "reasoning-content-of-another-type",
        "POST",
        "/v1/responses",
        turn(input=[{"type": "reasoning", "summary": [], "content": [{"type": "x"}]}, USER]),
        code="invalid_value",
        param="input[0].content[0].type",
    ),
    case(
        "output-text-annotation-of-no-type",
        "POST",
        "/v1/responses",
        turn(input=[_said(annotations=[{"w": 1}]), USER]),
        code="invalid_value",
        param="input[0].content[0].annotations[0]",
        mentions=("url_citation",),
    ),
    case(
        "output-text-url-citation-without-title",
        "POST",
        "/v1/responses",
        turn(
            input=[
                _said(
                    annotations=[
                        {"type": "url_citation", "url": "u", "start_index": 0, "end_index": 1}
                    ]
                ),
                USER,
            ]
        ),
        code="missing_required_parameter",
        param="input[0].content[0].annotations[0].title",
    ),
    case(
        "output-text-logprob-without-token",
        "POST",
        "/v1/responses",
        turn(input=[_said(logprobs=[{"x": 1}]), USER]),
        code="missing_required_parameter",
        param="input[0].content[0].logprobs[0].token",
    ),
    case(
        "output-text-top-logprob-bytes-not-integers",
        "POST",
        "/v1/responses",
        turn(
            input=[
                _said(
                    logprobs=[
                        {
                            "token": "a",
                            "logprob": 0,
                            "bytes": [97],
                            "top_logprobs": [{"token": "a", "logprob": 0, "bytes": ["a"]}],
                        }
                    ]
                ),
                USER,
            ]
        ),
        code="invalid_type",
        param="input[0].content[0].logprobs[0].top_logprobs[0].bytes[0]",
    ),
    case(
        "tool-allowed-caller-unknown",
        "POST",
        "/v1/responses",
        turn(tools=[{"type": "function", "name": "f", "allowed_callers": ["anyone"]}]),
        code="invalid_value",
        param="tools[0].allowed_callers[0]",
    ),
    # newer parameters that only tune OpenAI's service: dropped, but checked first
    *(
        case(f"{name}-malformed", "POST", "/v1/responses", turn(**{name: value}), param=param)
        for name, value, param in (
            ("prompt_cache_options", "x", "prompt_cache_options"),
            ("prompt_cache_options", {"ttl": "forever"}, "prompt_cache_options.ttl"),
            ("prompt_cache_options", {"zzz": 1}, "prompt_cache_options.zzz"),
            ("image", [1, 2], "image"),
            ("image", {"context_compression": "max"}, "image.context_compression"),
            ("background_options", False, "background_options"),
            (
                "background_options",
                {"completion_window": "1y"},
                "background_options.completion_window",
            ),
            ("access_programs", {"cyber": "x"}, "access_programs.cyber"),
        )
    ),
    # it asks for no answer, only a warmed cache; there is no cache
    case(
        "prompt-cache-prewarm",
        "POST",
        "/v1/responses",
        turn(prompt_cache_options={"ttl": "30m", "prewarm": True}),
        code="unsupported_value",
        param="prompt_cache_options.prewarm",
    ),
    # this server runs no moderation: refused, never dropped
    case(
        "moderation",
        "POST",
        "/v1/responses",
        turn(moderation={"model": "omni-moderation-latest"}),
        code="unsupported_parameter",
        param="moderation",
        mentions=("moderation",),
    ),
    case(
        "moderation-malformed",
        "POST",
        "/v1/responses",
        turn(moderation={"bogus": True}),
        param="moderation.model",
    ),
    # unknown parameters, top level and nested
    case(
        "unknown-top",
        "POST",
        "/v1/responses",
        turn(bogus=1),
        code="unknown_parameter",
        param="bogus",
    ),
    case(
        "unknown-in-input-item",
        "POST",
        "/v1/responses",
        turn(input=[{"role": "user", "content": "x", "bogus": 1}]),
        code="unknown_parameter",
        param="input[0].bogus",
    ),
    case(
        "unknown-in-second-input-item",
        "POST",
        "/v1/responses",
        turn(
            input=[
                {"role": "user", "content": "x"},
                {"role": "user", "content": "y", "extra": True},
            ]
        ),
        code="unknown_parameter",
        param="input[1].extra",
    ),
    case(
        "unknown-in-content-part",
        "POST",
        "/v1/responses",
        turn(
            input=[{"role": "user", "content": [{"type": "input_text", "text": "x", "bogus": 1}]}]
        ),
        code="unknown_parameter",
        param="input[0].content[0].bogus",
    ),
    case(
        "unknown-in-tool",
        "POST",
        "/v1/responses",
        turn(tools=[{"type": "function", "name": "f", "bogus": 1}]),
        code="unknown_parameter",
        param="tools[0].bogus",
    ),
    case(
        "unknown-in-stream-options",
        "POST",
        "/v1/responses",
        turn(stream=True, stream_options={"bogus": True}),
        code="unknown_parameter",
        param="stream_options.bogus",
    ),
    case(
        "unknown-in-conversation-object",
        "POST",
        "/v1/responses",
        turn(conversation={"id": CONV, "bogus": 1}),
        code="unknown_parameter",
        param="conversation.bogus",
    ),
    # wrong types
    case("model-int", "POST", "/v1/responses", turn(model=5), code="invalid_type", param="model"),
    case(
        "model-array", "POST", "/v1/responses", turn(model=[]), code="invalid_type", param="model"
    ),
    case("input-int", "POST", "/v1/responses", turn(input=5), code="invalid_type", param="input"),
    case(
        "input-object",
        "POST",
        "/v1/responses",
        turn(input={"role": "user"}),
        code="invalid_type",
        param="input",
    ),
    case(
        "input-item-int",
        "POST",
        "/v1/responses",
        turn(input=[5]),
        code="invalid_type",
        param="input[0]",
    ),
    case(
        "content-int",
        "POST",
        "/v1/responses",
        turn(input=[{"role": "user", "content": 5}]),
        code="invalid_type",
        param="input[0].content",
    ),
    case(
        "content-part-text-int",
        "POST",
        "/v1/responses",
        turn(input=[{"role": "user", "content": [{"type": "input_text", "text": 5}]}]),
        code="invalid_type",
        param="input[0].content[0].text",
    ),
    case(
        "temperature-string",
        "POST",
        "/v1/responses",
        turn(temperature="hot"),
        code="invalid_type",
        param="temperature",
    ),
    case(
        "stream-maybe",
        "POST",
        "/v1/responses",
        turn(stream="maybe"),
        code="invalid_type",
        param="stream",
    ),
    case(
        "store-string",
        "POST",
        "/v1/responses",
        turn(store="yes"),
        code="invalid_type",
        param="store",
    ),
    case(
        "background-string",
        "POST",
        "/v1/responses",
        turn(background="yes"),
        code="invalid_type",
        param="background",
    ),
    case(
        "stream-options-int",
        "POST",
        "/v1/responses",
        turn(stream=True, stream_options=5),
        code="invalid_type",
        param="stream_options",
    ),
    case(
        "metadata-string",
        "POST",
        "/v1/responses",
        turn(metadata="x"),
        code="invalid_type",
        param="metadata",
    ),
    case(
        "metadata-value-int",
        "POST",
        "/v1/responses",
        turn(metadata={"count": 5}),
        code="invalid_type",
        param="metadata.count",
    ),
    case(
        "tools-string", "POST", "/v1/responses", turn(tools="f"), code="invalid_type", param="tools"
    ),
    case(
        "tool-strict-string",
        "POST",
        "/v1/responses",
        turn(tools=[{"type": "function", "name": "f", "strict": "yes"}]),
        code="invalid_type",
        param="tools[0].strict",
    ),
    case(
        "include-string",
        "POST",
        "/v1/responses",
        turn(include="x"),
        code="invalid_type",
        param="include",
    ),
    case(
        "conversation-int",
        "POST",
        "/v1/responses",
        turn(conversation=5),
        code="invalid_type",
        param="conversation",
    ),
    case(
        "conversation-id-int",
        "POST",
        "/v1/responses",
        turn(conversation={"id": 5}),
        code="invalid_type",
        param="conversation.id",
    ),
    case(
        "max-output-tokens-decimal",
        "POST",
        "/v1/responses",
        turn(max_output_tokens=16.5),
        code="invalid_type",
        param="max_output_tokens",
    ),
    # missing required parameters
    case(
        "missing-model",
        "POST",
        "/v1/responses",
        {"input": "hi", "conversation": CONV},
        code="missing_required_parameter",
        param="model",
    ),
    case(
        "missing-input",
        "POST",
        "/v1/responses",
        {"model": "embedded"},
        code="missing_required_parameter",
        param="input",
    ),
    case(
        "missing-role",
        "POST",
        "/v1/responses",
        turn(input=[{"content": "x"}]),
        code="missing_required_parameter",
        param="input[0].role",
    ),
    case(
        "missing-content",
        "POST",
        "/v1/responses",
        turn(input=[{"role": "user"}]),
        code="missing_required_parameter",
        param="input[0].content",
    ),
    case(
        "missing-part-text",
        "POST",
        "/v1/responses",
        turn(input=[{"role": "user", "content": [{"type": "input_text"}]}]),
        code="missing_required_parameter",
        param="input[0].content[0].text",
    ),
    case(
        "missing-call-id",
        "POST",
        "/v1/responses",
        turn(input=[{"type": "function_call_output", "output": "x"}]),
        code="missing_required_parameter",
        param="input[0].call_id",
    ),
    case(
        "missing-tool-name",
        "POST",
        "/v1/responses",
        turn(tools=[{"type": "function"}]),
        code="missing_required_parameter",
        param="tools[0].name",
    ),
    case(
        "missing-conversation-id",
        "POST",
        "/v1/responses",
        turn(conversation={}),
        code="missing_required_parameter",
        param="conversation.id",
    ),
    # out of range
    case(
        "temperature-3",
        "POST",
        "/v1/responses",
        turn(temperature=3),
        code="invalid_value",
        param="temperature",
    ),
    case(
        "temperature-negative",
        "POST",
        "/v1/responses",
        turn(temperature=-0.5),
        code="invalid_value",
        param="temperature",
    ),
    case("top-p-2", "POST", "/v1/responses", turn(top_p=2), code="invalid_value", param="top_p"),
    case(
        "max-output-tokens-1",
        "POST",
        "/v1/responses",
        turn(max_output_tokens=1),
        code="invalid_value",
        param="max_output_tokens",
    ),
    case(
        "top-logprobs-21",
        "POST",
        "/v1/responses",
        turn(top_logprobs=21),
        code="invalid_value",
        param="top_logprobs",
    ),
    case(
        "truncation-sometimes",
        "POST",
        "/v1/responses",
        turn(truncation="sometimes"),
        code="invalid_value",
        param="truncation",
    ),
    case(
        "tool-choice-maybe",
        "POST",
        "/v1/responses",
        turn(tool_choice="maybe"),
        code="invalid_value",
        param="tool_choice",
    ),
    # Issue 12: a tool_choice of the wrong shape raised TypeError (a 500).
    case(
        "tool-choice-name-array",
        "POST",
        "/v1/responses",
        turn(tool_choice={"type": "function", "name": []}),
        code="invalid_type",
        param="tool_choice.name",
    ),
    case(
        "tool-choice-name-object",
        "POST",
        "/v1/responses",
        turn(tool_choice={"type": "function", "name": {}}),
        code="invalid_type",
        param="tool_choice.name",
    ),
    case(
        "tool-choice-empty-object",
        "POST",
        "/v1/responses",
        turn(tool_choice={}),
        param="tool_choice.type",
    ),
    case(
        "tool-choice-type-array",
        "POST",
        "/v1/responses",
        turn(tool_choice={"type": []}),
        param="tool_choice.type",
    ),
    case(
        "tool-choice-function-without-name",
        "POST",
        "/v1/responses",
        turn(tool_choice={"type": "function"}),
        code="missing_required_parameter",
        param="tool_choice.name",
    ),
    case(
        "tool-choice-function-unknown-key",
        "POST",
        "/v1/responses",
        turn(
            tools=[{"type": "function", "name": "f"}],
            tool_choice={"type": "function", "name": "f", "bogus": 1},
        ),
        code="unknown_parameter",
        param="tool_choice.bogus",
    ),
    case(
        "tool-choice-allowed-tools-without-mode",
        "POST",
        "/v1/responses",
        turn(tool_choice={"type": "allowed_tools", "tools": []}),
        code="missing_required_parameter",
        param="tool_choice.mode",
    ),
    case(
        "tool-choice-allowed-tools-tools-string",
        "POST",
        "/v1/responses",
        turn(tool_choice={"type": "allowed_tools", "mode": "auto", "tools": "f"}),
        code="invalid_type",
        param="tool_choice.tools",
    ),
    # tools a tool_choice names or needs must be the request's or the server's
    case(
        "tool-choice-required-without-tools",
        "POST",
        "/v1/responses",
        turn(tool_choice="required"),
        code="invalid_value",
        param="tool_choice",
        mentions=("required",),
    ),
    case(
        "tool-choice-allowed-tools-unknown-name",
        "POST",
        "/v1/responses",
        turn(
            tools=[{"type": "function", "name": "f"}],
            tool_choice={
                "type": "allowed_tools",
                "mode": "auto",
                "tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "g"}],
            },
        ),
        code="invalid_value",
        param="tool_choice.tools[1].name",
        mentions=("'g'",),
    ),
    case(
        "tool-choice-allowed-tools-not-a-function",
        "POST",
        "/v1/responses",
        turn(
            tools=[{"type": "function", "name": "f"}],
            tool_choice={"type": "allowed_tools", "mode": "auto", "tools": [{"type": "mcp"}]},
        ),
        code="invalid_value",
        param="tool_choice.tools[0]",
    ),
    case(
        "tool-choice-unknown-function",
        "POST",
        "/v1/responses",
        turn(tool_choice={"type": "function", "name": "nope"}),
        param="tool_choice",
        mentions=("nope",),
    ),
    case(
        "role-robot",
        "POST",
        "/v1/responses",
        turn(input=[{"role": "robot", "content": "x"}]),
        code="invalid_value",
        param="input[0].role",
    ),
    case(
        "metadata-17-keys",
        "POST",
        "/v1/responses",
        turn(metadata=meta_17()),
        param="metadata",
        mentions=("16",),
    ),
    case(
        "metadata-long-key",
        "POST",
        "/v1/responses",
        turn(metadata=META_LONG_KEY),
        param="metadata",
        mentions=("64",),
    ),
    case(
        "metadata-long-value",
        "POST",
        "/v1/responses",
        turn(metadata=META_LONG_VALUE),
        param="metadata",
        mentions=("512",),
    ),
    case(
        "stream-options-without-stream",
        "POST",
        "/v1/responses",
        turn(stream_options={"include_obfuscation": False}),
        param="stream_options",
    ),
    # known but not supported here (docs/protocol.md section 12)
    case(
        "tool-web-search",
        "POST",
        "/v1/responses",
        turn(tools=[{"type": "web_search"}]),
        param="tools[0].type",
        mentions=("web_search", "not supported"),
    ),
    case(
        "tool-file-search-after-function",
        "POST",
        "/v1/responses",
        turn(
            tools=[
                {"type": "function", "name": "f"},
                {"type": "file_search", "vector_store_ids": []},
            ]
        ),
        param="tools[1].type",
        mentions=("file_search", "not supported"),
    ),
    case(
        "prompt-template",
        "POST",
        "/v1/responses",
        turn(prompt={"id": "pmpt_123"}),
        param="prompt",
        mentions=("prompt", "not supported"),
    ),
    case(
        "input-item-web-search-call",
        "POST",
        "/v1/responses",
        turn(input=[{"type": "web_search_call", "id": "ws_1", "status": "completed"}]),
        param="input[0].type",
        mentions=("web_search_call", "not supported"),
    ),
    case(
        "content-part-unknown",
        "POST",
        "/v1/responses",
        turn(input=[{"role": "user", "content": [{"type": "input_video"}]}]),
        param="input[0].content[0].type",
        mentions=("input_video",),
    ),
    case(
        "tool-choice-web-search",
        "POST",
        "/v1/responses",
        turn(tool_choice={"type": "web_search"}),
        mentions=("web_search",),
    ),
    # combinations and references
    case(
        "background-without-store",
        "POST",
        "/v1/responses",
        turn(background=True, store=False),
        param="store",
        mentions=("Background mode requires store=true.",),
    ),
    case(
        "conversation-and-previous-response",
        "POST",
        "/v1/responses",
        turn(previous_response_id=RESP),
        mentions=("conversation", "previous_response_id"),
    ),
    case(
        "unknown-conversation",
        "POST",
        "/v1/responses",
        turn(conversation="conv_nope"),
        status=404,
        mentions=("conv_nope",),
    ),
    case(
        "unknown-previous-response",
        "POST",
        "/v1/responses",
        {"model": "embedded", "input": "hi", "previous_response_id": "resp_nope"},
        code="previous_response_not_found",
        param="previous_response_id",
        mentions=("Previous response with id 'resp_nope' not found.",),
    ),
    case(
        "output-for-no-call",
        "POST",
        "/v1/responses",
        turn(input=[{"type": "function_call_output", "call_id": "call_orphan", "output": "42"}]),
        mentions=("call_orphan",),
    ),
]

QUERY_CASES = [
    # include[] on a read is checked as a create's include is
    *(
        case(
            f"include-{name}",
            method,
            path + "include[]=bogus",
            {"items": [{"role": "user", "content": "x"}]} if method == "POST" else None,
            code="invalid_value",
            param="include[0]",
            mentions=("bogus",),
        )
        for name, method, path in (
            ("retrieve", "GET", f"/v1/responses/{RESP}?"),
            ("input-items", "GET", f"/v1/responses/{RESP}/input_items?"),
            ("conversation-items", "GET", f"/v1/conversations/{CONV}/items?"),
            ("conversation-item", "GET", f"/v1/conversations/{CONV}/items/{ITEM}?"),
            ("add-conversation-items", "POST", f"/v1/conversations/{CONV}/items?"),
        )
    ),
    case(
        "retrieve-include-hosted-tool",
        "GET",
        f"/v1/responses/{RESP}?include[]=file_search_call.results",
        code="unsupported_value",
        param="include[0]",
    ),
    case(
        "retrieve-include-obfuscation-maybe",
        "GET",
        f"/v1/responses/{RESP}?include_obfuscation=maybe",
        code="invalid_value",
        param="include_obfuscation",
    ),
    # GET /v1/responses/{id}
    case("retrieve-unknown", "GET", "/v1/responses/resp_nope", status=404, mentions=("resp_nope",)),
    case("retrieve-stream-maybe", "GET", f"/v1/responses/{BG}?stream=maybe", param="stream"),
    # starting_after only applies to a stream: a snapshot cannot honour it
    case(
        "retrieve-starting-after-without-stream",
        "GET",
        f"/v1/responses/{BG}?starting_after=3",
        code="invalid_parameter_combination",
        param="starting_after",
        mentions=("stream",),
    ),
    case(
        "retrieve-starting-after-stream-false",
        "GET",
        f"/v1/responses/{BG}?stream=false&starting_after=0",
        code="invalid_parameter_combination",
        param="starting_after",
    ),
    case(
        "retrieve-starting-after-negative",
        "GET",
        f"/v1/responses/{BG}?stream=true&starting_after=-5",
        code="invalid_value",
        param="starting_after",
    ),
    # Issue 12: past SQLite's 64-bit integers: an OverflowError and an empty 200 stream.
    case(
        "retrieve-starting-after-past-int64",
        "GET",
        f"/v1/responses/{BG}?stream=true&starting_after=9223372036854775808",
        code="invalid_value",
        param="starting_after",
        mentions=("9223372036854775807",),
    ),
    case(
        "retrieve-starting-after-huge",
        "GET",
        f"/v1/responses/{BG}?stream=true&starting_after=" + "9" * 400,
        code="invalid_value",
        param="starting_after",
    ),
    case(
        "retrieve-starting-after-underscore",
        "GET",
        f"/v1/responses/{BG}?stream=true&starting_after=1_0",
        code="invalid_type",
        param="starting_after",
    ),
    case(
        "input-items-limit-arabic-digit",
        "GET",
        f"/v1/responses/{RESP}/input_items?limit=%D9%A5",
        code="invalid_type",
        param="limit",
    ),
    case(
        "retrieve-starting-after-abc",
        "GET",
        f"/v1/responses/{BG}?stream=true&starting_after=abc",
        code="invalid_type",
        param="starting_after",
    ),
    case(
        "retrieve-stream-of-foreground",
        "GET",
        f"/v1/responses/{RESP}?stream=true",
        param="stream",
        mentions=("background",),
    ),
    # DELETE /v1/responses/{id}
    case(
        "delete-unknown", "DELETE", "/v1/responses/resp_nope", status=404, mentions=("resp_nope",)
    ),
    # POST /v1/responses/{id}/cancel
    case(
        "cancel-unknown",
        "POST",
        "/v1/responses/resp_nope/cancel",
        status=404,
        mentions=("resp_nope",),
    ),
    case(
        "cancel-foreground",
        "POST",
        f"/v1/responses/{RESP}/cancel",
        mentions=("Cannot cancel a synchronous response.",),
    ),
    case(
        "cancel-completed",
        "POST",
        f"/v1/responses/{BG}/cancel",
        mentions=("Cannot cancel a completed response.",),
    ),
    # GET /v1/responses/{id}/input_items
    case("input-items-unknown", "GET", "/v1/responses/resp_nope/input_items", status=404),
    case(
        "input-items-limit-0",
        "GET",
        f"/v1/responses/{RESP}/input_items?limit=0",
        code="invalid_value",
        param="limit",
    ),
    case(
        "input-items-limit-101",
        "GET",
        f"/v1/responses/{RESP}/input_items?limit=101",
        code="invalid_value",
        param="limit",
    ),
    case(
        "input-items-limit-abc",
        "GET",
        f"/v1/responses/{RESP}/input_items?limit=abc",
        code="invalid_type",
        param="limit",
    ),
    case(
        "input-items-order-sideways",
        "GET",
        f"/v1/responses/{RESP}/input_items?order=sideways",
        param="order",
    ),
    case(
        "input-items-after-unknown",
        "GET",
        f"/v1/responses/{RESP}/input_items?after=msg_nope",
        param="after",
    ),
    # no id holds a NUL (PostgreSQL's text cannot): unknown, not a store error
    case(
        "input-items-after-nul",
        "GET",
        f"/v1/responses/{RESP}/input_items?after=msg%00",
        param="after",
    ),
    # conversations by id
    case(
        "conversation-retrieve-unknown",
        "GET",
        "/v1/conversations/conv_nope",
        status=404,
        mentions=("conv_nope",),
    ),
    case(
        "conversation-update-unknown",
        "POST",
        "/v1/conversations/conv_nope",
        {"metadata": {"a": "b"}},
        status=404,
    ),
    case("conversation-delete-unknown", "DELETE", "/v1/conversations/conv_nope", status=404),
    case(
        "conversation-items-create-unknown",
        "POST",
        "/v1/conversations/conv_nope/items",
        {"items": [{"role": "user", "content": "x"}]},
        status=404,
    ),
    case("conversation-items-list-unknown", "GET", "/v1/conversations/conv_nope/items", status=404),
    case(
        "conversation-item-unknown-conversation",
        "GET",
        f"/v1/conversations/conv_nope/items/{ITEM}",
        status=404,
    ),
    case(
        "conversation-item-unknown",
        "GET",
        f"/v1/conversations/{CONV}/items/msg_nope",
        status=404,
        mentions=("msg_nope",),
    ),
    case(
        "conversation-item-delete-unknown",
        "DELETE",
        f"/v1/conversations/{CONV}/items/msg_nope",
        status=404,
    ),
    case(
        "conversation-item-delete-unknown-conversation",
        "DELETE",
        f"/v1/conversations/conv_nope/items/{ITEM}",
        status=404,
    ),
    # GET /v1/conversations/{id}/items
    case(
        "items-limit-0",
        "GET",
        f"/v1/conversations/{CONV}/items?limit=0",
        code="invalid_value",
        param="limit",
    ),
    case(
        "items-limit-101",
        "GET",
        f"/v1/conversations/{CONV}/items?limit=101",
        code="invalid_value",
        param="limit",
    ),
    case(
        "items-limit-abc",
        "GET",
        f"/v1/conversations/{CONV}/items?limit=abc",
        code="invalid_type",
        param="limit",
    ),
    case(
        "items-order-sideways",
        "GET",
        f"/v1/conversations/{CONV}/items?order=sideways",
        param="order",
    ),
    case(
        "items-after-unknown",
        "GET",
        f"/v1/conversations/{CONV}/items?after=msg_nope",
        param="after",
    ),
    case("items-after-nul", "GET", f"/v1/conversations/{CONV}/items?after=%00", param="after"),
]


def raw_turn(fields: str) -> bytes:
    """A turn in the conversation, written by hand: json.dumps cannot write `1e309`."""
    return f'{{"model": "embedded", "conversation": "{CONV}", {fields}}}'.encode()


OUT_OF_RANGE_SCHEMA = '{"type": "object", "properties": {"n": {"maximum": 1e309}}}'
# Issue 12: an out-of-range number anywhere parsed as infinity: the response was stored
# and run, then answered 500 (503 in the background) and served `Infinity` ever after.
OUT_OF_RANGE_CASES = [
    case(name, "POST", "/v1/responses", raw_turn(fields), code="invalid_json", param=None)
    for name, fields in [
        (
            "out-of-range-in-text-format",
            '"input": "hi", "text": {"format": {"type": "json_schema", "name": "s", '
            f'"schema": {OUT_OF_RANGE_SCHEMA}}}}}',
        ),
        (
            "out-of-range-in-tool-parameters",
            f'"input": "hi", "tools": [{{"type": "function", "name": "f", '
            f'"parameters": {OUT_OF_RANGE_SCHEMA}}}]',
        ),
        (
            "out-of-range-in-tool-choice",
            '"input": "hi", "tool_choice": {"type": "allowed_tools", "mode": "auto", '
            '"tools": [{"type": "function", "name": "f", "weight": -1e309}]}',
        ),
        (
            "out-of-range-in-annotations",
            '"input": [{"role": "assistant", "content": [{"type": "output_text", "text": "a", '
            '"annotations": [{"type": "file_citation", "index": 1e999}]}]}]',
        ),
        ("out-of-range-background", '"input": "hi", "background": true, "text": {"n": 1e309}'),
        ("out-of-range-stream", '"input": "hi", "stream": true, "reasoning": {"n": 1e309}'),
        ("out-of-range-temperature", '"input": "hi", "temperature": 1e309'),
    ]
]

CONVERSATION_CASES = [
    # an item id must name the item in a URL later (GET and DELETE of one item)
    *(
        case(
            f"item-id-{name}",
            "POST",
            f"/v1/conversations/{CONV}/items",
            {"items": [{**USER, "type": "message", "id": item_id}]},
            code="invalid_value",
            param="items[0].id",
            mentions=("URL path segment",),
        )
        for name, item_id in (("slash", "a/b"), ("dot-dot", ".."), ("space", "a b"))
    ),
    case(
        "item-id-too-long",
        "POST",
        f"/v1/conversations/{CONV}/items",
        {"items": [{**USER, "type": "message", "id": "m" * 257}]},
        code="invalid_value",
        param="items[0].id",
    ),
    # POST /v1/conversations
    case(
        "create-unknown",
        "POST",
        "/v1/conversations",
        {"bogus": 1},
        code="unknown_parameter",
        param="bogus",
    ),
    case(
        "create-unknown-in-item",
        "POST",
        "/v1/conversations",
        {"items": [USER, {**USER, "bogus": 1}]},
        code="unknown_parameter",
        param="items[1].bogus",
    ),
    case(
        "create-items-string",
        "POST",
        "/v1/conversations",
        {"items": "x"},
        code="invalid_type",
        param="items",
    ),
    case(
        "create-item-int",
        "POST",
        "/v1/conversations",
        {"items": [5]},
        code="invalid_type",
        param="items[0]",
    ),
    case(
        "create-metadata-list",
        "POST",
        "/v1/conversations",
        {"metadata": ["a"]},
        code="invalid_type",
        param="metadata",
    ),
    case(
        "create-missing-role",
        "POST",
        "/v1/conversations",
        {"items": [{"content": "x"}]},
        code="missing_required_parameter",
        param="items[0].role",
    ),
    case(
        "create-metadata-17-keys",
        "POST",
        "/v1/conversations",
        {"metadata": meta_17()},
        param="metadata",
        mentions=("16",),
    ),
    case(
        "create-metadata-long-key",
        "POST",
        "/v1/conversations",
        {"metadata": META_LONG_KEY},
        param="metadata",
        mentions=("64",),
    ),
    case(
        "create-metadata-long-value",
        "POST",
        "/v1/conversations",
        {"metadata": META_LONG_VALUE},
        param="metadata",
        mentions=("512",),
    ),
    case(
        "create-21-items",
        "POST",
        "/v1/conversations",
        {"items": [USER] * 21},
        param="items",
        mentions=("20",),
    ),
    case(
        "create-unsupported-item",
        "POST",
        "/v1/conversations",
        {"items": [{"type": "web_search_call", "id": "ws_1"}]},
        param="items[0].type",
        mentions=("web_search_call",),
    ),
    # POST /v1/conversations/{id}
    case(
        "update-missing-metadata",
        "POST",
        f"/v1/conversations/{CONV}",
        {},
        code="missing_required_parameter",
        param="metadata",
    ),
    case(
        "update-unknown",
        "POST",
        f"/v1/conversations/{CONV}",
        {"metadata": {"a": "b"}, "items": []},
        code="unknown_parameter",
        param="items",
    ),
    case(
        "update-metadata-string",
        "POST",
        f"/v1/conversations/{CONV}",
        {"metadata": "x"},
        code="invalid_type",
        param="metadata",
    ),
    case(
        "update-metadata-value-int",
        "POST",
        f"/v1/conversations/{CONV}",
        {"metadata": {"n": 1}},
        code="invalid_type",
        param="metadata.n",
    ),
    case(
        "update-metadata-17-keys",
        "POST",
        f"/v1/conversations/{CONV}",
        {"metadata": meta_17()},
        param="metadata",
        mentions=("16",),
    ),
    case(
        "update-metadata-long-key",
        "POST",
        f"/v1/conversations/{CONV}",
        {"metadata": META_LONG_KEY},
        param="metadata",
        mentions=("64",),
    ),
    case(
        "update-metadata-long-value",
        "POST",
        f"/v1/conversations/{CONV}",
        {"metadata": META_LONG_VALUE},
        param="metadata",
        mentions=("512",),
    ),
    # POST /v1/conversations/{id}/items
    case(
        "items-create-missing-items",
        "POST",
        f"/v1/conversations/{CONV}/items",
        {},
        code="missing_required_parameter",
        param="items",
    ),
    case(
        "items-create-unknown",
        "POST",
        f"/v1/conversations/{CONV}/items",
        {"items": [USER], "metadata": {}},
        code="unknown_parameter",
        param="metadata",
    ),
    case(
        "items-create-items-object",
        "POST",
        f"/v1/conversations/{CONV}/items",
        {"items": USER},
        code="invalid_type",
        param="items",
    ),
    case(
        "items-create-second-item-bad",
        "POST",
        f"/v1/conversations/{CONV}/items",
        {"items": [USER, {"role": "user", "content": "y", "bogus": 1}]},
        code="unknown_parameter",
        param="items[1].bogus",
    ),
    case(
        "items-create-21-items",
        "POST",
        f"/v1/conversations/{CONV}/items",
        {"items": [USER] * 21},
        param="items",
        mentions=("20",),
    ),
    case(
        "items-create-unsupported-item",
        "POST",
        f"/v1/conversations/{CONV}/items",
        {"items": [USER, {"type": "computer_call", "id": "cu_1"}]},
        param="items[1].type",
        mentions=("computer_call",),
    ),
    case(
        "items-create-output-for-no-call",
        "POST",
        f"/v1/conversations/{CONV}/items",
        {"items": [{"type": "function_call_output", "call_id": "call_orphan", "output": "1"}]},
        mentions=("call_orphan",),
    ),
    case(
        "items-create-output-twice",
        "POST",
        f"/v1/conversations/{CONV}/items",
        {
            "items": [
                {"type": "function_call", "call_id": "call_twice", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_twice", "output": "1"},
                {"type": "function_call_output", "call_id": "call_twice", "output": "2"},
            ]
        },
        mentions=("call_twice",),
    ),
]


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def raw(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30.0) as client:
        yield client


@pytest.fixture(scope="module")
def ids(raw: httpx.Client) -> Ids:
    conv = raw.post(
        "/v1/conversations",
        json={
            "items": [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "second"},
            ],
            "metadata": {"state": "original"},
        },
    ).json()["id"]
    item = raw.get(f"/v1/conversations/{conv}/items", params={"order": "asc"}).json()["data"][0][
        "id"
    ]
    resp = raw.post("/v1/responses", json={"model": "embedded", "input": "foreground"}).json()["id"]
    bg = raw.post(
        "/v1/responses", json={"model": "embedded", "input": "background", "background": True}
    ).json()["id"]
    assert wait_terminal(raw, bg)["status"] == "completed"
    return Ids(conv=conv, item=item, resp=resp, bg=bg)


def snapshot(raw: httpx.Client, ids: Ids) -> list[Any]:
    """Everything a bad request could have changed, as the API shows it."""
    paths = [
        f"/v1/conversations/{ids.conv}",
        f"/v1/conversations/{ids.conv}/items?order=asc&limit=100",
        f"/v1/conversations/{ids.conv}/items/{ids.item}",
        f"/v1/responses/{ids.resp}",
        f"/v1/responses/{ids.resp}/input_items?order=asc&limit=100",
        f"/v1/responses/{ids.bg}",
    ]
    out = []
    for path in paths:
        response = raw.get(path)
        assert response.status_code == 200, (path, response.text)
        out.append(response.json())
    return out


def send(raw: httpx.Client, ids: Ids, bad: Bad) -> httpx.Response:
    headers = {"content-type": "application/json", **bad.headers}
    if isinstance(bad.body, dict):
        content: bytes | None = ids.fill(json.dumps(bad.body)).encode()
    elif bad.body is not None:  # latin-1 keeps any bytes as they are
        content = ids.fill(bad.body.decode("latin-1")).encode("latin-1")
    else:
        content = bad.body
    return raw.request(bad.method, ids.fill(bad.path), content=content, headers=headers)


# -- tests --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad", [*PARSE_CASES, *CREATE_CASES, *OUT_OF_RANGE_CASES, *QUERY_CASES, *CONVERSATION_CASES]
)
def test_bad_request_is_refused_in_the_envelope_and_changes_nothing(
    raw: httpx.Client, ids: Ids, bad: Bad
) -> None:
    before = snapshot(raw, ids)

    response = send(raw, ids, bad)

    error = assert_error(response, bad.status)
    if bad.code is not ANY:
        assert error["code"] == bad.code, error
    if bad.param is not ANY:
        assert error["param"] == bad.param, error
    if error["code"] in ("unknown_parameter", "missing_required_parameter", "invalid_type"):
        assert f"'{error['param']}'" in error["message"], "the message names the parameter"
    for text in bad.mentions:
        assert text in error["message"], error
    assert snapshot(raw, ids) == before, "a refused request must change nothing"


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/v1/nowhere", id="unknown-v1"),
        pytest.param("/nowhere", id="unknown-root"),
        pytest.param("/v1/responses/resp_1/outputs", id="unknown-under-response"),
        pytest.param("/v1/conversations/conv_1/items/msg_1/more", id="too-deep"),
        pytest.param("/v2/responses", id="wrong-version"),
        pytest.param("/v1/responses/", id="trailing-slash"),
        pytest.param("/v1/conversations/", id="trailing-slash-conversations"),
    ],
)
def test_unknown_path_is_a_404_envelope(raw: httpx.Client, path: str) -> None:
    for method in ("GET", "POST", "DELETE"):
        response = raw.request(method, path)

        assert_error(response, 404)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        pytest.param("GET", "/v1/responses", id="get-responses"),
        pytest.param("PUT", "/v1/responses", id="put-responses"),
        pytest.param("PATCH", f"/v1/responses/{RESP}", id="patch-response"),
        pytest.param("POST", f"/v1/responses/{RESP}", id="post-response"),
        pytest.param("GET", f"/v1/responses/{RESP}/cancel", id="get-cancel"),
        pytest.param("DELETE", f"/v1/responses/{RESP}/input_items", id="delete-input-items"),
        pytest.param("GET", "/v1/conversations", id="get-conversations"),
        pytest.param("PATCH", f"/v1/conversations/{CONV}", id="patch-conversation"),
        pytest.param("PUT", f"/v1/conversations/{CONV}/items", id="put-items"),
        pytest.param("POST", f"/v1/conversations/{CONV}/items/{ITEM}", id="post-item"),
        pytest.param("PUT", f"/conversations/{CONV}", id="put-conversation-no-prefix"),
    ],
)
def test_wrong_method_is_a_405_envelope_and_changes_nothing(
    raw: httpx.Client, ids: Ids, method: str, path: str
) -> None:
    before = snapshot(raw, ids)

    response = raw.request(
        method, ids.fill(path), json={"metadata": {"changed": "yes"}, "items": [USER]}
    )

    assert_error(response, 405)
    assert snapshot(raw, ids) == before


def test_a_refused_turn_leaves_the_conversation_usable(raw: httpx.Client, ids: Ids) -> None:
    """After many refused requests the conversation still works and holds only good turns."""
    conv = raw.post("/v1/conversations", json={"items": [USER]}).json()["id"]
    for body in (
        {"model": "embedded", "input": "x", "conversation": conv, "temperature": 9},
        {"model": "embedded", "input": [{"role": "user"}], "conversation": conv},
    ):
        assert_error(raw.post("/v1/responses", json=body), 400)

    ok = raw.post(
        "/v1/responses", json={"model": "embedded", "input": "one two", "conversation": conv}
    )

    assert ok.status_code == 200, ok.text
    assert ok.json()["usage"]["input_tokens"] == 1 + 2
    items = raw.get(f"/v1/conversations/{conv}/items", params={"order": "asc"}).json()["data"]
    assert len(items) == 1 + 1 + len(ok.json()["output"])


# -- oversized bodies -----------------------------------------------------------------------

LIMIT = 2048


@pytest.fixture(scope="module")
def small_server(
    stores: Stores, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("small_body")
    with serving(stores, folder, "--max-body-bytes", str(LIMIT)) as process:
        yield process


@pytest.fixture
def small(small_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=small_server.url, timeout=30.0) as client:
        yield client


def big_text() -> str:
    return "word " * (LIMIT // 2)


@pytest.mark.parametrize(
    "chunked", [pytest.param(False, id="content-length"), pytest.param(True, id="chunked")]
)
def test_oversized_bodies_get_a_413_envelope_and_change_nothing(
    small: httpx.Client, chunked: bool
) -> None:
    conv = small.post(
        "/v1/conversations", json={"items": [USER], "metadata": {"state": "original"}}
    ).json()["id"]
    before = (
        small.get(f"/v1/conversations/{conv}").json(),
        small.get(f"/v1/conversations/{conv}/items").json(),
    )
    bodies = [
        ("/v1/responses", {"model": "embedded", "input": big_text(), "conversation": conv}),
        ("/v1/conversations", {"items": [{"role": "user", "content": big_text()}]}),
        (
            f"/v1/conversations/{conv}",
            {
                "metadata": {
                    "big": big_text()[:500],
                    **{f"k{i}": big_text()[:500] for i in range(8)},
                }
            },
        ),
        (f"/v1/conversations/{conv}/items", {"items": [{"role": "user", "content": big_text()}]}),
        ("/responses", {"model": "embedded", "input": big_text()}),
    ]
    for path, body in bodies:
        data = json.dumps(body).encode()
        assert len(data) > LIMIT
        content: Any = iter([data[:1000], data[1000:]]) if chunked else data

        response = small.post(path, content=content, headers={"content-type": "application/json"})

        error = assert_error(response, 413)
        assert str(LIMIT) in error["message"]
    after = (
        small.get(f"/v1/conversations/{conv}").json(),
        small.get(f"/v1/conversations/{conv}/items").json(),
    )
    assert after == before


def test_a_body_under_the_limit_is_served(small: httpx.Client) -> None:
    response = small.post("/v1/responses", json={"model": "embedded", "input": "small [[words 2]]"})

    assert response.status_code == 200, response.text
    assert response.json()["status"] == "completed"


def test_too_small_a_body_limit_is_refused_at_startup(start_server: StartServer) -> None:
    """The setting's floor (1024 bytes) is enforced: the server does not start with less."""
    server = start_server("--max-body-bytes", "10", wait=False)
    assert server.proc is not None
    code = server.proc.wait(timeout=30)

    assert code != 0
    assert "Traceback" not in server.log()
    assert "1024" in server.log(), "the message names the smallest allowed value"


def test_a_supported_include_on_a_read_is_accepted(raw: httpx.Client, ids: Ids) -> None:
    """The values a create honours are accepted on a read too (the stored object holds what
    its create asked for); only unknown and hosted-tool values are refused (QUERY_CASES)."""
    included = "include[]=message.output_text.logprobs&include[]=reasoning.encrypted_content"
    for path in (
        f"/v1/responses/{ids.resp}?{included}&include_obfuscation=false",
        f"/v1/responses/{ids.resp}/input_items?{included}",
        f"/v1/conversations/{ids.conv}/items?{included}",
    ):
        assert raw.get(path).status_code == 200, path
    assert (
        raw.get(f"/v1/responses/{ids.resp}").json()
        == raw.get(f"/v1/responses/{ids.resp}?{included}").json()
    )
