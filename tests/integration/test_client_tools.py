"""Client function tools: the model's call ends the turn, the client answers it in its
next request (by previous_response_id or in a conversation), and input that breaks the
pairing of calls and outputs is refused (docs/guarantees.md G5)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseFunctionToolCall

from tests.integration._responses_support import (
    MODEL,
    checked_events,
    checked_response,
    dump,
    get_stream,
    post_stream,
    types,
    unparsed,
)
from tests.support.client_tools import WEATHER
from tests.support.schemas import validate_error_envelope
from tests.support.waiting import wait_terminal

CLIENTS = [
    pytest.param("client", id="client"),
    pytest.param("strict_client", id="strict_client"),
]

TIME: Any = {
    "type": "function",
    "name": "get_time",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}},
    "strict": False,
}
CALL_WEATHER = '[[call get_weather {"city":"Paris"}]]'


@pytest.fixture(params=CLIENTS)
def sdk(request: pytest.FixtureRequest) -> openai.OpenAI:
    sdk: openai.OpenAI = request.getfixturevalue(request.param)
    return sdk


def _single_call(response: Response) -> ResponseFunctionToolCall:
    assert response.status == "completed"
    [call] = response.output
    assert isinstance(call, ResponseFunctionToolCall)
    return call


def _output(call_id: str, output: str) -> Any:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def test_a_tool_call_ends_the_turn_completed(sdk: openai.OpenAI) -> None:
    response = checked_response(
        sdk.responses.create(model=MODEL, input=CALL_WEATHER, tools=[WEATHER])
    )

    call = _single_call(response)
    assert call.type == "function_call"
    assert call.name == "get_weather"
    assert call.call_id.startswith("call_")
    assert call.id is not None and call.id.startswith("fc_")
    assert call.status == "completed"
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert response.output_text == ""
    assert [tool.name for tool in response.tools] == ["get_weather"]  # type: ignore[union-attr]


def test_the_tool_output_continues_the_turn(sdk: openai.OpenAI) -> None:
    first = sdk.responses.create(model=MODEL, input=CALL_WEATHER, tools=[WEATHER])
    call = _single_call(first)

    second = checked_response(
        sdk.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            input=[_output(call.call_id, "sunny 21C")],
            tools=[WEATHER],
        )
    )

    assert second.status == "completed"
    assert second.output_text == "get_weather -> sunny 21C"
    assert second.previous_response_id == first.id
    [item] = sdk.responses.input_items.list(second.id).data
    assert item.type == "function_call_output"
    assert item.call_id == call.call_id


def test_parallel_calls_are_answered_together(sdk: openai.OpenAI) -> None:
    first = sdk.responses.create(
        model=MODEL,
        input=CALL_WEATHER + ' [[call get_time {"zone":"CET"}]]',
        tools=[WEATHER, TIME],
    )
    calls = [item for item in checked_response(first).output if item.type == "function_call"]
    assert [c.name for c in calls] == ["get_weather", "get_time"]
    assert len({c.call_id for c in calls}) == 2

    second = sdk.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[_output(calls[0].call_id, "rain"), _output(calls[1].call_id, "noon")],
        tools=[WEATHER, TIME],
    )

    assert second.output_text == "get_weather -> rain; get_time -> noon"


def test_an_undeclared_tool_is_not_called(sdk: openai.OpenAI) -> None:
    response = sdk.responses.create(model=MODEL, input=CALL_WEATHER + " [[words 2]]")

    assert [item.type for item in response.output] == ["message"]


def test_an_output_for_an_unknown_call_is_refused(sdk: openai.OpenAI) -> None:
    first = sdk.responses.create(model=MODEL, input=CALL_WEATHER, tools=[WEATHER])
    _single_call(first)

    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            input=[_output("call_made_up", "sunny")],
            tools=[WEATHER],
        )

    assert caught.value.status_code == 400
    assert "call_made_up" in caught.value.message
    assert caught.value.param == "input"
    validate_error_envelope({"error": caught.value.body})


def test_an_output_without_any_earlier_call_is_refused(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(model=MODEL, input=[_output("call_orphan", "x")], tools=[WEATHER])

    assert "call_orphan" in caught.value.message


def test_leaving_the_call_unanswered_is_refused(sdk: openai.OpenAI) -> None:
    first = sdk.responses.create(model=MODEL, input=CALL_WEATHER, tools=[WEATHER])
    call = _single_call(first)

    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(
            model=MODEL, previous_response_id=first.id, input="never mind", tools=[WEATHER]
        )

    assert caught.value.status_code == 400
    assert call.call_id in caught.value.message
    validate_error_envelope({"error": caught.value.body})
    # The refused turn left nothing behind: the call can still be answered.
    answered = sdk.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[_output(call.call_id, "cloudy")],
        tools=[WEATHER],
    )
    assert answered.output_text == "get_weather -> cloudy"


def test_answering_one_call_twice_is_refused(sdk: openai.OpenAI) -> None:
    first = sdk.responses.create(model=MODEL, input=CALL_WEATHER, tools=[WEATHER])
    call = _single_call(first)

    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            input=[_output(call.call_id, "a"), _output(call.call_id, "b")],
            tools=[WEATHER],
        )

    assert call.call_id in caught.value.message


def test_the_round_trip_in_a_conversation(sdk: openai.OpenAI) -> None:
    conversation = sdk.conversations.create()
    first = sdk.responses.create(
        model=MODEL, conversation=conversation.id, input=CALL_WEATHER, tools=[WEATHER]
    )
    call = _single_call(checked_response(first))
    assert first.conversation is not None
    assert first.conversation.id == conversation.id

    second = checked_response(
        sdk.responses.create(
            model=MODEL,
            conversation=conversation.id,
            input=[_output(call.call_id, "windy")],
            tools=[WEATHER],
        )
    )

    assert second.output_text == "get_weather -> windy"
    items = list(sdk.conversations.items.list(conversation.id, order="asc"))
    assert [item.type for item in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert items[1].call_id == call.call_id  # type: ignore[union-attr]
    assert items[2].call_id == call.call_id  # type: ignore[union-attr]


def test_a_conversation_with_an_unanswered_call_refuses_plain_input(
    sdk: openai.OpenAI,
) -> None:
    conversation = sdk.conversations.create()
    first = sdk.responses.create(
        model=MODEL, conversation=conversation.id, input=CALL_WEATHER, tools=[WEATHER]
    )
    call = _single_call(first)

    with pytest.raises(openai.BadRequestError) as unanswered:
        sdk.responses.create(
            model=MODEL, conversation=conversation.id, input="hello?", tools=[WEATHER]
        )
    with pytest.raises(openai.BadRequestError) as unknown:
        sdk.responses.create(
            model=MODEL,
            conversation=conversation.id,
            input=[_output("call_elsewhere", "x")],
            tools=[WEATHER],
        )

    assert call.call_id in unanswered.value.message
    assert "call_elsewhere" in unknown.value.message
    assert len(list(sdk.conversations.items.list(conversation.id))) == 2


def _arguments_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"].startswith("response.function_call_arguments.")]


STREAM_MODES = [
    pytest.param({}, id="foreground"),
    pytest.param({"background": True}, id="background"),
]


@pytest.mark.parametrize("mode", STREAM_MODES)
def test_a_streamed_tool_call_is_well_formed(http: httpx.Client, mode: dict[str, bool]) -> None:
    events = post_stream(http, input=CALL_WEATHER, tools=[WEATHER], **mode)

    arguments = _arguments_events(events)
    assert [e["type"] for e in arguments] == [
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
    ]
    assert arguments[-1]["name"] == "get_weather"
    assert json.loads(arguments[-1]["arguments"]) == {"city": "Paris"}
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert added["item"]["type"] == "function_call"
    assert added["item"]["arguments"] == ""
    assert added["item"]["status"] == "in_progress"
    assert "response.content_part.added" not in types(events)
    final = events[-1]
    assert final["type"] == "response.completed"
    [item] = final["response"]["output"]
    assert item["call_id"] == added["item"]["call_id"]
    if mode:
        assert get_stream(http, final["response"]["id"]) == events


def test_the_stream_helper_handles_a_tool_round_trip(sdk: openai.OpenAI) -> None:
    with sdk.responses.stream(model=MODEL, input=CALL_WEATHER, tools=[WEATHER]) as stream:
        events = [dump(e) for e in stream]
        first = stream.get_final_response()
    # The helper adds `snapshot` to argument deltas and `parsed_arguments` to strict calls.
    checked_events([unparsed({k: v for k, v in e.items() if k != "snapshot"}) for e in events])
    [call] = first.output
    assert call.type == "function_call"
    assert call.parsed_arguments == {"city": "Paris"}  # type: ignore[union-attr]

    with sdk.responses.stream(
        model=MODEL,
        previous_response_id=first.id,
        input=[_output(call.call_id, "foggy")],
        tools=[WEATHER],
    ) as stream:
        second = stream.get_final_response()

    assert second.output_text == "get_weather -> foggy"


def test_a_background_tool_call_round_trip(sdk: openai.OpenAI) -> None:
    first = sdk.responses.create(model=MODEL, input=CALL_WEATHER, tools=[WEATHER], background=True)
    call = _single_call(checked_response(wait_terminal(sdk, first.id)))

    second = sdk.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[_output(call.call_id, "hail")],
        tools=[WEATHER],
        background=True,
    )
    final = checked_response(wait_terminal(sdk, second.id))

    assert final.output_text == "get_weather -> hail"


def test_tool_choice_none_answers_in_text(sdk: openai.OpenAI) -> None:
    response = sdk.responses.create(
        model=MODEL, input=CALL_WEATHER + " [[words 1]]", tools=[WEATHER], tool_choice="none"
    )

    assert [item.type for item in response.output] == ["message"]
    assert response.tool_choice == "none"


ONLY_TIME: Any = [
    pytest.param({"type": "function", "name": "get_time"}, id="forced"),
    pytest.param(
        {
            "type": "allowed_tools",
            "mode": "auto",
            "tools": [{"type": "function", "name": "get_time"}],
        },
        id="allowed-auto",
    ),
]


@pytest.mark.parametrize("choice", ONLY_TIME)
def test_a_directive_the_tool_choice_excludes_is_not_followed(
    sdk: openai.OpenAI, choice: Any
) -> None:
    """The embedded model calls only what `tool_choice` allows: of two directives, the
    allowed one; with none allowed, a forced choice still calls its tool."""
    both = sdk.responses.create(
        model=MODEL,
        input=CALL_WEATHER + ' [[call get_time {"zone":"UTC"}]]',
        tools=[WEATHER, TIME],
        tool_choice=choice,
    )
    excluded = sdk.responses.create(
        model=MODEL, input=CALL_WEATHER + " [[words 1]]", tools=[WEATHER, TIME], tool_choice=choice
    )

    assert (_single_call(both).name, _single_call(both).arguments) == ("get_time", '{"zone":"UTC"}')
    if choice["type"] == "function":
        assert (_single_call(excluded).name, _single_call(excluded).arguments) == ("get_time", "{}")
    else:
        assert [item.type for item in excluded.output] == ["message"]


REQUIRED: Any = [
    pytest.param("required", "get_weather", id="required"),
    pytest.param({"type": "function", "name": "get_time"}, "get_time", id="forced"),
    pytest.param(
        {
            "type": "allowed_tools",
            "mode": "required",
            "tools": [{"type": "function", "name": "get_time"}],
        },
        "get_time",
        id="allowed-required",
    ),
]


@pytest.mark.parametrize(("choice", "called"), REQUIRED)
def test_a_required_call_is_made_without_a_directive_then_answered(
    sdk: openai.OpenAI, choice: Any, called: str
) -> None:
    """Without a directive, a required call is the forced or first allowed tool with `{}`,
    at the turn's first step; given its output, the model answers it (no endless calls)."""
    first = sdk.responses.create(
        model=MODEL, input="just text", tools=[WEATHER, TIME], tool_choice=choice
    )
    call = _single_call(checked_response(first))
    second = sdk.responses.create(
        model=MODEL,
        input=[_output(call.call_id, "done")],
        previous_response_id=first.id,
        tools=[WEATHER, TIME],
        tool_choice=choice,
    )

    assert (call.name, call.arguments) == (called, "{}")
    assert second.output_text == f"{called} -> done"
