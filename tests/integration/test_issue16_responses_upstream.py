"""Issue 16, item 4: an upstream that speaks the Responses API (`--upstream-api responses`).

Each model step is one stateless streamed `POST /v1/responses` (`store: false`, the whole
item history) to `tests/support/fake_responses_upstream.py`, a scripted upstream as
strict as OpenAI's: it refuses an unpaired `function_call`, unknown parameters, a
stateful request, a reasoning item whose encrypted content it did not issue. The server's
runtime, journal and recovery stay its own: server tools run between two upstream steps,
and a retried step (429, 5xx, a failed or cut stream: G6) never runs a tool twice. Every
mapping is checked through the openai SDK: the request's parameters by their Responses
names, text (streamed and not, with logprobs), refusals, reasoning, function calls, usage,
incomplete reasons and errors.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tests.conftest import StartServer
from tests.integration._issue16_support import ResponsesRig, ServeResponses, responses_servers
from tests.integration._responses_support import (
    Event,
    checked_events,
    checked_response,
    dump,
    get_stream,
    post_stream,
    sdk_events,
    sse_events,
    unparsed,
)
from tests.support.client_tools import WEATHER
from tests.support.fake_responses_upstream import (
    FakeResponsesUpstream,
    Turn,
    error_event,
    failed,
    fault,
    incomplete,
    refusal,
    reset_mid,
    text,
    tool_calls,
)
from tests.support.responses_rules import request_error
from tests.support.side_effects import effects, runs_per_key
from tests.support.stream_rules import check_stream

MODEL = "fake-model"
PARIS = ("call_paris", "lookup", '{"city":"Paris"}')
SUNNY_PARIS = {"city": "Paris", "forecast": "sunny"}
NO = "I can't help with that."

Item = dict[str, Any]


class Weather(BaseModel):
    city: str
    sunny: bool


Rig = ResponsesRig
Serve = ServeResponses


@pytest.fixture
def serve(
    start_server: StartServer, responses_upstream: FakeResponsesUpstream, tmp_path: Path
) -> Iterator[Serve]:
    with responses_servers(start_server, responses_upstream, tmp_path / "effects") as serve:
        yield serve


def _user(said: str) -> Item:
    return {"type": "message", "role": "user", "content": [_text(said)], "status": "completed"}


def _text(said: str) -> Item:
    return {"type": "input_text", "text": said}


def _lookup_ran_once(rig: Rig) -> None:
    assert sorted(runs_per_key(rig.effects, "lookup").values()) == [1]
    assert [detail for _, detail in effects(rig.effects, "lookup")] == ["Paris"]


def _types(response: Item) -> list[str]:
    return [item["type"] for item in response["output"]]


# -- requests and answers ---------------------------------------------------------------


def test_a_turn_is_one_stateless_request_and_its_answer_usage_and_model_come_back(
    serve: Serve,
) -> None:
    rig = serve(tools=False)
    rig.fake.push(
        text(
            "Hello from upstream",
            usage=(11, 5),
            cached_tokens=4,
            cache_write_tokens=3,
            reasoning_tokens=2,
            model="fake-model-2026-01-01",
        )
    )

    response = checked_response(
        rig.client.responses.create(model=MODEL, instructions="Be brief.", input="Hi there")
    )

    assert response.status == "completed"
    assert response.output_text == "Hello from upstream"
    assert response.model == "fake-model-2026-01-01"  # the snapshot that answered
    assert response.service_tier == "default"
    assert response.usage is not None
    assert dump(response.usage) == {
        "input_tokens": 11,
        "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 3},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 2},
        "total_tokens": 16,
    }
    [sent] = rig.fake.requests
    assert sent == {
        "model": MODEL,
        "instructions": "Be brief.",
        "input": [_user("Hi there")],
        "store": False,
        "stream": True,
    }
    assert "authorization" not in rig.fake.headers[0]  # the client's key stays here
    assert rig.fake.refusals == []


def test_a_streamed_answer_is_the_upstreams_text_in_this_servers_events(serve: Serve) -> None:
    rig = serve(tools=False)
    rig.fake.push(text("Streamed from upstream"))

    events = post_stream(rig.http, model=MODEL, input="Hi", background=True)

    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == "Streamed from upstream"
    final = events[-1]["response"]
    assert final["status"] == "completed"
    assert get_stream(rig.http, final["id"]) == events  # logged, replayed alike

    rig.fake.push(text("Through the SDK"))
    with rig.client.responses.stream(model=MODEL, input="Hi again") as stream:
        said = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        assert stream.get_final_response().output_text == said == "Through the SDK"


def test_every_request_parameter_keeps_its_responses_name(serve: Serve) -> None:
    rig = serve("--upstream-api-key", "sk-upstream", tools=False)
    rig.fake.push(text("Noted"))

    response = checked_response(
        rig.client.responses.create(
            model=MODEL,
            input="Hi",
            tools=[WEATHER],
            tool_choice={"type": "function", "name": "get_weather"},
            parallel_tool_calls=False,
            temperature=0.25,
            top_p=0.5,
            max_output_tokens=64,
            text={"verbosity": "low"},
            reasoning={"effort": "high", "summary": "detailed"},
            truncation="auto",
            service_tier="flex",
            prompt_cache_key="cache-me",
            prompt_cache_retention="24h",
            safety_identifier="user-hash",
            user="user-1",
            top_logprobs=2,
            include=["message.output_text.logprobs", "reasoning.encrypted_content"],
            metadata={"kept": "here"},
            max_tool_calls=3,
        )
    )

    [sent] = rig.fake.requests
    assert {k: v for k, v in sent.items() if k != "input"} == {
        "model": MODEL,
        "store": False,
        "stream": True,
        "tools": [WEATHER],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "parallel_tool_calls": False,
        "temperature": 0.25,
        "top_p": 0.5,
        "max_output_tokens": 64,
        "text": {"verbosity": "low"},
        "reasoning": {"effort": "high", "summary": "detailed"},
        "truncation": "auto",
        "service_tier": "flex",
        "prompt_cache_key": "cache-me",
        "prompt_cache_retention": "24h",
        "safety_identifier": "user-hash",
        "user": "user-1",
        "top_logprobs": 2,
        "include": ["message.output_text.logprobs", "reasoning.encrypted_content"],
    }  # metadata and max_tool_calls are this server's own
    assert rig.fake.headers[0]["authorization"] == "Bearer sk-upstream"
    assert response.service_tier == "flex"
    # Logprobs come back on the part, `bytes` filled in (the upstream's deltas have none).
    part = dump(response)["output"][0]["content"][0]
    assert part["logprobs"][0] == {
        "token": "Noted",
        "logprob": -0.5,
        "bytes": list(b"Noted"),
        "top_logprobs": [
            {"token": "Noted", "logprob": -0.5, "bytes": list(b"Noted")},
            {"token": "alt", "logprob": -1.5, "bytes": list(b"alt")},
        ],
    }


def test_a_parameter_openai_refuses_fails_the_response_with_the_upstreams_reason(
    serve: Serve,
) -> None:
    rig = serve(tools=False)

    response = checked_response(
        rig.client.responses.create(model=MODEL, input="Hi", extra_body={"presence_penalty": 0.5})
    )

    assert response.status == "failed"
    assert response.error is not None
    error = dump(response.error)
    assert error["code"] == "invalid_prompt"
    assert error["type"] == "invalid_request_error"
    assert "HTTP 400" in error["message"]
    assert "Unknown parameter: 'presence_penalty'." in error["message"]
    assert len(rig.fake.requests) == 1, "a 400 is not retried"
    assert [r.param for r in rig.fake.refusals] == ["presence_penalty"]


# -- tools ------------------------------------------------------------------------------


def test_a_server_tool_runs_between_two_upstream_steps(serve: Serve) -> None:
    rig = serve()
    rig.fake.push(tool_calls(PARIS), text("Sunny in Paris."))

    response = checked_response(rig.client.responses.create(model=MODEL, input="Paris?"))

    final = dump(response)
    assert final["status"] == "completed"
    assert _types(final) == ["function_call", "function_call_output", "message"]
    assert json.loads(final["output"][1]["output"]) == SUNNY_PARIS
    assert response.output_text == "Sunny in Paris."
    _lookup_ran_once(rig)
    first, second = rig.fake.requests
    lookup = next(t for t in first["tools"] if t["name"] == "lookup")
    assert (lookup["type"], lookup["strict"]) == ("function", False)
    assert "description" in lookup and "parameters" in lookup
    # The second step carries the first's call and the tool's output, with no ids.
    assert rig.sent(1) == [
        _user("Paris?"),
        {
            "type": "function_call",
            "call_id": "call_paris",
            "name": "lookup",
            "arguments": '{"city":"Paris"}',
            "status": "completed",
        },
        {
            "type": "function_call_output",
            "call_id": "call_paris",
            "output": final["output"][1]["output"],
            "status": "completed",
        },
    ]
    assert second["tools"] == first["tools"]
    assert rig.fake.refusals == []


def test_client_function_calls_end_the_turn_and_their_outputs_go_upstream(serve: Serve) -> None:
    rig = serve()
    oslo = ("call_oslo", "get_weather", '{"city":"Oslo"}')
    rig.fake.push(tool_calls(PARIS, oslo, preface="Let me look."), text("Sunny and cold."))

    first = checked_response(
        rig.client.responses.create(model=MODEL, input="Paris and Oslo?", tools=[WEATHER])
    )

    assert first.status == "completed"
    assert _types(dump(first)) == [
        "message",
        "function_call",
        "function_call",
        "function_call_output",
    ]
    _lookup_ran_once(rig)

    second = checked_response(
        rig.client.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": "call_oslo", "output": "-3C"}],
            tools=[WEATHER],
        )
    )

    assert second.output_text == "Sunny and cold."
    preface, *rest = rig.sent(1)[1:]
    assert preface["role"] == "assistant"
    assert preface["id"].startswith("msg_")
    assert preface["content"] == [
        {"type": "output_text", "text": "Let me look.", "annotations": []}
    ]
    assert [(i["type"], i["call_id"]) for i in rest] == [
        ("function_call", "call_paris"),
        ("function_call", "call_oslo"),
        ("function_call_output", "call_paris"),
        ("function_call_output", "call_oslo"),
    ]
    assert rest[-1]["output"] == "-3C"
    assert rig.fake.refusals == []


# -- what the answer is -----------------------------------------------------------------


def test_structured_output_through_responses_parse(serve: Serve) -> None:
    rig = serve()
    rig.fake.push(tool_calls(PARIS), text('{"city": "Paris", "sunny": true}'))

    parsed = rig.client.responses.parse(model=MODEL, input="Weather?", text_format=Weather)

    assert parsed.output_parsed == Weather(city="Paris", sunny=True)
    for request in rig.fake.requests:  # on every step, also after the server tool
        form = request["text"]["format"]
        assert (form["type"], form["name"], form["strict"]) == ("json_schema", "Weather", True)
        assert form["schema"]["required"] == ["city", "sunny"]
    assert rig.fake.refusals == []


def test_a_refusal_is_a_refusal_part_and_goes_back_as_one(serve: Serve) -> None:
    rig = serve(tools=False, env=True)  # --upstream-api by its environment variable
    rig.fake.push(refusal(NO), text("ok"))

    first = checked_response(rig.client.responses.create(model=MODEL, input="Do harm"))
    rig.client.responses.create(model=MODEL, input="Sorry", previous_response_id=first.id)

    [message] = dump(first)["output"]
    assert message["content"] == [{"type": "refusal", "refusal": NO}]
    answer = rig.sent(1)[1]
    assert answer == {
        "type": "message",
        "id": message["id"],
        "role": "assistant",
        "content": [{"type": "refusal", "refusal": NO}],
        "status": "completed",
    }


SUMMARY = ("The user asks about France.", "Its capital is Paris.")
THOUGHT = "France, capital: Paris."


def test_a_reasoning_summary_is_the_reasoning_items_summary(serve: Serve) -> None:
    rig = serve(tools=False)
    rig.fake.push(text("Paris.", summary=SUMMARY, reasoning_tokens=9))

    events = post_stream(
        rig.http,
        model=MODEL,
        input="Capital of France?",
        reasoning={"effort": "high", "summary": "auto"},
        background=True,
    )

    final = events[-1]["response"]
    reasoning, message = final["output"]
    assert (reasoning["type"], reasoning["status"]) == ("reasoning", "completed")
    assert reasoning["summary"] == [{"type": "summary_text", "text": said} for said in SUMMARY]
    assert reasoning["content"] == []
    assert "encrypted_content" not in reasoning  # not asked for (include)
    # Streamed part by part, with OpenAI's events.
    for index, said in enumerate(SUMMARY):
        part = [e for e in events if e.get("summary_index") == index]
        assert [e["type"].removeprefix("response.reasoning_summary_") for e in part] == [
            "part.added",
            *["text.delta"] * len(said.split(" ")),
            "text.done",
            "part.done",
        ]
        assert "".join(e["delta"] for e in part[1:-2]) == part[-2]["text"] == said
        assert part[-1]["part"] == {"type": "summary_text", "text": said}
    assert not [e for e in events if e["type"].startswith("response.reasoning_text")]
    assert message["content"][0]["text"] == "Paris."
    assert final["usage"]["output_tokens_details"] == {"reasoning_tokens": 9}
    assert rig.fake.requests[0]["reasoning"] == {"effort": "high", "summary": "auto"}
    assert get_stream(rig.http, final["id"]) == events  # logged, replayed alike

    # Through the SDK, whose types read each event.
    rig.fake.push(text("Paris.", summary=SUMMARY))
    with rig.client.responses.stream(
        model=MODEL, input="Again?", reasoning={"summary": "auto"}
    ) as stream:
        check_stream(unparsed(sdk_events(stream)))
        again = checked_response(stream.get_final_response())
    assert [s.text for s in again.output[0].summary] == list(SUMMARY)  # type: ignore[union-attr]


def test_raw_reasoning_is_the_reasoning_items_content(serve: Serve) -> None:
    rig = serve(tools=False)
    rig.fake.push(text("Paris.", reasoning=THOUGHT, reasoning_tokens=9))

    events = post_stream(rig.http, model=MODEL, input="Capital of France?", background=True)

    final = events[-1]["response"]
    reasoning, message = final["output"]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": THOUGHT}]
    assert reasoning["summary"] == []
    deltas = [e["delta"] for e in events if e["type"] == "response.reasoning_text.delta"]
    assert "".join(deltas) == THOUGHT
    assert message["content"][0]["text"] == "Paris."
    assert get_stream(rig.http, final["id"]) == events

    with rig.client.responses.stream(model=MODEL, input="Again?") as stream:
        check_stream(unparsed(sdk_events(stream)))
        assert [i.type for i in stream.get_final_response().output] == ["message"]


def test_reasoning_goes_back_upstream_only_with_encrypted_content(serve: Serve) -> None:
    rig = serve(tools=False)
    rig.fake.push(text("Paris.", summary=SUMMARY), text("Rome."))
    first = checked_response(
        rig.client.responses.create(
            model=MODEL, input="Capital of France?", reasoning={"summary": "auto"}
        )
    )
    assert [i.type for i in first.output] == ["reasoning", "message"]
    blob = rig.fake.encrypt("the client's own earlier reasoning", "rs_client")
    brought: Any = {
        "type": "reasoning",
        "id": "rs_client",
        "summary": [{"type": "summary_text", "text": "Earlier."}],
        "encrypted_content": blob,
    }

    second = checked_response(
        rig.client.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            input=[
                brought,
                {"role": "assistant", "content": "Earlier answer."},
                {"role": "user", "content": "And Italy?"},
            ],
        )
    )

    assert second.output_text == "Rome."
    sent = rig.sent(1)
    assert [i.get("role", i["type"]) for i in sent] == [
        "user",
        "assistant",  # this server's reasoning item (no encrypted content) is not sent
        "reasoning",
        "assistant",
        "user",
    ]
    assert sent[2] == brought  # the client's, as it was
    assert rig.fake.refusals == []


def test_encrypted_reasoning_round_trips_between_two_steps(serve: Serve) -> None:
    rig = serve()
    rig.fake.push(tool_calls(PARIS, summary=("I need the weather.",)), text("Sunny."))

    response = checked_response(
        rig.client.responses.create(
            model=MODEL,
            input="Paris?",
            reasoning={"summary": "auto"},
            include=["reasoning.encrypted_content"],
        )
    )

    assert response.status == "completed"
    assert rig.fake.refusals == []
    [reasoning] = [i for i in rig.sent(1) if i["type"] == "reasoning"]
    assert rig.fake.issued[reasoning["encrypted_content"]] == reasoning["id"]
    kept = dump(response)["output"][0]
    assert kept["encrypted_content"] == reasoning["encrypted_content"]
    assert kept["id"] == reasoning["id"]  # the upstream's: its encrypted content names it
    assert kept["summary"] == [{"type": "summary_text", "text": "I need the weather."}]


# -- how a step ends --------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["max_output_tokens", "content_filter"])
def test_an_incomplete_reason_passes_through(serve: Serve, reason: str) -> None:
    rig = serve(tools=False)
    rig.fake.push(incomplete("Partial answer", reason=reason))

    response = checked_response(
        rig.client.responses.create(model=MODEL, input="Tell me", max_output_tokens=16)
    )

    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == reason
    assert response.output_text == "Partial answer"


def test_a_call_cut_off_by_max_output_tokens_never_runs(serve: Serve) -> None:
    rig = serve()
    rig.fake.push(incomplete("", calls=(PARIS,)))

    response = checked_response(rig.client.responses.create(model=MODEL, input="Paris?"))

    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output == []
    assert runs_per_key(rig.effects, "lookup") == {}


RETRIED = [
    pytest.param(fault(429, {"retry-after-ms": "10"}), id="http-429"),
    pytest.param(fault(503), id="http-503"),
    pytest.param(failed("server_error", "The server had an error."), id="response-failed"),
    pytest.param(error_event("rate_limit_exceeded", "Slow down."), id="error-event"),
    pytest.param(reset_mid("partial answer"), id="cut-stream"),
]


@pytest.mark.parametrize("failure", RETRIED)
def test_a_failed_step_is_retried_and_the_tool_does_not_run_twice(
    serve: Serve, failure: Turn
) -> None:
    rig = serve()
    rig.fake.push(tool_calls(PARIS), failure, text("done"))

    events = post_stream(rig.http, model=MODEL, input="Paris?", background=True)

    final = events[-1]["response"]
    assert final["status"] == "completed", final["error"]
    _lookup_ran_once(rig)
    assert len(rig.fake.requests) == 3
    assert rig.fake.requests[2] == rig.fake.requests[1], "the retry resends the same step"
    assert _types(final)[:2] == ["function_call", "function_call_output"]
    assert final["output"][-1]["content"][0]["text"] == "done"
    assert get_stream(rig.http, final["id"]) == events


@pytest.mark.parametrize(
    ("failure", "code", "said"),
    [
        pytest.param(
            failed("invalid_prompt", "Your prompt was flagged."),
            "invalid_prompt",
            "Your prompt was flagged. (invalid_prompt)",
            id="response-failed",
        ),
        pytest.param(
            error_event("insufficient_quota", "You exceeded your quota."),
            "server_error",
            "You exceeded your quota. (insufficient_quota)",
            id="error-event",
        ),
    ],
)
def test_an_upstream_failure_that_retrying_cannot_mend_fails_the_response(
    serve: Serve, failure: Turn, code: str, said: str
) -> None:
    rig = serve(tools=False)
    rig.fake.push(failure, text("never"))

    response = checked_response(rig.client.responses.create(model=MODEL, input="Hi"))

    assert response.status == "failed"
    assert response.error is not None
    assert response.error.code == code
    assert said in response.error.message
    assert len(rig.fake.requests) == 1


# -- the scripted upstream is as strict as OpenAI ---------------------------------------

_CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
_OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
_HI = {"role": "user", "content": "hi"}


def _body(*items: Item, **more: Any) -> Item:
    return {"model": "m", "input": list(items), "store": False, "stream": True, **more}


@pytest.mark.parametrize(
    ("body", "param", "said"),
    [
        pytest.param(_body(_HI, frequency_penalty=1), "frequency_penalty", "Unknown", id="unknown"),
        pytest.param({**_body(_HI), "store": True}, "store", "stateless", id="store-true"),
        pytest.param({**_body(_HI), "stream": False}, "stream", "streams", id="not-streamed"),
        pytest.param(_body(_HI, _CALL), "input", "No tool output found", id="unanswered-call"),
        pytest.param(_body(_HI, _OUTPUT), "input", "No tool call found", id="orphan-output"),
        pytest.param(
            _body({**_HI, "id": "msg_1"}), "input[0].id", "Unknown parameter", id="user-message-id"
        ),
        pytest.param(
            _body({"role": "assistant", "content": "x", "id": "m1"}),
            "input[0].id",
            "begins with 'msg'",
            id="assistant-id-prefix",
        ),
        pytest.param(
            _body({"role": "assistant", "content": "x", "phase": "final"}),
            "input[0].phase",
            "'final_answer'",
            id="assistant-phase",
        ),
        pytest.param(
            _body({"role": "assistant", "content": [_text("x")]}),
            "input[0].content[0].type",
            "'output_text'",
            id="assistant-input-text",
        ),
        pytest.param(
            _body({"type": "reasoning", "id": "rs_1", "summary": []}, _HI),
            "input",
            "Items are not persisted",
            id="reasoning-without-encrypted-content",
        ),
        pytest.param(
            _body({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x"}),
            "input",
            "could not be verified",
            id="reasoning-not-issued",
        ),
        pytest.param(
            _body({"type": "item_reference", "id": "msg_1"}),
            "input",
            "not found",
            id="item-reference",
        ),
        pytest.param(
            _body(_HI, text={"format": {"type": "json_object"}}),
            "input",
            "the word 'json'",
            id="json-object-without-json",
        ),
        pytest.param(
            _body(_HI, tools=[{**WEATHER, "parameters": {"type": "object", "properties": {}}}]),
            "tools[0].parameters",
            "additionalProperties",
            id="non-strict-schema",
        ),
    ],
)
def test_the_scripted_upstream_refuses_what_openai_refuses(
    body: Item, param: str, said: str
) -> None:
    found = request_error(body)

    assert found is not None
    assert found.param == param
    assert said in found.message


def test_the_scripted_upstream_takes_back_reasoning_it_issued_before_its_item(
    responses_upstream: FakeResponsesUpstream,
) -> None:
    upstream = responses_upstream
    blob = upstream.encrypt("thought", "rs_1")
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": blob}
    answer = {
        "role": "assistant",
        "content": [{"type": "output_text", "text": "x", "annotations": []}],
    }

    assert request_error(_body(_HI, reasoning, answer), upstream.issued) is None
    last = request_error(_body(_HI, reasoning), upstream.issued)
    assert last is not None and "required following item" in last.message
    moved = request_error(_body(_HI, {**reasoning, "id": "rs_2"}, answer), upstream.issued)
    assert moved is not None and "could not be verified" in moved.message


def _collapsed(events: list[Event]) -> list[Event]:
    """The output's events without numbers, each run of deltas of one part as one delta:
    what a stream says, however finely it was cut."""
    out: list[Event] = []
    for event in events:
        if event["type"] in ("response.created", "response.in_progress"):
            continue
        event = {k: v for k, v in event.items() if k != "sequence_number"}
        last = out[-1] if out else {}
        same = {k: v for k, v in last.items() if k not in ("delta", "logprobs")}
        if event["type"].endswith(".delta") and same == {
            k: v for k, v in event.items() if k not in ("delta", "logprobs")
        }:
            last["delta"] += event["delta"]
            if "logprobs" in event:
                last["logprobs"] = last["logprobs"] + event["logprobs"]
            continue
        out.append(event)
    return out


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(
            lambda: text("Paris is the capital.", summary=SUMMARY, reasoning=THOUGHT),
            id="reasoning-and-logprobs",
        ),
        pytest.param(lambda: refusal(NO), id="refusal"),
    ],
)
def test_a_retried_streaming_create_streams_what_the_first_streamed(
    serve: Serve, answer: Any
) -> None:
    """A foreground response keeps no log: the retry of its create (the same
    Idempotency-Key) is streamed from its final object. It says what the first stream
    said, event for event: reasoning summaries and raw reasoning, text with its logprobs,
    a refusal. Before, it had no reasoning or refusal events and no logprobs."""
    rig = serve(tools=False)
    rig.fake.push(answer())
    body = {
        "model": MODEL,
        "input": "Capital of France?",
        "stream": True,
        "reasoning": {"summary": "auto"},
        "include": ["message.output_text.logprobs"],
        "top_logprobs": 1,
    }
    streams = []
    for _ in range(2):
        with rig.http.stream(
            "POST", "/v1/responses", json=body, headers={"Idempotency-Key": "same"}
        ) as reply:
            reply.read()
        streams.append(checked_events(sse_events(reply)))
    first, again = streams

    assert len(rig.fake.requests) == 1
    assert again[-1]["response"] == first[-1]["response"]
    assert _collapsed(again) == _collapsed(first)
