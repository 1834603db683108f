"""Restore of the issue 16 parts (recovery/_restore.py), in process: reasoning and
refusals cut by a crash.

- Reasoning cut mid-thought is closed `incomplete` with what was streamed of it (its
  `reasoning_text.done` and `content_part.done` first), and the next attempt's reasoning
  is a new item.
- A refusal cut mid-sentence stays open as a refusal: the next attempt's repeat is not
  sent again and the rest continues the same `refusal` part.
- A reasoning summary cut mid-part is closed `incomplete` with its parts (each closed),
  and never carries encrypted content; a reasoning item done before the cut keeps its
  own.
- The messages of one step stay apart, each with its phase; the one the crash cut
  resumes, with its phase.
"""

from __future__ import annotations

import json

from recovery import ReasoningDelta, RefusalDelta, TextDelta
from recovery._emitter import Event
from tests.recovery.test_restore import Log, statuses


def test_reasoning_cut_by_a_crash_is_closed_incomplete_and_the_retry_reasons_anew() -> None:
    log = Log()
    log.emit(log.emitter.reasoning_delta(ReasoningDelta("half ")))
    log.emit(log.emitter.reasoning_delta(ReasoningDelta("a thought")))

    closing = log.cut()

    assert [e["type"] for e in closing] == [
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert closing[0]["text"] == "half a thought"
    assert closing[-1]["item"]["status"] == "incomplete"
    log.emit(log.emitter.reasoning_delta(ReasoningDelta("a whole thought")))
    log.say("yes")
    final = log.finish()
    assert statuses(final) == [
        ("reasoning", "incomplete"),
        ("reasoning", "completed"),
        ("message", "completed"),
    ]
    assert final["output"][1]["content"] == [{"type": "reasoning_text", "text": "a whole thought"}]


def test_a_refusal_cut_by_a_crash_continues_the_same_refusal_part() -> None:
    log = Log()
    first = log.emit(log.emitter.refusal_delta(RefusalDelta("I can't ")))

    assert log.cut() == []
    again = log.emit(log.emitter.refusal_delta(RefusalDelta("I can't help.")))

    assert [(e["type"], e["delta"]) for e in again] == [("response.refusal.delta", "help.")]
    assert again[0]["item_id"] == first[0]["item"]["id"]
    final = log.finish()
    assert final["output"][0]["content"] == [{"type": "refusal", "refusal": "I can't help."}]
    assert json.loads(log.rows[-2].data)["item"]["status"] == "completed"


def test_a_retry_that_answers_instead_of_refusing_drops_the_cut_refusal() -> None:
    log = Log()
    log.emit(log.emitter.refusal_delta(RefusalDelta("I can't ")))
    log.cut()

    log.emit(log.emitter.text_delta(TextDelta("Sure: yes.")))

    final = log.finish()
    assert statuses(final) == [("message", "incomplete"), ("message", "completed")]
    assert final["output"][0]["content"] == []
    assert final["output"][1]["content"][0]["text"] == "Sure: yes."


def _types(events: list[Event]) -> list[str]:
    return [e["type"] for e in events]


def test_a_summary_cut_by_a_crash_is_closed_incomplete_without_encrypted_content() -> None:
    log = Log()
    emitter = log.emitter
    log.emit(emitter.reasoning_start("rs_upstream"))
    log.emit(emitter.reasoning_delta(ReasoningDelta("First.", 0)))
    log.emit(emitter.reasoning_delta(ReasoningDelta("Sec", 7)))  # a new part: a new index

    closing = log.cut()

    assert _types(closing) == [
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
    ]
    assert closing[0]["summary_index"] == 1
    cut = closing[-1]["item"]
    assert (cut["id"], cut["status"]) == ("rs_upstream", "incomplete")
    assert cut["summary"] == [
        {"type": "summary_text", "text": "First."},
        {"type": "summary_text", "text": "Sec"},
    ]
    assert "encrypted_content" not in cut
    # The next attempt's reasoning is a new item; an id already used gets a fresh one.
    log.emit(log.emitter.reasoning_start("rs_upstream"))
    log.emit(log.emitter.reasoning_delta(ReasoningDelta("Again.", 0)))
    log.emit(log.emitter.reasoning_done("gAAAA"))
    log.say("yes")
    final = log.finish()
    assert statuses(final) == [
        ("reasoning", "incomplete"),
        ("reasoning", "completed"),
        ("message", "completed"),
    ]
    again = final["output"][1]
    assert again["id"] != "rs_upstream"
    assert (again["encrypted_content"], again["content"]) == ("gAAAA", [])


def test_reasoning_done_before_a_crash_keeps_its_encrypted_content() -> None:
    log = Log()
    log.emit(log.emitter.reasoning_start("rs_upstream"))
    log.emit(log.emitter.reasoning_delta(ReasoningDelta("Think.", 0)))
    log.emit(log.emitter.reasoning_done("gAAAA"))
    log.say("the ")

    assert log.cut() == []  # the message resumes; the reasoning was done
    # The new attempt's reasoning is not streamed while it repeats the cut answer.
    assert log.emitter.reasoning_start("rs_other") == []
    assert log.emitter.reasoning_done("gBBBB") == []
    log.say("the sea")
    final = log.finish()

    reasoning, message = final["output"]
    assert (reasoning["id"], reasoning["encrypted_content"]) == ("rs_upstream", "gAAAA")
    assert message["content"][0]["text"] == "the sea"


def test_the_messages_of_a_step_stay_apart_and_the_cut_one_resumes_with_its_phase() -> None:
    log = Log()
    log.emit(log.emitter.message_start("commentary"))
    log.say("Looking.")
    log.emit(log.emitter.message_start("final_answer"))
    log.say("Found ", "it")

    assert log.cut() == []
    log.emit(log.emitter.message_start("final_answer"))
    log.say("Found it here.")
    final = log.finish()

    assert [(i["phase"], i["status"]) for i in final["output"]] == [
        ("commentary", "completed"),
        ("final_answer", "completed"),
    ]
    assert [i["content"][0]["text"] for i in final["output"]] == ["Looking.", "Found it here."]
