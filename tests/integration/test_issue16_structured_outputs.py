"""Issue 16, item 1: structured outputs and refusals on the Chat Completions upstream.

`client.responses.parse(text_format=Model)` must give `output_parsed` through an
upstream, streamed or not, also when server tools run between the request and the
answer; `json_object` too. A model that declines (Chat Completions `refusal` deltas)
used to reach the client as ordinary text, which `parse` then failed to read as JSON:
now it is a `refusal` content part, streamed with `response.refusal.delta` / `.done`,
and goes back to the upstream in the assistant message's `refusal` field.

The fake upstream is as strict as OpenAI's: it refuses a non-strict schema, and answers
only JSON valid for the requested schema (scripted here).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

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
from tests.support.fake_upstream import FakeUpstream, refusal, text, tool_calls
from tests.support.schemas import validate_item
from tests.support.stream_rules import check_stream

PARIS = ("call_paris", "lookup", '{"city":"Paris"}')
WEATHER_JSON = '{"city": "Paris", "sunny": true}'
NO = "I can't help with that."


class Weather(BaseModel):
    city: str
    sunny: bool


@pytest.fixture
def rig(start_server: StartServer, fake_upstream: FakeUpstream, tmp_path: Path) -> Iterator[Rig]:
    with rig_on(start_server, fake_upstream, tmp_path / "effects", tools=True) as rig:
        yield rig


def _sent_format(rig: Rig, index: int = 0) -> dict[str, object]:
    sent: dict[str, object] = rig.fake.requests[index]["response_format"]
    return sent


def test_parse_gives_output_parsed_through_the_upstream(rig: Rig) -> None:
    rig.fake.push(text(WEATHER_JSON))

    parsed = rig.client.responses.parse(model=MODEL, input="Weather in Paris?", text_format=Weather)

    _checked_items(parsed)
    assert parsed.output_parsed == Weather(city="Paris", sunny=True)
    sent = _sent_format(rig)
    assert sent["type"] == "json_schema"
    assert sent["json_schema"]["name"] == "Weather"  # type: ignore[index]
    assert sent["json_schema"]["strict"] is True  # type: ignore[index]
    assert rig.fake.refusals == []


def test_a_streamed_parse_gives_output_parsed(rig: Rig) -> None:
    rig.fake.push(text(WEATHER_JSON))

    with rig.client.responses.stream(
        model=MODEL, input="Weather in Paris?", text_format=Weather
    ) as stream:
        events = sdk_events(stream)
        final = stream.get_final_response()

    check_stream([_unparsed(e) for e in events])  # (schemas: the raw stream tests)
    assert final.output_parsed == Weather(city="Paris", sunny=True)
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert json.loads(deltas) == {"city": "Paris", "sunny": True}


def test_parse_after_a_server_tool_gives_output_parsed(rig: Rig) -> None:
    rig.fake.push(tool_calls(PARIS), text(WEATHER_JSON))

    parsed = rig.client.responses.parse(model=MODEL, input="Weather in Paris?", text_format=Weather)

    _checked_items(parsed)
    assert [item.type for item in parsed.output] == [
        "function_call",
        "function_call_output",
        "message",
    ]
    assert json.loads(parsed.output[1].output) == {"city": "Paris", "forecast": "sunny"}  # type: ignore[union-attr]
    assert parsed.output_parsed == Weather(city="Paris", sunny=True)
    # Both steps asked for the schema: the answer after the tool is structured too.
    assert _sent_format(rig, 0) == _sent_format(rig, 1)


def test_a_streamed_parse_after_a_server_tool_gives_output_parsed(rig: Rig) -> None:
    rig.fake.push(tool_calls(PARIS), text(WEATHER_JSON))

    with rig.client.responses.stream(
        model=MODEL, input="Weather in Paris?", text_format=Weather
    ) as stream:
        events = sdk_events(stream)
        final = stream.get_final_response()

    check_stream([_unparsed(e) for e in events])  # (schemas: the raw stream tests)
    assert final.output_parsed == Weather(city="Paris", sunny=True)


def test_json_object_answers_reach_the_client(rig: Rig) -> None:
    rig.fake.push(text('{"answer": 42}'))

    response = rig.client.responses.create(
        model=MODEL, input="Answer in JSON.", text={"format": {"type": "json_object"}}
    )

    checked_response(response)
    assert json.loads(response.output_text) == {"answer": 42}
    assert _sent_format(rig) == {"type": "json_object"}


def test_a_refusal_is_a_refusal_part_and_parse_gives_none(rig: Rig) -> None:
    rig.fake.push(refusal(NO))

    parsed = rig.client.responses.parse(model=MODEL, input="Something bad", text_format=Weather)

    _checked_items(parsed)
    assert parsed.status == "completed"
    [message] = dump(parsed)["output"]
    assert message["content"] == [{"type": "refusal", "refusal": NO}]
    assert parsed.output_parsed is None
    assert parsed.output_text == ""


def test_a_refusal_streams_with_refusal_events_and_replays_the_same(rig: Rig) -> None:
    rig.fake.push(refusal(NO))

    events = post_stream(rig.http, model=MODEL, input="Something bad", background=True)

    assert "response.output_text.delta" not in types(events)
    [added] = [e for e in events if e["type"] == "response.content_part.added"]
    assert added["part"] == {"type": "refusal", "refusal": ""}
    deltas = [e["delta"] for e in events if e["type"] == "response.refusal.delta"]
    assert "".join(deltas) == NO and len(deltas) > 1
    [done] = [e for e in events if e["type"] == "response.refusal.done"]
    assert done["refusal"] == NO
    [part_done] = [e for e in events if e["type"] == "response.content_part.done"]
    assert part_done["part"] == {"type": "refusal", "refusal": NO}
    final = events[-1]["response"]
    assert final["output"][0]["content"] == [{"type": "refusal", "refusal": NO}]

    assert get_stream(rig.http, final["id"]) == events


def test_an_sdk_stream_of_a_refusal_is_well_formed(rig: Rig) -> None:
    rig.fake.push(refusal(NO))

    with rig.client.responses.stream(
        model=MODEL, input="Something bad", text_format=Weather
    ) as stream:
        events = sdk_events(stream)
        final = stream.get_final_response()

    check_stream([_unparsed(e) for e in events])  # (schemas: the raw stream tests)
    assert [e["refusal"] for e in events if e["type"] == "response.refusal.done"] == [NO]
    assert final.output_parsed is None


def test_a_refusal_goes_back_to_the_upstream_as_the_assistant_refusal(rig: Rig) -> None:
    rig.fake.push(refusal(NO), text("Fine."))

    first = rig.client.responses.create(model=MODEL, input="Something bad")
    rig.client.responses.create(model=MODEL, input="Something else", previous_response_id=first.id)

    assert rig.messages(1)[-2] == {"role": "assistant", "content": None, "refusal": NO}
    assert rig.fake.refusals == []


def test_a_non_strict_schema_is_refused_by_the_upstream_and_the_response_fails(rig: Rig) -> None:
    """The fake upstream is as strict as OpenAI about strict schemas (no silent pass)."""
    loose = {"type": "object", "properties": {"city": {"type": "string"}}}
    response = rig.client.responses.create(
        model=MODEL,
        input="Weather?",
        text={"format": {"type": "json_schema", "name": "w", "schema": loose, "strict": True}},
    )

    assert response.status == "failed"
    assert response.error is not None
    assert "additionalProperties" in response.error.message
    assert len(rig.fake.refusals) == 1


def _unparsed(event: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = unparsed(event)
    return result


def _checked_items(parsed: Any) -> None:
    """Validate a parsed Response's items (the SDK renames the echoed `text.format`
    `schema`, so the Response itself is validated raw elsewhere)."""
    for item in unparsed(dump(parsed))["output"]:
        validate_item(item)
