"""The stream checker accepts well-formed streams and names each broken rule."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.stream_rules import check_stream, parse_sse

Event = dict[str, Any]

USAGE = {
    "input_tokens": 10,
    "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
    "output_tokens": 5,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 15,
}


def _response(status: str, output: list[Any], *, rid: str = "resp_1") -> dict[str, Any]:
    finished = status not in ("queued", "in_progress")
    return {
        "id": rid,
        "object": "response",
        "status": status,
        "output": copy.deepcopy(output),
        "usage": copy.deepcopy(USAGE) if finished else None,
    }


def _numbered(events: list[Event]) -> list[Event]:
    for seq, event in enumerate(events):
        event["sequence_number"] = seq
    return events


def _message(status: str, text: str | None, mid: str = "msg_1") -> dict[str, Any]:
    content = [] if text is None else [_part(text)]
    return {"type": "message", "id": mid, "role": "assistant", "status": status, "content": content}


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_events(index: int, chunks: list[str], mid: str = "msg_1") -> list[Event]:
    text = "".join(chunks)
    where = {"item_id": mid, "output_index": index, "content_index": 0}
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": _message("in_progress", None, mid),
        },
        {"type": "response.content_part.added", **where, "part": _part("")},
        *(
            {"type": "response.output_text.delta", **where, "delta": c, "logprobs": []}
            for c in chunks
        ),
        {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **where, "part": _part(text)},
        {
            "type": "response.output_item.done",
            "output_index": index,
            "item": _message("completed", text, mid),
        },
    ]


def text_stream() -> list[Event]:
    """docs/protocol.md section 7, canonical text ordering."""
    final = [_message("completed", "Hello world")]
    return _numbered(
        [
            {"type": "response.created", "response": _response("in_progress", [])},
            {"type": "response.in_progress", "response": _response("in_progress", [])},
            *_message_events(0, ["Hel", "lo", " world"]),
            {"type": "response.completed", "response": _response("completed", final)},
        ]
    )


def _call(status: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": arguments,
        "status": status,
    }


def function_call_stream() -> list[Event]:
    """Background run: a server-executed tool call, its output item, then a message."""
    args = '{"city": "Paris"}'
    output_item = {
        "type": "function_call_output",
        "id": "fco_1",
        "call_id": "call_1",
        "output": "sunny",
        "status": "completed",
    }
    final = [_call("completed", args), output_item, _message("completed", "Sunny.")]
    where = {"item_id": "fc_1", "output_index": 0}
    return _numbered(
        [
            {"type": "response.created", "response": _response("queued", [])},
            {"type": "response.queued", "response": _response("queued", [])},
            {"type": "response.in_progress", "response": _response("in_progress", [])},
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": _call("in_progress", ""),
            },
            {"type": "response.function_call_arguments.delta", **where, "delta": '{"city": '},
            {"type": "response.function_call_arguments.delta", **where, "delta": '"Paris"}'},
            {
                "type": "response.function_call_arguments.done",
                **where,
                "arguments": args,
                "name": "get_weather",
            },
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": _call("completed", args),
            },
            {"type": "response.output_item.added", "output_index": 1, "item": output_item},
            {"type": "response.output_item.done", "output_index": 1, "item": output_item},
            *_message_events(2, ["Sunny."]),
            {"type": "response.completed", "response": _response("completed", final)},
        ]
    )


def _reasoning(status: str, summary: list[str]) -> dict[str, Any]:
    parts = [{"type": "summary_text", "text": said} for said in summary]
    return {"type": "reasoning", "id": "rs_1", "summary": parts, "content": [], "status": status}


def reasoning_stream() -> list[Event]:
    """A reasoning item's summary, part by part (OpenAI's events), then the answer."""
    said = ["Think.", "Answer."]
    events: list[Event] = [
        {"type": "response.created", "response": _response("in_progress", [])},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": _reasoning("in_progress", []),
        },
    ]
    for index, text in enumerate(said):
        where = {"item_id": "rs_1", "output_index": 0, "summary_index": index}
        part = {"type": "summary_text", "text": text}
        events += [
            {
                "type": "response.reasoning_summary_part.added",
                **where,
                "part": {**part, "text": ""},
            },
            {"type": "response.reasoning_summary_text.delta", **where, "delta": text[:2]},
            {"type": "response.reasoning_summary_text.delta", **where, "delta": text[2:]},
            {"type": "response.reasoning_summary_text.done", **where, "text": text},
            {"type": "response.reasoning_summary_part.done", **where, "part": part},
        ]
    final = [_reasoning("completed", said), _message("completed", "Yes.", "msg_1")]
    events += [
        {"type": "response.output_item.done", "output_index": 0, "item": final[0]},
        *_message_events(1, ["Yes."]),
        {"type": "response.completed", "response": _response("completed", final)},
    ]
    return _numbered(events)


STREAMS = [
    pytest.param(text_stream, id="text"),
    pytest.param(function_call_stream, id="function-call"),
    pytest.param(reasoning_stream, id="reasoning-summary"),
]


def _find(events: list[Event], event_type: str, nth: int = 0) -> int:
    return [i for i, e in enumerate(events) if e["type"] == event_type][nth]


def _renumber(events: list[Event]) -> list[Event]:
    return _numbered(events)


# -- accepted streams ------------------------------------------------------------


@pytest.mark.parametrize("build", STREAMS)
def test_accepts_canonical_stream(build: Callable[[], list[Event]]) -> None:
    check_stream(build())


def test_accepts_cancelled_stream_ending_in_failed() -> None:
    events = text_stream()[:2]
    events.append({"type": "response.failed", "response": _response("cancelled", [])})
    check_stream(_renumber(events))


def test_accepts_lone_error_event_when_creation_failed() -> None:
    check_stream(
        [{"type": "error", "sequence_number": 0, "code": None, "message": "x", "param": None}]
    )


@pytest.mark.parametrize("build", STREAMS)
def test_accepts_every_prefix_as_incomplete(build: Callable[[], list[Event]]) -> None:
    events = build()
    for end in range(len(events) + 1):
        check_stream(events[:end], complete=False)


@pytest.mark.parametrize("build", STREAMS)
def test_accepts_every_resume_window(build: Callable[[], list[Event]]) -> None:
    events = build()
    for after in range(-1, len(events) - 1):
        check_stream(events[after + 1 :], starting_after=after)
    check_stream([], starting_after=len(events) - 1, complete=False)


# -- rejected streams --------------------------------------------------------------


def _shift_seq(events: list[Event], start: int, by: int) -> None:
    for event in events[start:]:
        event["sequence_number"] += by


def _gap(events: list[Event]) -> None:
    _shift_seq(events, 3, 1)


def _repeat(events: list[Event]) -> None:
    _shift_seq(events, 3, -1)


def _starts_at_one(events: list[Event]) -> None:
    _shift_seq(events, 0, 1)


def _seq_is_string(events: list[Event]) -> None:
    events[2]["sequence_number"] = "2"


def _first_not_created(events: list[Event]) -> None:
    events[0], events[1] = events[1], events[0]
    _renumber(events)


def _second_created(events: list[Event]) -> None:
    events[1]["type"] = "response.created"


def _lifecycle_id_changes(events: list[Event]) -> None:
    events[1]["response"]["id"] = "resp_2"


def _wrong_terminal_status(events: list[Event]) -> None:
    events[-1]["response"]["status"] = "failed"


def _item_added_twice(events: list[Event]) -> None:
    i = _find(events, "response.output_item.added")
    events.insert(i + 1, copy.deepcopy(events[i]))
    _renumber(events)


def _delta_before_item_added(events: list[Event]) -> None:
    i = _find(events, "response.output_item.added")
    events.insert(_find(events, "response.output_text.delta"), events.pop(i))
    _renumber(events)


def _output_index_skips(events: list[Event]) -> None:
    for event in events:
        if event.get("output_index") == 0:
            event["output_index"] = 1


def _delta_before_part_added(events: list[Event]) -> None:
    del events[_find(events, "response.content_part.added")]
    _renumber(events)


def _text_delta_on_function_call(events: list[Event]) -> None:
    i = _find(events, "response.function_call_arguments.delta")
    delta = {
        "type": "response.output_text.delta",
        "item_id": "fc_1",
        "output_index": 0,
        "content_index": 0,
        "delta": "x",
        "logprobs": [],
    }
    events.insert(i, delta)
    _renumber(events)


def _arguments_delta_on_message(events: list[Event]) -> None:
    i = _find(events, "response.output_text.delta")
    delta = {
        "type": "response.function_call_arguments.delta",
        "item_id": "msg_1",
        "output_index": 0,
        "delta": "{",
    }
    events.insert(i, delta)
    _renumber(events)


def _item_done_missing(events: list[Event]) -> None:
    del events[_find(events, "response.output_item.done")]
    _renumber(events)


def _item_done_changes(key: str, value: str) -> Callable[[list[Event]], None]:
    def mutate(events: list[Event]) -> None:
        events[_find(events, "response.output_item.done")]["item"][key] = value

    return mutate


def _text_done_differs(events: list[Event]) -> None:
    events[_find(events, "response.output_text.done")]["text"] = "Hello"


def _part_done_differs(events: list[Event]) -> None:
    events[_find(events, "response.content_part.done")]["part"]["text"] = "Hello"


def _delta_logprobs_missing(events: list[Event]) -> None:
    del events[_find(events, "response.output_text.delta")]["logprobs"]


def _done_logprobs_not_empty(events: list[Event]) -> None:
    logprob = {"token": "a", "logprob": -1.0, "bytes": [97], "top_logprobs": []}
    events[_find(events, "response.output_text.done")]["logprobs"] = [logprob]


def _annotations_missing(events: list[Event]) -> None:
    del events[_find(events, "response.content_part.added")]["part"]["annotations"]


def _delta_item_id_differs(events: list[Event]) -> None:
    events[_find(events, "response.output_text.delta")]["item_id"] = "msg_other"


def _delta_after_item_done(events: list[Event]) -> None:
    i = _find(events, "response.output_item.done")
    events.insert(i + 1, copy.deepcopy(events[_find(events, "response.output_text.delta")]))
    _renumber(events)


def _arguments_done_differs(events: list[Event]) -> None:
    events[_find(events, "response.function_call_arguments.done")]["arguments"] = "{}"


def _arguments_done_without_name(events: list[Event]) -> None:
    del events[_find(events, "response.function_call_arguments.done")]["name"]


def _no_terminal(events: list[Event]) -> None:
    del events[-1]


def _two_terminals(events: list[Event]) -> None:
    events.append(copy.deepcopy(events[-1]))
    _renumber(events)


def _event_after_terminal(events: list[Event]) -> None:
    events.append(copy.deepcopy(events[1]))
    _renumber(events)


def _completed_output_empty(events: list[Event]) -> None:
    events[-1]["response"]["output"] = []


def _completed_output_differs(events: list[Event]) -> None:
    events[-1]["response"]["output"][0]["content"][0]["text"] = "Hello"


def _usage_without_cache_write_tokens(events: list[Event]) -> None:
    del events[-1]["response"]["usage"]["input_tokens_details"]["cache_write_tokens"]


def _usage_null(events: list[Event]) -> None:
    events[-1]["response"]["usage"] = None


def _top_level_error_key(events: list[Event]) -> None:
    events[1]["error"] = {"message": "boom"}


def _error_event_mid_stream(events: list[Event]) -> None:
    events.insert(2, {"type": "error", "code": None, "message": "boom", "param": None})
    _renumber(events)


TEXT_VIOLATIONS = [
    pytest.param(_gap, "expected 3 (gap)", id="sequence-gap"),
    pytest.param(_repeat, "expected 3 (repeat", id="sequence-repeat"),
    pytest.param(_starts_at_one, "expected 0 (gap)", id="sequence-starts-at-1"),
    pytest.param(_seq_is_string, "must be an integer", id="sequence-not-int"),
    pytest.param(_first_not_created, "must be response.created", id="first-not-created"),
    pytest.param(_second_created, "only be the first event", id="created-twice"),
    pytest.param(_lifecycle_id_changes, "response.id changed", id="lifecycle-id-changes"),
    pytest.param(_wrong_terminal_status, "response.status is 'failed'", id="terminal-status"),
    pytest.param(_item_added_twice, "output_item.added repeated", id="item-added-twice"),
    pytest.param(_delta_before_item_added, "before its output_item.added", id="item-not-added"),
    pytest.param(_output_index_skips, "expected 0", id="output-index-skips"),
    pytest.param(_delta_before_part_added, "before content_part.added", id="part-not-added"),
    pytest.param(_arguments_delta_on_message, "expected function_call", id="args-on-message"),
    pytest.param(_item_done_missing, "has no output_item.done", id="item-done-missing"),
    pytest.param(_item_done_changes("id", "msg_2"), "changed id", id="item-done-changes-id"),
    pytest.param(_item_done_changes("type", "reasoning"), "changed type", id="done-changes-type"),
    pytest.param(_text_done_differs, "concatenated deltas", id="text-done-differs"),
    pytest.param(_part_done_differs, "part.text differs", id="part-done-differs"),
    pytest.param(_delta_logprobs_missing, "a list of logprobs", id="delta-logprobs-missing"),
    pytest.param(_done_logprobs_not_empty, "differ from the deltas'", id="done-logprobs-differ"),
    pytest.param(_annotations_missing, "'annotations' list", id="annotations-missing"),
    pytest.param(_delta_item_id_differs, "does not match the id", id="item-id-differs"),
    pytest.param(_delta_after_item_done, "after its output_item.done", id="delta-after-done"),
    pytest.param(_no_terminal, "no terminal event", id="no-terminal"),
    pytest.param(_two_terminals, "after the terminal", id="two-terminals"),
    pytest.param(_event_after_terminal, "after the terminal", id="event-after-terminal"),
    pytest.param(_completed_output_empty, "output has 0 items", id="completed-output-empty"),
    pytest.param(_completed_output_differs, "output[0] differs", id="completed-output-differs"),
    pytest.param(_usage_without_cache_write_tokens, "cache_write_tokens", id="usage-no-cwt"),
    pytest.param(_usage_null, "no usage object", id="usage-null"),
    pytest.param(_top_level_error_key, "top-level 'error' key", id="top-level-error-key"),
    pytest.param(_error_event_mid_stream, "only allowed alone", id="error-event-mid-stream"),
]

CALL_VIOLATIONS = [
    pytest.param(_text_delta_on_function_call, "expected a message", id="text-on-call"),
    pytest.param(_item_done_changes("call_id", "call_2"), "changed call_id", id="changes-call-id"),
    pytest.param(_arguments_done_differs, "concatenated deltas", id="args-done-differs"),
    pytest.param(_arguments_done_without_name, "no string 'name'", id="args-done-no-name"),
    pytest.param(_delta_before_item_added, "before its output_item.added", id="call-not-added"),
]


def _summary_event(events: list[Event], kind: str, nth: int = 0) -> Event:
    return events[_find(events, f"response.reasoning_summary_{kind}", nth)]


def _summary_done_differs(events: list[Event]) -> None:
    _summary_event(events, "text.done")["text"] = "Thin"


def _summary_part_done_differs(events: list[Event]) -> None:
    _summary_event(events, "part.done")["part"]["text"] = "Other."


def _summary_part_skips(events: list[Event]) -> None:
    for kind in ("part.added", "text.delta", "text.delta", "text.done", "part.done"):
        for event in events:
            if event["type"].endswith(kind) and event.get("summary_index") == 1:
                event["summary_index"] = 2


def _summary_part_before_the_last_done(events: list[Event]) -> None:
    events.insert(
        _find(events, "response.reasoning_summary_part.done"),
        events.pop(_find(events, "response.reasoning_summary_part.added", 1)),
    )
    _renumber(events)


def _summary_delta_after_done(events: list[Event]) -> None:
    delta = copy.deepcopy(_summary_event(events, "text.delta"))
    events.insert(_find(events, "response.reasoning_summary_part.done") + 1, delta)
    _renumber(events)


def _summary_on_message(events: list[Event]) -> None:
    delta = {**_summary_event(events, "text.delta"), "item_id": "msg_1", "output_index": 1}
    events.insert(_find(events, "response.output_text.delta"), delta)
    _renumber(events)


def _reasoning_done_summary_differs(events: list[Event]) -> None:
    done = events[_find(events, "response.output_item.done")]
    done["item"]["summary"][1]["text"] = "Other."


REASONING_VIOLATIONS = [
    pytest.param(_summary_done_differs, "concatenated deltas", id="summary-done-differs"),
    pytest.param(_summary_part_done_differs, "differs from its text.done", id="part-differs"),
    pytest.param(_summary_part_skips, "added, expected 1", id="summary-index-skips"),
    pytest.param(_summary_part_before_the_last_done, "before the one before", id="parts-overlap"),
    pytest.param(_summary_delta_after_done, "was done", id="summary-delta-after-done"),
    pytest.param(_summary_on_message, "expected reasoning", id="summary-on-message"),
    pytest.param(_reasoning_done_summary_differs, "summary[1] differs", id="done-differs"),
]


def _assert_rejected(events: list[Event], match: str, **kwargs: Any) -> None:
    with pytest.raises(AssertionError, match=r"event\[\d+\]|end of stream") as info:
        check_stream(events, **kwargs)
    assert match in str(info.value)


@pytest.mark.parametrize(("mutate", "match"), TEXT_VIOLATIONS)
def test_rejects_text_stream_violation(mutate: Callable[[list[Event]], None], match: str) -> None:
    events = text_stream()
    mutate(events)
    _assert_rejected(events, match)


@pytest.mark.parametrize(("mutate", "match"), CALL_VIOLATIONS)
def test_rejects_function_call_stream_violation(
    mutate: Callable[[list[Event]], None], match: str
) -> None:
    events = function_call_stream()
    mutate(events)
    _assert_rejected(events, match)


def test_message_names_index_and_sequence() -> None:
    events = text_stream()
    _gap(events)
    with pytest.raises(AssertionError, match=r"^event\[3\] \(seq=4, type='response\.content_part"):
        check_stream(events)


# -- resume windows ------------------------------------------------------------------


def test_window_must_start_after_starting_after() -> None:
    events = text_stream()
    _assert_rejected(events[5:], "expected 4 (gap)", starting_after=3)


def test_window_rejects_created_inside_window() -> None:
    events = text_stream()
    window = copy.deepcopy(events[3:])
    window[0]["type"] = "response.created"
    window[0]["response"] = _response("in_progress", [])
    _assert_rejected(window, "only be the first event", starting_after=2)


def test_window_rejects_added_index_already_in_use() -> None:
    events = function_call_stream()
    after = _find(events, "response.output_item.added", 1)
    window = events[after + 1 :]
    # The window shows index 1 (added before it), then adds the message as index 0.
    for event in window:
        if event.get("output_index") == 2:
            event["output_index"] = 0
    _assert_rejected(window, "index 1 was already in use", starting_after=after)


def test_window_still_requires_output_item_done_for_unknown_item() -> None:
    events = function_call_stream()
    after = _find(events, "response.function_call_arguments.delta") - 1
    window = events[after + 1 :]
    del window[_find(window, "response.output_item.done")]
    _renumber(window)
    _shift_seq(window, 0, after + 1)
    _assert_rejected(window, "has no output_item.done", starting_after=after)


# -- parse_sse -------------------------------------------------------------------------


def _sse(events: list[Event], newline: str = "\n", *, named: bool = True) -> str:
    blocks = []
    for event in events:
        head = f"event: {event['type']}{newline}" if named else ""
        blocks.append(f"{head}data: {json.dumps(event)}{newline}{newline}")
    return "".join(blocks)


@pytest.mark.parametrize("newline", [pytest.param("\n", id="lf"), pytest.param("\r\n", id="crlf")])
@pytest.mark.parametrize(
    "named", [pytest.param(True, id="event-lines"), pytest.param(False, id="data-only")]
)
def test_parse_sse_round_trips_canonical_stream(newline: str, named: bool) -> None:
    events = function_call_stream()
    parsed = parse_sse(_sse(events, newline, named=named))
    assert parsed == events
    check_stream(parsed)


def test_parse_sse_skips_comments_and_joins_multiline_data() -> None:
    body = ': keep-alive\n\nevent: t\n: note\ndata: {"type": "t",\ndata: "sequence_number": 0}\n\n'
    assert parse_sse(body) == [{"type": "t", "sequence_number": 0}]


def test_parse_sse_accepts_field_without_space_and_empty_body() -> None:
    assert parse_sse('data:{"type":"t"}\n\n') == [{"type": "t"}]
    assert parse_sse("") == []


def test_parse_sse_allow_partial_drops_cut_off_block() -> None:
    body = 'data: {"type": "a"}\n\ndata: {"type": "b"'
    assert parse_sse(body, allow_partial=True) == [{"type": "a"}]


@pytest.mark.parametrize(
    ("body", "match"),
    [
        pytest.param('event: b\ndata: {"type": "a"}\n\n', "payload type 'a'", id="event-mismatch"),
        pytest.param("event: a\nid: 1\n\n", "no data line", id="no-data"),
        pytest.param("data: [DONE]\n\n", "not JSON", id="done-sentinel"),
        pytest.param("data: [1, 2]\n\n", "not a JSON object", id="not-object"),
        pytest.param('data: {"type": "a"}\n', "without the blank line", id="unterminated"),
    ],
)
def test_parse_sse_rejects(body: str, match: str) -> None:
    with pytest.raises(AssertionError, match=match):
        parse_sse(body)


@pytest.mark.parametrize(("mutate", "match"), REASONING_VIOLATIONS)
def test_rejects_reasoning_summary_violation(
    mutate: Callable[[list[Event]], None], match: str
) -> None:
    events = reasoning_stream()
    mutate(events)
    _assert_rejected(events, match)
