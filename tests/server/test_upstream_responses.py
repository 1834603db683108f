"""The Responses upstream in process (server/_upstream_responses.py): streams an upstream
may send that the scripted one does not (items only whole, arguments only at `.done`, a
call without an id, errors nested or not, a body cut before its terminal event, a cut
reasoning item), read through httpx's mock transport; and the input items it sends. The
SDK-level tests against the scripted upstream are
tests/integration/test_issue16_responses_upstream.py.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

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
)
from server import ResponsesUpstreamModel
from server._upstream_responses import input_items

Event = dict[str, Any]
REQUEST = ModelRequest(
    model="m", instructions=None, input=[{"role": "user", "content": "hi"}], tools=[]
)


def _stream(*events: Event) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


def _completed(*output: Event, **response: Any) -> Event:
    return {
        "type": "response.completed",
        "response": {"model": "m-1", "service_tier": "default", "output": list(output), **response},
    }


async def _events(body: bytes, status: int = 200) -> list[ModelEvent]:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers={"content-type": "text/event-stream"})

    model = ResponsesUpstreamModel("http://upstream/v1", transport=httpx.MockTransport(answer))
    try:
        return [event async for event in model.stream(REQUEST)]
    finally:
        await model.aclose()


async def test_items_sent_only_whole_are_read_from_their_done_events() -> None:
    reasoning = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [
            {"type": "summary_text", "text": "Think."},
            {"type": "summary_text", "text": "Twice."},
        ],
        "encrypted_content": "gAAAA",
    }
    message = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "phase": "final_answer",
        "content": [{"type": "output_text", "text": "Hello", "annotations": []}],
    }
    call = {"type": "function_call", "id": "fc_1", "name": "f", "arguments": '{"a":1}'}

    events = await _events(
        _stream(
            {"type": "response.output_item.done", "output_index": 0, "item": reasoning},
            {"type": "response.output_item.done", "output_index": 1, "item": message},
            _completed(reasoning, message, call, usage={"input_tokens": 3, "output_tokens": 2}),
        )
    )

    said, [made_up] = events[:6], [e for e in events if isinstance(e, FunctionCallDelta)]
    assert said == [
        ReasoningStart("rs_1"),
        ReasoningDelta("Think.", 0),
        ReasoningDelta("Twice.", 1),
        ReasoningDone("gAAAA"),
        MessageStart("final_answer"),
        TextDelta("Hello"),
    ]
    assert (made_up.name, made_up.arguments) == ("f", '{"a":1}')
    assert made_up.call_id.startswith("call_")  # never a reused `call_0`
    assert events[7:] == [ModelInfo("m-1", "default"), Usage(3, 2)]


async def test_arguments_given_only_at_done_are_the_calls() -> None:
    added = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": ""}

    events = await _events(
        _stream(
            {"type": "response.output_item.added", "output_index": 0, "item": added},
            {"type": "response.function_call_arguments.done", "item_id": "fc_1", "arguments": "{}"},
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": {**added, "arguments": None},
            },
            _completed(),
        )
    )

    assert [e for e in events if isinstance(e, FunctionCallDelta)] == [
        FunctionCallDelta("c1", "f", "{}")
    ]


async def test_two_calls_under_one_id_stay_two_calls() -> None:
    def call(index: int, city: str) -> Event:
        item = {"type": "function_call", "id": f"fc_{index}", "call_id": "call_0", "name": "f"}
        return {
            "type": "response.output_item.done",
            "output_index": index,
            "item": {**item, "arguments": json.dumps({"city": city})},
        }

    events = await _events(_stream(call(0, "Paris"), call(1, "Rome"), _completed()))

    first, second = [e for e in events if isinstance(e, FunctionCallDelta)]
    assert first == FunctionCallDelta("call_0", "f", '{"city": "Paris"}')
    assert second.call_id not in ("call_0", "") and second.arguments == '{"city": "Rome"}'


async def test_an_incomplete_response_keeps_its_text_and_drops_its_cut_call() -> None:
    cut = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": '{"a'}
    text = {"type": "message", "id": "msg_1", "content": [{"type": "refusal", "refusal": "No."}]}
    incomplete = {
        "type": "response.incomplete",
        "response": {"output": [text, cut], "incomplete_details": {"reason": "content_filter"}},
    }

    events = await _events(
        _stream({"type": "response.output_item.added", "output_index": 1, "item": cut}, incomplete)
    )

    assert events == [MessageStart(), RefusalDelta("No."), Incomplete("content_filter")]


async def test_streamed_items_begin_and_end_where_the_upstream_says() -> None:
    """Summary parts stay apart by their index, a reasoning item takes its encrypted
    content from its done item only (the added one's may be partial, OpenAI warns), a
    cut one none, and each message begins anew with its phase."""
    rs = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAA-part"}
    cut = {"type": "reasoning", "id": "rs_2", "summary": [], "status": "incomplete"}
    first = {"type": "message", "id": "msg_1", "phase": "commentary", "content": []}
    second = {"type": "message", "id": "msg_2", "phase": "final_answer", "content": []}

    def summary(index: int, delta: str) -> Event:
        kind = "response.reasoning_summary_text.delta"
        return {"type": kind, "item_id": "rs_1", "summary_index": index, "delta": delta}

    def said(item_id: str, delta: str) -> Event:
        return {"type": "response.output_text.delta", "item_id": item_id, "delta": delta}

    events = await _events(
        _stream(
            {"type": "response.output_item.added", "output_index": 0, "item": rs},
            summary(0, "One."),
            summary(1, "Two."),
            {"type": "response.output_item.done", "item": {**rs, "encrypted_content": "gAAAA"}},
            {"type": "response.output_item.added", "output_index": 1, "item": first},
            said("msg_1", "Looking."),
            {"type": "response.output_item.added", "output_index": 2, "item": second},
            said("msg_2", "Found."),
            {"type": "response.output_item.added", "output_index": 3, "item": cut},
            {"type": "response.reasoning_text.delta", "item_id": "rs_2", "delta": "Hm"},
            _completed(cut, usage={"input_tokens_details": {"cache_write_tokens": 5}}),
        )
    )

    assert events == [
        ReasoningStart("rs_1"),
        ReasoningDelta("One.", 0),
        ReasoningDelta("Two.", 1),
        ReasoningDone("gAAAA"),
        MessageStart("commentary"),
        TextDelta("Looking."),
        MessageStart("final_answer"),
        TextDelta("Found."),
        ReasoningStart("rs_2"),
        ReasoningDelta("Hm"),
        ReasoningDone(None),
        ModelInfo("m-1", "default"),
        Usage(0, 0, cache_write_tokens=5),
    ]


@pytest.mark.parametrize(
    ("event", "code", "retryable"),
    [
        pytest.param(
            {"type": "error", "code": "rate_limit_exceeded", "message": "slow"},
            "rate_limit_exceeded",
            True,
            id="error-event",
        ),
        pytest.param(
            {"type": "error", "error": {"code": "context_length_exceeded", "message": "long"}},
            "server_error",
            False,
            id="nested-error-event",
        ),
        pytest.param(
            {"type": "response.failed", "response": {"error": {"code": "server_error"}}},
            "server_error",
            True,
            id="failed",
        ),
        pytest.param(
            {"type": "response.failed", "response": {"error": None}},
            "server_error",
            True,
            id="failed-without-error",
        ),
    ],
)
async def test_upstream_failures_keep_their_code_when_openai_has_it(
    event: Event, code: str, retryable: bool
) -> None:
    with pytest.raises(ModelError) as failure:
        await _events(_stream({"type": "response.created", "response": {"model": "m"}}, event))

    assert (failure.value.code, failure.value.retryable) == (code, retryable)


async def test_a_stream_cut_before_its_terminal_event_is_retried() -> None:
    delta = {"type": "response.output_text.delta", "item_id": "msg_1", "delta": "Hel"}

    with pytest.raises(ModelError) as failure:
        await _events(_stream(delta))

    assert failure.value.retryable


async def test_a_400_is_invalid_prompt_and_a_429_is_retried() -> None:
    with pytest.raises(ModelError) as refused:
        await _events(b'{"error": {"message": "Unknown parameter"}}', status=400)
    with pytest.raises(ModelError) as limited:
        await _events(b"{}", status=429)

    assert (refused.value.code, refused.value.retryable) == ("invalid_prompt", False)
    assert "Unknown parameter" in refused.value.message
    assert (limited.value.code, limited.value.retryable) == ("rate_limit_exceeded", True)


def test_input_items_keep_only_what_a_stateless_upstream_takes() -> None:
    items: list[Event] = [
        {
            "type": "message",
            "id": "msg_u",
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"}],
        },
        {
            "type": "reasoning",
            "id": "rs_ours",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "t"}],
        },
        {
            "type": "message",
            "id": "mine-1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "a", "annotations": [], "logprobs": []}],
        },
    ]

    assert input_items(items) == [
        {
            "type": "message",
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"}],
        },
        {
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "a", "annotations": []}],
        },
    ]


def test_encrypted_reasoning_is_sent_only_before_the_item_it_led_to() -> None:
    """A reasoning item whose answer was cut (a retried step's first attempt) has nothing
    after it, or another reasoning item: OpenAI refuses it so, and it is not sent."""

    def reasoning(item_id: str) -> Event:
        summary = [{"type": "summary_text", "text": "t"}]
        return {
            "type": "reasoning",
            "id": item_id,
            "summary": summary,
            "content": [],
            "encrypted_content": f"gAAAA{item_id}",
            "status": "completed",
        }

    said = {"type": "message", "role": "assistant", "phase": "commentary", "content": "a"}
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    user = {"type": "message", "role": "user", "content": "hi"}

    history = [user, reasoning("rs_cut"), reasoning("rs_1"), said, reasoning("rs_2"), call]
    sent = input_items([*history, reasoning("rs_last")])

    assert [i.get("id") for i in sent] == [None, "rs_1", None, "rs_2", None]
    kept = reasoning("rs_1")
    del kept["content"]  # empty: not sent
    assert sent[1] == kept
    assert sent[2]["phase"] == "commentary"
