"""Regression: a Chat Completions upstream was not told a request's tool restrictions.

The bug: with a Chat Completions upstream, `tool_choice` `{"type": "allowed_tools", "mode",
"tools"}` was sent as a bare `"auto"` or `"required"` with every tool declared, so the
model could call a tool the client had not allowed; and each function tool's `strict` was
dropped (only `name`, `description` and `parameters` were sent), though the Response
echoed `strict: true`.

The fix (server/_chat_messages.py `tool_choice`, server/_upstream.py `chat_tool`): the
restriction goes as Chat Completions' own `allowed_tools` choice and `strict` in each
`function`; a tool field Chat Completions has no place for (`defer_loading: true`,
`allowed_callers` beyond `direct`, `output_schema`) is refused by name, never dropped. A
Responses upstream is sent all of it as given. The fake upstreams check these shapes as
OpenAI does, and will not play a call the request does not let the model make: a test
scripting one sees the step fail (the fake's `mistakes`), as a real model could not make it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import StartServer
from tests.integration._issue16_support import MODEL, Rig, ServeResponses, responses_servers, rig_on
from tests.integration._responses_support import checked_response, dump
from tests.support import fake_responses_upstream as responses_fake
from tests.support.client_tools import WEATHER
from tests.support.fake_responses_upstream import FakeResponsesUpstream
from tests.support.fake_upstream import FakeUpstream, text, tool_calls
from tests.support.side_effects import runs_per_key

OSLO = ("call_oslo", "get_weather", '{"city":"Oslo"}')
PARIS = ("call_paris", "lookup", '{"city":"Paris"}')  # the tool agent's server tool
CLOCK: Any = {
    "type": "function",
    "name": "get_time",
    "description": "The time in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
# A schema strict mode cannot take: `a` is not required, and extra properties are not
# forbidden.
LOOSE_SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}}
ONLY_WEATHER = {"type": "allowed_tools", "tools": [{"type": "function", "name": "get_weather"}]}


@pytest.fixture
def chat_rig(
    start_server: StartServer, fake_upstream: FakeUpstream, tmp_path: Path
) -> Iterator[Rig]:
    """A server hosting the tool agent (its server tool `lookup`) on the Chat Completions
    fake, which fails a step at once (no retries) when it will not play the scripted turn."""
    with rig_on(
        start_server, fake_upstream, tmp_path / "effects", "--model-retries", "0", tools=True
    ) as rig:
        yield rig


@pytest.fixture
def serve_responses(
    start_server: StartServer, responses_upstream: FakeResponsesUpstream, tmp_path: Path
) -> Iterator[ServeResponses]:
    with responses_servers(start_server, responses_upstream, tmp_path / "effects") as serve:
        yield serve


def _functions(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The functions a Chat Completions request declares, by name."""
    return {tool["function"]["name"]: tool["function"] for tool in body["tools"]}


def _create(http: httpx.Client, **body: Any) -> httpx.Response:
    return http.post("/v1/responses", json={"model": MODEL, "input": "Hi", **body})


def _refused_by_name(answer: httpx.Response, field: str, said: str) -> None:
    """`field` was refused: a 400 at create naming it, or (checked only when the model
    runs) a failed response whose error says `said`. Never a response that ran without it."""
    if answer.status_code == 400:
        assert answer.json()["error"]["param"] == f"tools[0].{field}"
        return
    response = answer.json()
    assert answer.status_code == 200 and response["status"] == "failed", response
    assert said in response["error"]["message"]


# -- Chat Completions ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "required"])
def test_allowed_tools_reach_a_chat_upstream_as_its_own_choice(chat_rig: Rig, mode: str) -> None:
    chat_rig.fake.push(tool_calls(OSLO))

    response = checked_response(
        chat_rig.client.responses.create(
            model=MODEL,
            input="Weather in Oslo?",
            tools=[WEATHER, CLOCK],
            tool_choice={**ONLY_WEATHER, "mode": mode},  # type: ignore[typeddict-item]
        )
    )

    assert response.status == "completed"
    [call] = dump(response)["output"]
    assert (call["type"], call["name"]) == ("function_call", "get_weather")
    [sent] = chat_rig.fake.requests
    assert sent["tool_choice"] == {
        "type": "allowed_tools",
        "allowed_tools": {
            "mode": mode,
            "tools": [{"type": "function", "function": {"name": "get_weather"}}],
        },
    }
    # Every tool is still declared (the upstream's prompt cache keeps them); only the
    # choice narrows what the model may call.
    assert {"lookup", "get_weather", "get_time"} <= set(_functions(sent))
    assert (chat_rig.fake.refusals, chat_rig.fake.mistakes) == ([], [])


def test_a_call_outside_allowed_tools_is_not_one_the_chat_model_may_make(chat_rig: Rig) -> None:
    """The fake plays only calls the request allows: told the restriction, it will not call
    the server tool `lookup`, which therefore never runs."""
    chat_rig.fake.push(tool_calls(PARIS))

    response = checked_response(
        chat_rig.client.responses.create(
            model=MODEL,
            input="Weather in Paris?",
            tools=[WEATHER],
            tool_choice={**ONLY_WEATHER, "mode": "auto"},  # type: ignore[typeddict-item]
        )
    )

    assert response.status == "failed"
    [mistake] = chat_rig.fake.mistakes
    assert "'lookup'" in mistake and "['get_weather']" in mistake
    assert runs_per_key(chat_rig.effects, "lookup") == {}


def test_strict_reaches_a_chat_upstream_in_each_function(chat_rig: Rig) -> None:
    loose = {"type": "function", "name": "loose", "parameters": LOOSE_SCHEMA, "strict": False}
    bare = {"type": "function", "name": "bare"}  # no parameters; `strict` left to its default
    chat_rig.fake.push(text("Fine."))

    response = checked_response(
        chat_rig.client.responses.create(
            model=MODEL,
            input="Hi",
            tools=[WEATHER, loose, bare],  # type: ignore[list-item]
        )
    )

    assert response.status == "completed"
    assert [(t.name, t.strict) for t in response.tools] == [  # type: ignore[union-attr]
        ("get_weather", True),
        ("loose", False),
        ("bare", True),
    ]
    functions = _functions(chat_rig.fake.requests[0])
    assert {name: f.get("strict") for name, f in functions.items()} == {
        **{name: False for name in functions},  # the server's tools
        "get_weather": True,
        "loose": False,
        "bare": None,  # left out: Chat Completions' own default (not strict)
    }
    assert functions["get_weather"]["parameters"] == WEATHER["parameters"]
    # No parameters is no arguments, in a schema strict mode takes (the fake checks it).
    assert functions["bare"]["parameters"] == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }
    assert chat_rig.fake.refusals == []


def test_a_loose_tool_that_leaves_strict_out_is_not_made_strict(chat_rig: Rig) -> None:
    """`strict` left out is sent left out, so each upstream applies its own default: a
    schema strict mode cannot take still works. Before, it was sent `strict: true`, which
    OpenAI refuses for such a schema, and the turn failed."""
    tool = {"type": "function", "name": "loose", "parameters": LOOSE_SCHEMA}
    chat_rig.fake.push(text("Fine."))

    answer = _create(chat_rig.http, tools=[tool])

    assert answer.status_code == 200 and answer.json()["status"] == "completed", answer.text
    assert "strict" not in _functions(chat_rig.fake.requests[0])["loose"]
    assert chat_rig.fake.refusals == []


def test_a_strict_tool_whose_schema_strict_mode_cannot_take_is_never_sent_loose(
    chat_rig: Rig,
) -> None:
    tool = {"type": "function", "name": "loose", "parameters": LOOSE_SCHEMA, "strict": True}

    answer = _create(chat_rig.http, tools=[tool])

    if answer.status_code == 400:  # refused at create, as OpenAI's Responses API does
        assert answer.json()["error"]["param"] == "tools[0].parameters"
        return
    response = answer.json()
    assert response["status"] == "failed", response
    assert "Invalid schema for function 'loose'" in response["error"]["message"]
    [refusal] = chat_rig.fake.refusals
    where = list(_functions(chat_rig.fake.requests[0])).index("loose")
    assert refusal.param == f"tools[{where}].function.parameters"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("defer_loading", True, id="defer_loading"),
        pytest.param("allowed_callers", ["programmatic"], id="allowed_callers"),
        pytest.param("output_schema", {"type": "string"}, id="output_schema"),
    ],
)
def test_a_function_field_chat_completions_cannot_send_is_refused_by_name(
    chat_rig: Rig, field: str, value: Any
) -> None:
    answer = _create(chat_rig.http, tools=[{**WEATHER, field: value}])

    _refused_by_name(answer, field, f"'{field}'")
    assert chat_rig.fake.requests == [], "nothing is sent without the field"


def test_function_fields_every_chat_function_already_honours_are_accepted(chat_rig: Rig) -> None:
    tool = {**WEATHER, "defer_loading": False, "allowed_callers": ["direct"]}
    chat_rig.fake.push(text("Fine."))

    answer = _create(chat_rig.http, tools=[tool])

    assert answer.status_code == 200 and answer.json()["status"] == "completed", answer.text
    sent = _functions(chat_rig.fake.requests[0])["get_weather"]
    assert set(sent) == {"name", "description", "parameters", "strict"}


# -- Responses -------------------------------------------------------------------------


def test_allowed_tools_and_function_fields_reach_a_responses_upstream_as_given(
    serve_responses: ServeResponses,
) -> None:
    rig = serve_responses(tools=False)
    choice = {**ONLY_WEATHER, "mode": "required"}
    weather = {**WEATHER, "defer_loading": False, "allowed_callers": ["direct"]}
    clock = {**CLOCK, "output_schema": {"type": "string"}}
    rig.fake.push(responses_fake.tool_calls(OSLO))

    answer = _create(rig.http, tools=[weather, clock], tool_choice=choice)

    assert answer.status_code == 200 and answer.json()["status"] == "completed", answer.text
    [sent] = rig.fake.requests
    assert sent["tool_choice"] == choice
    assert sent["tools"] == [weather, clock]
    assert (rig.fake.refusals, rig.fake.mistakes) == ([], [])


def test_a_call_outside_allowed_tools_is_not_one_the_responses_model_may_make(
    serve_responses: ServeResponses,
) -> None:
    rig = serve_responses("--model-retries", "0")
    rig.fake.push(responses_fake.tool_calls(PARIS))

    answer = _create(rig.http, tools=[WEATHER], tool_choice={**ONLY_WEATHER, "mode": "auto"})

    assert answer.json()["status"] == "failed"
    [mistake] = rig.fake.mistakes
    assert "'lookup'" in mistake
    assert runs_per_key(rig.effects, "lookup") == {}
