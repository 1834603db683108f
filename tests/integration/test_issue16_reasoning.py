"""Issue 16, item 2: reasoning on the Chat Completions upstream.

Reasoning models behind vLLM, DeepSeek, llama.cpp (`delta.reasoning_content`) or
Ollama (`delta.reasoning`) streamed their thoughts, and the server dropped them. Now
they are a `reasoning` item before the message, streamed as OpenAI streams one
(`output_item.added`, `content_part.added` of a `reasoning_text` part,
`response.reasoning_text.delta` / `.done`), kept in the log so a replay matches the live
stream, and never sent back to the upstream (Chat Completions has no field for them).
`reasoning.effort` reaches the upstream as `reasoning_effort`, and the upstream's
reasoning token count reaches `usage.output_tokens_details.reasoning_tokens`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.integration._issue16_support import MODEL, Rig, rig_on
from tests.integration._responses_support import (
    checked_response,
    dump,
    get_stream,
    post_stream,
    sdk_events,
    types,
    unparsed,
)
from tests.support.fake_upstream import FakeUpstream, reset_mid, text, tool_calls
from tests.support.side_effects import runs_per_key
from tests.support.stream_rules import check_stream

THOUGHT = "The user asks about France, whose capital is Paris."
PARIS = ("call_paris", "lookup", '{"city":"Paris"}')

Event = dict[str, Any]


@pytest.fixture
def rig(start_server: StartServer, fake_upstream: FakeUpstream, tmp_path: Path) -> Iterator[Rig]:
    with rig_on(start_server, fake_upstream, tmp_path / "effects", tools=True) as rig:
        yield rig


def _reasoning_events(events: list[Event]) -> list[str]:
    return [e["type"] for e in events if e.get("output_index") == 0]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_streams_as_a_reasoning_item_before_the_message(rig: Rig, field: str) -> None:
    rig.fake.push(text("Paris.", reasoning=THOUGHT, reasoning_field=field, reasoning_tokens=9))

    events = post_stream(
        rig.http,
        model=MODEL,
        input="Capital of France?",
        reasoning={"effort": "high"},
        background=True,
    )

    assert _reasoning_events(events) == [
        "response.output_item.added",
        "response.content_part.added",
        *["response.reasoning_text.delta"] * len(THOUGHT.split(" ")),
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert added["item"]["type"] == "reasoning"
    deltas = [e["delta"] for e in events if e["type"] == "response.reasoning_text.delta"]
    assert "".join(deltas) == THOUGHT
    [done] = [e for e in events if e["type"] == "response.reasoning_text.done"]
    assert done["text"] == THOUGHT
    final = events[-1]["response"]
    reasoning, message = final["output"]
    assert reasoning == {
        "type": "reasoning",
        "id": added["item"]["id"],
        "summary": [],
        "content": [{"type": "reasoning_text", "text": THOUGHT}],
        "status": "completed",
    }
    assert message["content"][0]["text"] == "Paris."
    assert final["usage"]["output_tokens_details"] == {"reasoning_tokens": 9}
    assert rig.fake.requests[0]["reasoning_effort"] == "high"

    # The log keeps it: a replay is the live stream, event for event.
    assert get_stream(rig.http, final["id"]) == events
    assert dump(rig.client.responses.retrieve(final["id"]))["output"] == final["output"]


def test_the_sdk_reads_a_reasoning_response_streamed_and_not(rig: Rig) -> None:
    rig.fake.push(text("Paris.", reasoning=THOUGHT), text("Paris.", reasoning=THOUGHT))

    response = checked_response(rig.client.responses.create(model=MODEL, input="Capital?"))
    with rig.client.responses.stream(model=MODEL, input="Capital?") as stream:
        events = sdk_events(stream)
        final = stream.get_final_response()

    check_stream(unparsed(events))
    for each in (response, final):
        assert [item.type for item in each.output] == ["reasoning", "message"]
        assert each.output[0].content[0].text == THOUGHT  # type: ignore[union-attr,index]
        assert each.output_text == "Paris."


def test_reasoning_around_a_server_tool_keeps_its_order_and_is_not_sent_back(rig: Rig) -> None:
    rig.fake.push(
        tool_calls(PARIS, reasoning="I need the weather."),
        text("Sunny in Paris.", reasoning="The tool says sunny."),
        text("You are welcome."),
    )

    events = post_stream(rig.http, model=MODEL, input="Weather in Paris?", background=True)

    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == [
        "reasoning",
        "function_call",
        "function_call_output",
        "reasoning",
        "message",
    ]
    assert [i["content"][0]["text"] for i in final["output"] if i["type"] == "reasoning"] == [
        "I need the weather.",
        "The tool says sunny.",
    ]
    assert sorted(runs_per_key(rig.effects, "lookup").values()) == [1]
    assert get_stream(rig.http, final["id"]) == events

    # Chained: the reasoning items of the history are not sent to the upstream.
    rig.client.responses.create(model=MODEL, input="Thanks!", previous_response_id=final["id"])
    for index in (1, 2):
        sent = json.dumps(rig.messages(index))
        assert "I need the weather" not in sent and "The tool says sunny" not in sent
    assert rig.fake.refusals == []


def test_a_reasoning_item_in_the_input_is_accepted_and_not_sent(rig: Rig) -> None:
    rig.fake.push(text("Fine."))
    reasoning = {
        "type": "reasoning",
        "id": "rs_client1",
        "summary": [{"type": "summary_text", "text": "earlier thoughts"}],
    }

    response = rig.client.responses.create(
        model=MODEL,
        input=[{"role": "user", "content": "Hi"}, reasoning, {"role": "user", "content": "Again"}],  # type: ignore[list-item]
    )

    assert response.status == "completed"
    assert rig.messages(0) == [
        {"role": "user", "content": "Hi"},
        {"role": "user", "content": "Again"},
    ]


def test_a_summary_request_gets_the_reasoning_text_and_no_summary(rig: Rig) -> None:
    """A Chat Completions upstream gives raw reasoning, never a summary: the item's
    `summary` stays empty (as OpenAI's is when it has none) and nothing is made up."""
    rig.fake.push(text("Paris.", reasoning=THOUGHT))

    events = post_stream(
        rig.http, model=MODEL, input="Capital?", reasoning={"effort": "low", "summary": "auto"}
    )

    assert not [t for t in types(events) if "summary" in t]
    reasoning = events[-1]["response"]["output"][0]
    assert reasoning["summary"] == []
    assert reasoning["content"] == [{"type": "reasoning_text", "text": THOUGHT}]
    assert events[-1]["response"]["reasoning"] == {"effort": "low", "summary": "auto"}


def test_reasoning_cut_by_a_failed_call_is_closed_and_the_retry_reasons_again(rig: Rig) -> None:
    """The stream dies while the model reasons: the cut reasoning item is closed
    `incomplete`, the retried call's reasoning is a new item, the answer follows it."""
    rig.fake.push(reset_mid("", reasoning="half a thought"), text("Paris.", reasoning=THOUGHT))

    events = post_stream(rig.http, model=MODEL, input="Capital?", background=True)

    final = events[-1]["response"]
    assert final["status"] == "completed"
    cut, reasoning, message = final["output"]
    assert (cut["type"], cut["status"]) == ("reasoning", "incomplete")
    assert cut["content"] == [{"type": "reasoning_text", "text": "half a thought"}]
    assert (reasoning["type"], reasoning["status"]) == ("reasoning", "completed")
    assert reasoning["content"][0]["text"] == THOUGHT
    assert message["content"][0]["text"] == "Paris."
    assert get_stream(rig.http, final["id"]) == events
    # The next turn's history holds neither: reasoning is never sent back.
    rig.client.responses.create(model=MODEL, input="Sure?", previous_response_id=final["id"])
    assert "thought" not in json.dumps(rig.messages(2))
