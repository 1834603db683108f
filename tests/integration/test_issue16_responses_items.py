"""Issue 16: a Responses upstream's items pass through at full fidelity.

OpenAI's reasoning models give more than one message and one reasoning text a step, and
the server used to flatten it: summaries were joined into the reasoning item's text,
`encrypted_content` was dropped (so, with the upstream stateless, no step or turn could
continue from the reasoning before it), and several messages of a step were joined into
one. Now each item is kept as the upstream gave it, in the stream, the log, replays and
stored output: summary parts are the item's `summary` (tests/integration/
test_issue16_responses_upstream.py), encrypted reasoning (asked for with `include`) keeps
the upstream's id and goes back upstream on the turn's next step and on later turns, and
each message keeps its `phase`. A step tried again never sends what its cut attempt said,
and a cut reasoning item never carries encrypted content.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.integration._issue16_support import ResponsesRig, ServeResponses, responses_servers
from tests.integration._responses_support import checked_response, dump, get_stream, post_stream
from tests.support.fake_responses_upstream import (
    FakeResponsesUpstream,
    Turn,
    reset_mid,
    text,
    tool_calls,
)

MODEL = "fake-model"
PARIS = ("call_paris", "lookup", '{"city":"Paris"}')
SEALED = ["reasoning.encrypted_content"]
THINK = ("The user asks about Paris.",)

Item = dict[str, Any]


@pytest.fixture
def serve(
    start_server: StartServer, responses_upstream: FakeResponsesUpstream, tmp_path: Path
) -> Iterator[ServeResponses]:
    with responses_servers(start_server, responses_upstream, tmp_path / "effects") as serve:
        yield serve


def _reasoning(items: list[Item]) -> list[Item]:
    return [item for item in items if item["type"] == "reasoning"]


def _issued(rig: ResponsesRig, item: Item) -> bool:
    """Whether `item` carries the encrypted content the upstream gave for its id."""
    return rig.fake.issued.get(item.get("encrypted_content") or "") == item["id"]


# -- encrypted reasoning ----------------------------------------------------------------


def test_encrypted_reasoning_is_kept_returned_and_sent_back_on_later_turns(
    serve: ServeResponses,
) -> None:
    rig = serve(tools=False)
    rig.fake.push(text("Paris.", summary=THINK), text("Rome."))

    events = post_stream(
        rig.http,
        model=MODEL,
        input="Capital of France?",
        reasoning={"summary": "auto"},
        include=SEALED,
        background=True,
    )

    first = events[-1]["response"]
    [kept] = _reasoning(first["output"])
    assert _issued(rig, kept)
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done[0] == kept  # streamed with it
    added = next(e["item"] for e in events if e["type"] == "response.output_item.added")
    assert "encrypted_content" not in added  # the upstream's partial one is never taken
    assert get_stream(rig.http, first["id"]) == events  # logged, replayed alike
    assert dump(rig.client.responses.retrieve(first["id"]))["output"][0] == kept

    # A later turn sends it back, after its user message and before its answer.
    rig.client.responses.create(model=MODEL, input="And Italy?", previous_response_id=first["id"])
    sent = rig.sent(1)
    assert [i.get("role", i["type"]) for i in sent] == ["user", "reasoning", "assistant", "user"]
    assert {k: sent[1][k] for k in ("id", "encrypted_content", "summary")} == {
        k: kept[k] for k in ("id", "encrypted_content", "summary")
    }

    # So does a conversation's.
    conversation = rig.client.conversations.create()
    rig.fake.push(text("Berlin.", summary=THINK))
    rig.client.responses.create(
        model=MODEL,
        input="Capital of Germany?",
        conversation=conversation.id,
        reasoning={"summary": "auto"},
        include=SEALED,
    )
    rig.client.responses.create(model=MODEL, input="Sure?", conversation=conversation.id)
    [again] = _reasoning(rig.sent(3))
    assert _issued(rig, again)
    assert rig.fake.refusals == []


def test_without_the_include_reasoning_carries_no_encrypted_content(
    serve: ServeResponses,
) -> None:
    rig = serve()
    rig.fake.push(tool_calls(PARIS, summary=THINK), text("Sunny."))

    response = checked_response(
        rig.client.responses.create(model=MODEL, input="Paris?", reasoning={"summary": "auto"})
    )

    [reasoning] = _reasoning(dump(response)["output"])
    assert "encrypted_content" not in reasoning
    assert "include" not in rig.fake.requests[0]
    assert _reasoning(rig.sent(1)) == []  # nothing to send: the next step reasons afresh
    assert rig.fake.refusals == []


@pytest.mark.parametrize(
    "cut",
    [
        pytest.param(reset_mid("Sunny in Paris.", summary=THINK), id="in-the-answer"),
        pytest.param(reset_mid("", summary=THINK), id="before-the-answer"),
    ],
)
def test_a_retried_step_never_sends_what_its_cut_attempt_reasoned(
    serve: ServeResponses, cut: Turn
) -> None:
    """The cut attempt's reasoning was done, but what it led to was cut: the retry is sent
    the step as it began, and a later turn only the reasoning that an item of the answer
    follows. Reasoning that led to a cut answer keeps its encrypted content; reasoning
    cut before its answer began led to nothing, and is closed `incomplete` without it."""
    rig = serve(tools=False)
    rig.fake.push(cut, text("Sunny in Paris.", summary=THINK), text("Yes."))

    events = post_stream(
        rig.http,
        model=MODEL,
        input="Weather in Paris?",
        reasoning={"summary": "auto"},
        include=SEALED,
        background=True,
    )

    final = events[-1]["response"]
    assert final["status"] == "completed", final["error"]
    assert rig.fake.requests[1] == rig.fake.requests[0], "the retry resends the same step"
    assert final["output"][-1]["content"][0]["text"] == "Sunny in Paris."
    for item in _reasoning(final["output"]):
        if item["status"] == "completed":
            assert _issued(rig, item), item
        else:
            assert "encrypted_content" not in item, item
    assert get_stream(rig.http, final["id"]) == events

    rig.client.responses.create(model=MODEL, input="Sure?", previous_response_id=final["id"])
    sent = rig.sent(2)
    assert [i.get("role", i["type"]) for i in sent] == ["user", "reasoning", "assistant", "user"]
    assert rig.fake.refusals == []


def test_reasoning_a_cut_left_without_its_answer_is_shown_once(serve: ServeResponses) -> None:
    """The upstream finished a reasoning item, then the stream was cut before the answer
    began. The retry is not sent that reasoning (it led to nothing) and reasons again, so
    the cut item is closed `incomplete`, its summary kept, as cut reasoning is: one
    finished reasoning, then the answer, live, replayed and stored (G7)."""
    rig = serve(tools=False)
    rig.fake.push(reset_mid("", summary=THINK), text("Sunny in Paris.", summary=THINK))

    events = post_stream(
        rig.http,
        model=MODEL,
        input="Weather in Paris?",
        reasoning={"summary": "auto"},
        background=True,
    )

    final = events[-1]["response"]
    assert final["status"] == "completed", final["error"]
    summary = [{"type": "summary_text", "text": THINK[0]}]
    assert [(i["type"], i["status"], i.get("summary")) for i in final["output"]] == [
        ("reasoning", "incomplete", summary),
        ("reasoning", "completed", summary),
        ("message", "completed", None),
    ]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done == final["output"]
    assert get_stream(rig.http, final["id"]) == events
    assert dump(rig.client.responses.retrieve(final["id"]))["output"] == final["output"]
    assert rig.fake.refusals == []


# -- several messages in one step ---------------------------------------------------------


def test_several_messages_of_a_step_stay_apart_with_their_phase(serve: ServeResponses) -> None:
    rig = serve()
    rig.fake.push(
        tool_calls(PARIS, commentary=("Let me look it up.",)),
        text("Sunny in Paris.", commentary=("The tool says sunny.",)),
        text("Yes."),
    )

    events = post_stream(rig.http, model=MODEL, input="Weather in Paris?", background=True)

    final = events[-1]["response"]
    assert [(i["type"], i.get("phase")) for i in final["output"]] == [
        ("message", "commentary"),
        ("function_call", None),
        ("function_call_output", None),
        ("message", "commentary"),
        ("message", "final_answer"),
    ]
    said = [i["content"][0]["text"] for i in final["output"] if i["type"] == "message"]
    assert said == ["Let me look it up.", "The tool says sunny.", "Sunny in Paris."]
    added = [e["item"] for e in events if e["type"] == "response.output_item.added"]
    assert [i.get("phase") for i in added if i["type"] == "message"] == [
        "commentary",
        "commentary",
        "final_answer",
    ]
    assert get_stream(rig.http, final["id"]) == events
    assert dump(rig.client.responses.retrieve(final["id"]))["output"] == final["output"]

    # The next step, and a later turn, are sent each message with its phase.
    step = rig.sent(1)[1]
    assert (step["role"], step["phase"]) == ("assistant", "commentary")
    rig.client.responses.create(model=MODEL, input="Sure?", previous_response_id=final["id"])
    messages = [i for i in rig.sent(2) if i.get("role") == "assistant"]
    assert [(m["content"][0]["text"], m["phase"]) for m in messages] == [
        ("Let me look it up.", "commentary"),
        ("The tool says sunny.", "commentary"),
        ("Sunny in Paris.", "final_answer"),
    ]
    assert rig.fake.refusals == []
