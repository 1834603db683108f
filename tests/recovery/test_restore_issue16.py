"""Restore of the issue 16 parts (recovery/_restore.py), in process: reasoning and
refusals cut by a crash.

- Reasoning cut mid-thought is closed `incomplete` with what was streamed of it (its
  `reasoning_text.done` and `content_part.done` first), and the next attempt's reasoning
  is a new item.
- A refusal cut mid-sentence stays open as a refusal: the next attempt's repeat is not
  sent again and the rest continues the same `refusal` part.
"""

from __future__ import annotations

import json

from recovery import ReasoningDelta, RefusalDelta, TextDelta
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
