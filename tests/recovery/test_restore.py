"""Restore (recovery/_restore.py), in process and in milliseconds: a new run's emitter,
rebuilt from a response's checkpoint and the events committed after it, goes on exactly
where the cut run stopped (G7). The end-to-end proof, a real server killed or handed over
mid-answer, is tests/crash/test_cut_answer.py; these tests pin each rule on its own.

- A message cut mid-text stays open with its text (and logprobs): the next attempt's
  repeat of that text is not sent again, the rest continues the same item, and the
  sequence numbers go on without a gap or a repeat.
- A finished item is never reopened: new text after it is a new message.
- A function call published before the cut is kept, completed, with its call id, name and
  arguments, so the tool output that follows pairs with it.
- Anything else left open is closed `incomplete`, numbered after the last committed event.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import Response

from recovery import FunctionCallDelta, TextDelta, encode_event
from recovery._emitter import Emitter
from recovery._response import new_response
from recovery._restore import restore
from store import EventRow
from tests.support.stream_rules import check_stream

Event = dict[str, Any]
WORDS = ["the ", "sea ", "is ", "wide ", "and ", "deep"]
ANSWER = "".join(WORDS)
CALL = FunctionCallDelta("call_1", "get_weather", '{"city": "Paris"}')
# As the tool phase records a server tool's answer (recovery/_tool_phase.py).
OUTPUT = {
    "type": "function_call_output",
    "id": "fco_1",
    "call_id": "call_1",
    "output": "sun",
    "status": "completed",
}


def logprob(token: str) -> dict[str, Any]:
    return {"token": token, "logprob": -0.5, "bytes": list(token.encode()), "top_logprobs": []}


class Log:
    """One response's event log as the store keeps it (each event as JSON text, committed
    as emitted), its checkpoint, and the emitter of the run writing it."""

    def __init__(self) -> None:
        params = {"model": "m", "input": "the sea?", "background": True}
        self.emitter = Emitter(new_response("resp_restore", 0.0, "queued", params), 0)
        self.rows: list[EventRow] = []
        self.emit([self.emitter.lifecycle("response.created")])
        self.emit([self.emitter.lifecycle("response.queued")])
        self.checkpoint()  # as at create
        self.emitter.set_status("in_progress")
        self.emit([self.emitter.lifecycle("response.in_progress")])

    def emit(self, events: list[Event]) -> list[Event]:
        self.rows += [encode_event(event) for event in events]
        return events

    def say(self, *words: str) -> list[Event]:
        return [e for word in words for e in self.emit(self.emitter.text_delta(TextDelta(word)))]

    def checkpoint(self) -> None:
        self.snapshot, self.last_seq = json.dumps(self.emitter.response), self.rows[-1].seq

    def cut(self) -> list[Event]:
        """The run dies here: a new run's emitter is built as TurnRunner._start builds
        it (the checkpoint, then the events committed after it restored); the closing
        events restore returns are emitted, and returned."""
        self.emitter = Emitter(json.loads(self.snapshot), self.last_seq + 1)
        committed = [row for row in self.rows if row.seq > self.last_seq]
        return self.emit(restore(self.emitter, committed))

    def finish(self) -> dict[str, Any]:
        """Close what is open, end `completed`; the whole log must be a well-formed
        stream. Returns the final response."""
        self.emit(self.emitter.close_open())
        final: dict[str, Any] = self.emit([self.emitter.finish("completed")])[0]["response"]
        check_stream([json.loads(row.data) for row in self.rows])
        return final


def output_text(final: dict[str, Any]) -> str:
    """The answer as the openai SDK reads it (what a cut must not repeat)."""
    return Response.model_validate(final).output_text


def statuses(final: dict[str, Any]) -> list[tuple[str, str]]:
    return [(item["type"], item["status"]) for item in final["output"]]


def deltas(events: list[Event]) -> list[str]:
    return [e["delta"] for e in events if e["type"] == "response.output_text.delta"]


@pytest.mark.parametrize("said", range(1, len(WORDS)), ids=lambda n: f"cut-after-{n}-words")
def test_a_message_cut_mid_text_continues_where_it_was_cut(said: int) -> None:
    log = Log()
    streamed = log.say(*WORDS[:said])
    last_seq = log.rows[-1].seq

    assert log.cut() == [], "the cut message must stay open for the next attempt"
    assert log.emitter.next_seq == last_seq + 1
    [message] = log.emitter.output
    assert message["status"] == "in_progress"

    again = log.say(*WORDS)  # the next model call says the whole answer again
    assert deltas(again) == WORDS[said:], "only what the cut run had not said is sent"
    assert {e["item_id"] for e in again} == {streamed[0]["item"]["id"]}
    final = log.finish()
    assert output_text(final) == ANSWER
    assert statuses(final) == [("message", "completed")]


def test_a_cut_message_keeps_its_logprobs() -> None:
    log = Log()
    log.emit(log.emitter.text_delta(TextDelta("the ", (logprob("the"),))))
    log.emit(log.emitter.text_delta(TextDelta("sea ", (logprob("sea"),))))
    log.cut()
    log.say("the sea ", "is calm")

    final = log.finish()
    assert output_text(final) == "the sea is calm"
    [part] = final["output"][0]["content"]
    assert [p["token"] for p in part["logprobs"]] == ["the", "sea"]


def test_a_finished_message_is_not_reopened() -> None:
    log = Log()
    log.say("the ", "sea")
    log.emit(log.emitter.close_open())  # done: committed whole before the cut
    done = log.emitter.output[0]

    assert log.cut() == []
    assert log.emitter.output == [done]
    again = log.say("the ", "sea")  # the same words again are a new message, sent in full
    assert again[0]["type"] == "response.output_item.added"
    assert again[0]["output_index"] == 1
    assert deltas(again) == ["the ", "sea"]
    final = log.finish()
    assert statuses(final) == [("message", "completed"), ("message", "completed")]
    assert output_text(final) == "the seathe sea"


def test_a_function_call_published_before_the_cut_is_kept() -> None:
    log = Log()
    log.say("let me look")
    log.emit(
        log.emitter.function_calls(
            [
                FunctionCallDelta("call_1", "get_weather", '{"city": '),
                FunctionCallDelta("call_1", "get_weather", '"Paris"}'),
            ]
        )
    )
    published = [dict(item) for item in log.emitter.output]

    assert log.cut() == [], "nothing was left open"
    assert log.emitter.output == published
    message, call = log.emitter.output
    assert (message["status"], message["content"][0]["text"]) == ("completed", "let me look")
    assert (call["status"], call["call_id"], call["name"], call["arguments"]) == (
        "completed",
        "call_1",
        "get_weather",
        '{"city": "Paris"}',
    )
    log.emit(log.emitter.add_item(dict(OUTPUT)))
    log.say("sunny")
    final = log.finish()
    assert statuses(final) == [
        ("message", "completed"),
        ("function_call", "completed"),
        ("function_call_output", "completed"),
        ("message", "completed"),
    ]
    assert output_text(final) == "let me looksunny"


def test_a_message_cut_after_a_checkpoint_resumes_after_the_items_before_it() -> None:
    """The next step's message is rebuilt from a checkpoint that already holds the first
    step's items (the snapshot), and only the events committed after it."""
    log = Log()
    log.emit(log.emitter.function_calls([CALL]))
    log.emit(log.emitter.add_item(dict(OUTPUT)))
    log.checkpoint()
    log.say("it ", "is ")
    before = log.emitter.output[:2]

    assert log.cut() == []
    assert log.emitter.output[:2] == before
    assert deltas(log.say("it ", "is ", "sunny")) == ["sunny"]
    final = log.finish()
    assert output_text(final) == "it is sunny"
    assert len(final["output"]) == 3


@pytest.mark.parametrize(
    ("start", "closed"),
    [
        pytest.param(
            lambda e: e._open_message()[:1],  # the item, not yet its content part
            {"type": "message", "content": []},
            id="message-with-no-part",
        ),
        pytest.param(
            lambda e: e.function_call_delta(FunctionCallDelta("call_1", "f", '{"ci')),
            {"type": "function_call", "arguments": '{"ci'},
            id="function-call-mid-arguments",
        ),
    ],
)
def test_an_item_left_open_otherwise_is_closed_incomplete(
    start: Any, closed: dict[str, Any]
) -> None:
    log = Log()
    log.emit(start(log.emitter))
    last_seq = log.rows[-1].seq

    closing = log.cut()
    assert [e["sequence_number"] for e in closing] == list(
        range(last_seq + 1, last_seq + 1 + len(closing))
    )
    assert closing[-1]["type"] == "response.output_item.done"
    item = closing[-1]["item"]
    assert item["status"] == "incomplete"
    assert {key: item[key] for key in closed} == closed
    assert log.emitter.output == [item]
    again = log.say("hello")
    assert again[0]["output_index"] == 1, "new text is a new item"
    final = log.finish()
    assert output_text(final) == "hello"
