"""The schema validators accept spec-shaped objects and reject broken ones."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.schemas import (
    event_schema_name,
    validate_error_envelope,
    validate_event,
    validate_item,
    validate_response,
)

Obj = dict[str, Any]

MESSAGE: Obj = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Sunny.", "annotations": [], "logprobs": []}],
}
CALL: Obj = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city": "Paris"}',
    "status": "completed",
}
CALL_OUTPUT: Obj = {
    "type": "function_call_output",
    "id": "fco_1",
    "call_id": "call_1",
    "output": "sunny",
    "status": "completed",
}
REASONING: Obj = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "Think."}],
}
TOOL: Obj = {
    "type": "function",
    "name": "get_weather",
    "description": None,
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": True,
}

# docs/protocol.md section 6 "Recommended full shape", plus what Open Responses also
# requires (presence_penalty, frequency_penalty), minus "user": null (OpenAI types
# `user` as a non-null string; neither schema requires it).
RESPONSE: Obj = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1741476542,
    "status": "completed",
    "background": False,
    "completed_at": 1741476543,
    "error": None,
    "incomplete_details": None,
    "instructions": None,
    "max_output_tokens": None,
    "max_tool_calls": None,
    "model": "test-model",
    "output": [CALL, CALL_OUTPUT, MESSAGE],
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "conversation": None,
    "reasoning": {"effort": None, "summary": None},
    "service_tier": "default",
    "store": True,
    "temperature": 1.0,
    "text": {"format": {"type": "text"}},
    "tool_choice": "auto",
    "tools": [TOOL],
    "top_logprobs": 0,
    "top_p": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "truncation": "disabled",
    "usage": {
        "input_tokens": 32,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 18,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 50,
    },
    "metadata": {},
    "prompt_cache_key": None,
    "safety_identifier": None,
}


def _changed(base: Obj, **changes: Any) -> Obj:
    obj = copy.deepcopy(base)
    obj.update(changes)
    return obj


def _without(base: Obj, *keys: str) -> Obj:
    obj = copy.deepcopy(base)
    for key in keys:
        del obj[key]
    return obj


def _running(status: str) -> Obj:
    # While running, usage is a zeroed object: OpenAI rejects null, Open Responses
    # requires the key.
    zero = {
        "input_tokens": 0,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 0,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 0,
    }
    return _changed(RESPONSE, status=status, output=[], completed_at=None, usage=zero)


def _edit(base: Obj, edit: Callable[[Obj], None]) -> Obj:
    obj = copy.deepcopy(base)
    edit(obj)
    return obj


# -- responses -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "response",
    [
        pytest.param(RESPONSE, id="completed"),
        pytest.param(_running("queued"), id="queued"),
        pytest.param(_running("in_progress"), id="in-progress"),
        pytest.param(
            _changed(
                _running("failed"), error={"code": "server_error", "message": "Server restarted."}
            ),
            id="failed",
        ),
        pytest.param(_running("cancelled"), id="cancelled"),
        pytest.param(
            _changed(
                RESPONSE,
                status="incomplete",
                completed_at=None,
                incomplete_details={"reason": "max_output_tokens"},
            ),
            id="incomplete",
        ),
        pytest.param(
            _changed(RESPONSE, tool_choice={"type": "function", "name": "get_weather"}),
            id="tool-choice-function",
        ),
        pytest.param(_changed(RESPONSE, conversation={"id": "conv_1"}), id="conversation"),
        pytest.param(_changed(RESPONSE, output=[REASONING, MESSAGE]), id="reasoning-output"),
    ],
)
def test_valid_response(response: Obj) -> None:
    validate_response(response)


def _tool_without_description(obj: Obj) -> None:
    del obj["tools"][0]["description"]


def _part_without_logprobs(obj: Obj) -> None:
    del obj["output"][2]["content"][0]["logprobs"]


def _part_without_annotations(obj: Obj) -> None:
    del obj["output"][2]["content"][0]["annotations"]


def _usage_without_cache_write_tokens(obj: Obj) -> None:
    del obj["usage"]["input_tokens_details"]["cache_write_tokens"]


@pytest.mark.parametrize(
    ("response", "match"),
    [
        pytest.param(_without(RESPONSE, "presence_penalty"), "openresponses", id="no-penalty"),
        pytest.param(_without(RESPONSE, "text"), "openresponses", id="no-text"),
        pytest.param(_without(RESPONSE, "id"), "'id' is a required", id="no-id"),
        pytest.param(_changed(RESPONSE, created_at=1.5), "openresponses", id="float-created-at"),
        pytest.param(_changed(RESPONSE, usage=None), "openai schema", id="usage-null"),
        pytest.param(_changed(RESPONSE, user=None), "openai schema", id="user-null"),
        pytest.param(_changed(RESPONSE, status="done"), "openai schema", id="unknown-status"),
        pytest.param(_changed(RESPONSE, service_tier=None), "openresponses", id="tier-null"),
        pytest.param(_changed(RESPONSE, top_logprobs=None), "openresponses", id="logprobs-null"),
        pytest.param(
            _changed(RESPONSE, error={"code": "cancelled", "message": "x"}),
            "'cancelled' is not one of",
            id="error-code-not-in-enum",
        ),
        pytest.param(
            _changed(RESPONSE, status="incomplete", incomplete_details={"reason": "steered"}),
            "'steered' is not one of",
            id="incomplete-steered",
        ),
        pytest.param(
            _edit(RESPONSE, _tool_without_description), "'description'", id="tool-no-description"
        ),
        pytest.param(_edit(RESPONSE, _part_without_logprobs), "'logprobs'", id="part-no-logprobs"),
        pytest.param(
            _edit(RESPONSE, _part_without_annotations), "'annotations'", id="part-no-annotations"
        ),
        pytest.param(
            _edit(RESPONSE, _usage_without_cache_write_tokens),
            "'cache_write_tokens'",
            id="usage-no-cache-write-tokens",
        ),
    ],
)
def test_invalid_response(response: Obj, match: str) -> None:
    with pytest.raises(AssertionError, match=match):
        validate_response(response)


# -- items ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "item",
    [
        pytest.param(MESSAGE, id="message"),
        pytest.param(_changed(MESSAGE, status="in_progress", content=[]), id="message-added"),
        pytest.param(CALL, id="function-call"),
        pytest.param(CALL_OUTPUT, id="function-call-output"),
        pytest.param(
            _changed(CALL_OUTPUT, output=[{"type": "input_text", "text": "sunny"}]),
            id="function-call-output-parts",
        ),
        pytest.param(REASONING, id="reasoning"),
    ],
)
def test_valid_item(item: Obj) -> None:
    validate_item(item)


@pytest.mark.parametrize(
    ("item", "match"),
    [
        pytest.param(_without(CALL, "id"), "'id' is a required", id="call-no-id"),
        pytest.param(_without(CALL, "status"), "'status' is a required", id="call-no-status"),
        pytest.param(_without(CALL, "name"), "'name' is a required", id="call-no-name"),
        pytest.param(_without(CALL_OUTPUT, "call_id"), "'call_id'", id="output-no-call-id"),
        pytest.param(_without(CALL_OUTPUT, "id"), "'id' is a required", id="output-no-id"),
        pytest.param(_without(CALL_OUTPUT, "status"), "'status'", id="output-no-status"),
        pytest.param(
            _changed(CALL_OUTPUT, output={"a": 1}), "not of type 'string'", id="output-not-string"
        ),
        pytest.param(_changed(MESSAGE, status="done"), "'done' is not one of", id="msg-status"),
        pytest.param(_changed(CALL, type="tool_call"), "not valid under any", id="unknown-type"),
    ],
)
def test_invalid_item(item: Obj, match: str) -> None:
    with pytest.raises(AssertionError, match=match):
        validate_item(item)


# -- events --------------------------------------------------------------------------

TEXT_WHERE: Obj = {"item_id": "msg_1", "output_index": 2, "content_index": 0}
CALL_WHERE: Obj = {"item_id": "fc_1", "output_index": 0}
PART: Obj = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}


def _event(event_type: str, **fields: Any) -> Obj:
    return {"type": event_type, "sequence_number": 3, **fields}


VALID_EVENTS = [
    _event("response.created", response=_running("queued")),
    _event("response.queued", response=_running("queued")),
    _event("response.in_progress", response=_running("in_progress")),
    _event("response.output_item.added", output_index=0, item=_changed(CALL, arguments="")),
    _event("response.function_call_arguments.delta", **CALL_WHERE, delta="{"),
    _event(
        "response.function_call_arguments.done",
        **CALL_WHERE,
        arguments=CALL["arguments"],
        name="get_weather",
    ),
    _event("response.output_item.done", output_index=0, item=CALL),
    _event("response.output_item.added", output_index=1, item=CALL_OUTPUT),
    _event("response.content_part.added", **TEXT_WHERE, part=PART),
    _event("response.output_text.delta", **TEXT_WHERE, delta="Sun", logprobs=[]),
    _event("response.output_text.done", **TEXT_WHERE, text="Sunny.", logprobs=[]),
    _event("response.content_part.done", **TEXT_WHERE, part=MESSAGE["content"][0]),
    _event("response.refusal.delta", **TEXT_WHERE, delta="No"),
    _event("response.reasoning_text.delta", **TEXT_WHERE, delta="Hm"),
    _event("response.reasoning_text.done", **TEXT_WHERE, text="Hm"),
    _event("response.completed", response=RESPONSE),
    _event("response.failed", response=_running("cancelled")),
    _event("error", code="server_error", message="Boom.", param=None),
]


@pytest.mark.parametrize("event", [pytest.param(e, id=e["type"]) for e in VALID_EVENTS])
def test_valid_event(event: Obj) -> None:
    validate_event(event)


@pytest.mark.parametrize(
    ("event", "match"),
    [
        pytest.param(
            _event("response.output_text.delta", **TEXT_WHERE, delta="x"),
            "'logprobs' is a required",
            id="delta-no-logprobs",
        ),
        pytest.param(
            _event("response.output_text.done", **TEXT_WHERE, text="x"),
            "'logprobs' is a required",
            id="text-done-no-logprobs",
        ),
        pytest.param(
            _event("response.function_call_arguments.done", **CALL_WHERE, arguments="{}"),
            "'name' is a required",
            id="args-done-no-name",
        ),
        pytest.param(
            _without(
                _event("response.output_text.delta", **TEXT_WHERE, delta="x", logprobs=[]),
                "sequence_number",
            ),
            "'sequence_number' is a required",
            id="no-sequence-number",
        ),
        pytest.param(
            _event("response.created", response=_changed(RESPONSE, usage=None)),
            "openai schema ResponseCreatedEvent",
            id="created-usage-null",
        ),
        pytest.param(
            _event("response.output_item.added", output_index=0, item=_without(CALL, "id")),
            "'id' is a required",
            id="added-item-no-id",
        ),
        pytest.param(
            _event(
                "error", error={"type": "server_error", "code": None, "message": "x", "param": None}
            ),
            "openai schema ResponseErrorEvent",
            id="error-nested-shape",
        ),
        pytest.param(
            _event("response.cancelled", response=RESPONSE), "no schema", id="unknown-type"
        ),
        pytest.param({"sequence_number": 1}, "no string 'type'", id="no-type"),
    ],
)
def test_invalid_event(event: Obj, match: str) -> None:
    with pytest.raises(AssertionError, match=match):
        validate_event(event)


def test_event_schema_names() -> None:
    assert event_schema_name("openai", "response.output_text.delta") == "ResponseTextDeltaEvent"
    assert (
        event_schema_name("openresponses", "response.output_text.delta")
        == "ResponseOutputTextDeltaStreamingEvent"
    )
    assert event_schema_name("openresponses", "response.reasoning_text.delta") is None


# -- error envelope ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            {
                "error": {
                    "message": "x",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": None,
                }
            },
            id="nulls",
        ),
        pytest.param(
            {
                "error": {
                    "message": "Previous response with id 'resp_1' not found.",
                    "type": "invalid_request_error",
                    "param": "previous_response_id",
                    "code": "previous_response_not_found",
                }
            },
            id="previous-not-found",
        ),
    ],
)
def test_valid_error_envelope(body: Obj) -> None:
    validate_error_envelope(body)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        pytest.param(
            {"error": {"message": "x", "type": "invalid_request_error", "code": None}},
            "'param' is a required",
            id="no-param",
        ),
        pytest.param(
            {"error": {"message": "x", "type": "invalid_request_error", "param": None}},
            "'code' is a required",
            id="no-code",
        ),
        pytest.param(
            {"message": "x", "type": "invalid_request_error", "param": None, "code": None},
            "'error' is a required",
            id="flat",
        ),
        pytest.param(
            {"error": {"message": 1, "type": "x", "param": None, "code": None}},
            "1 is not of type 'string'",
            id="message-not-string",
        ),
    ],
)
def test_invalid_error_envelope(body: Obj, match: str) -> None:
    with pytest.raises(AssertionError, match=match):
        validate_error_envelope(body)
