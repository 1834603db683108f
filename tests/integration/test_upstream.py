"""The upstream Chat Completions model, against a real fake upstream over HTTP.

A real server process is pointed at `tests/support/fake_upstream.py` with
`--upstream-base-url`; the fake plays scripted turns and faults and records every
request, so these tests check both what the client sees and what the upstream was
sent: the mapping of requests and usage, tool-consistent histories (G5), and delivery
retries that never run a tool twice (G6).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response

from tests.conftest import NewStore, StartServer, make_client
from tests.integration._responses_support import (
    checked_events,
    checked_response,
    dump,
    post_stream,
    sdk_events,
    types,
)
from tests.support.client_tools import WEATHER
from tests.support.fake_upstream import (
    FakeUpstream,
    Turn,
    fault,
    malformed,
    reset,
    reset_mid,
    stall,
    text,
    tool_calls,
)
from tests.support.server import ServerProcess
from tests.support.side_effects import effects, runs_per_key
from tests.support.stream_rules import parse_sse
from tests.support.waiting import wait_status, wait_terminal, wait_until

MODEL = "fake-model"
PARIS = ("call_paris", "lookup", '{"city":"Paris"}')
ROME = ("call_rome", "lookup", '{"city":"Rome"}')
SUNNY_PARIS = {"city": "Paris", "forecast": "sunny"}

Message = dict[str, Any]


@dataclass
class Rig:
    """A server process pointed at the fake upstream, with clients for it."""

    fake: FakeUpstream
    server: ServerProcess
    effects: Path
    client: openai.OpenAI
    http: httpx.Client

    def messages(self, index: int) -> list[Message]:
        messages: list[Message] = self.fake.requests[index]["messages"]
        return messages


Serve = Callable[..., Rig]


@pytest.fixture
def serve(
    start_server: StartServer, fake_upstream: FakeUpstream, tmp_path: Path
) -> Iterator[Serve]:
    """Start a server on the fake upstream, with the tool agent unless `tools=False`."""
    opened: list[openai.OpenAI | httpx.Client] = []

    def serve(*args: str, tools: bool = True) -> Rig:
        folder = tmp_path / "effects"
        cli = ["--upstream-base-url", fake_upstream.url, "--retry-base-delay", "0.01", *args]
        env: dict[str, str] = {}
        if tools:
            cli += ["--agent", "tests.agents.tool_agent:agent"]
            env["SIDE_EFFECTS_DIR"] = str(folder)
        server = start_server(*cli, env=env)
        client = make_client(server.url)
        http = httpx.Client(base_url=server.url, timeout=30.0)
        opened.extend((client, http))
        return Rig(fake_upstream, server, folder, client, http)

    yield serve
    for each in opened:
        each.close()


def _output_types(response: dict[str, Any]) -> list[str]:
    return [item["type"] for item in response["output"]]


def _message_text(item: dict[str, Any]) -> str:
    return "".join(part["text"] for part in item["content"] if part["type"] == "output_text")


def _tool_turn(call_id: str, name: str, arguments: str) -> Message:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        ],
    }


def _lookup_ran_once(rig: Rig, *cities: str) -> None:
    runs = runs_per_key(rig.effects, "lookup")
    assert sorted(runs.values()) == [1] * len(cities), runs
    assert sorted(detail for _, detail in effects(rig.effects, "lookup")) == sorted(cities)


def _terminal(events: list[dict[str, Any]]) -> dict[str, Any]:
    response: dict[str, Any] = events[-1]["response"]
    return response


# -- requests and answers ---------------------------------------------------------------


def test_a_text_turn_maps_the_request_the_answer_and_the_usage(serve: Serve) -> None:
    rig = serve(tools=False)
    rig.fake.push(text("Hello from upstream", usage=(11, 5), cached_tokens=4, reasoning_tokens=2))

    response = checked_response(
        rig.client.responses.create(model=MODEL, instructions="Be brief.", input="Hi there")
    )

    assert response.status == "completed"
    assert response.output_text == "Hello from upstream"
    assert response.model == MODEL
    assert response.usage is not None
    assert dump(response.usage) == {
        "input_tokens": 11,
        "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 2},
        "total_tokens": 16,
    }
    [sent] = rig.fake.requests
    assert sent["model"] == MODEL
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi there"},
    ]
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert "tools" not in sent
    # The client's own API key is never forwarded upstream.
    assert "authorization" not in rig.fake.headers[0]


def test_upstream_model_and_api_key_flags_reach_the_upstream(serve: Serve) -> None:
    rig = serve(
        "--upstream-model", "pinned-model", "--upstream-api-key", "sk-upstream", tools=False
    )
    rig.fake.push(text("pinned"))

    response = checked_response(rig.client.responses.create(model=MODEL, input="Hi"))

    assert response.status == "completed"
    assert response.output_text == "pinned"
    assert rig.fake.requests[0]["model"] == "pinned-model"
    assert rig.fake.headers[0]["authorization"] == "Bearer sk-upstream"


def test_request_options_reach_the_upstream(serve: Serve) -> None:
    rig = serve(tools=False)

    checked_response(
        rig.client.responses.create(
            model=MODEL, input="Hi", temperature=0.25, top_p=0.5, max_output_tokens=64
        )
    )

    sent = rig.fake.requests[0]
    assert (sent["temperature"], sent["top_p"], sent["max_tokens"]) == (0.25, 0.5, 64)


# -- server tools -----------------------------------------------------------------------


def test_a_server_tool_runs_once_and_its_result_reaches_the_upstream(serve: Serve) -> None:
    rig = serve()
    rig.fake.push(tool_calls(PARIS), text("Sunny in Paris."))

    events = post_stream(rig.http, model=MODEL, input="Weather in Paris?", background=True)

    final = _terminal(events)
    assert final["status"] == "completed"
    assert _output_types(final) == ["function_call", "function_call_output", "message"]
    call, output, message = final["output"]
    assert (call["call_id"], call["name"], call["arguments"]) == PARIS
    assert output["call_id"] == "call_paris"
    assert json.loads(output["output"]) == SUNNY_PARIS
    assert _message_text(message) == "Sunny in Paris."
    assert final["usage"]["input_tokens"] == 14  # two steps of 7
    assert final["usage"]["output_tokens"] == 6
    _lookup_ran_once(rig, "Paris")

    first, _ = rig.fake.requests
    assert "lookup" in [tool["function"]["name"] for tool in first["tools"]]
    assert rig.messages(1)[: len(first["messages"])] == first["messages"]
    assistant, tool = rig.messages(1)[len(first["messages"]) :]
    assert assistant == _tool_turn(*PARIS)
    assert tool["role"] == "tool"
    assert tool["tool_call_id"] == "call_paris"
    assert json.loads(tool["content"]) == SUNNY_PARIS
    assert tool["content"] == output["output"]

    polled = checked_response(rig.client.responses.retrieve(final["id"]))
    assert dump(polled)["output"] == final["output"]


def test_parallel_tool_calls_each_run_once_and_both_outputs_are_delivered(serve: Serve) -> None:
    rig = serve()
    rig.fake.push(tool_calls(PARIS, ROME), text("Sunny in both."))

    response = checked_response(rig.client.responses.create(model=MODEL, input="Paris and Rome?"))

    assert response.status == "completed"
    data = dump(response)
    calls = ["function_call", "function_call", "function_call_output", "function_call_output"]
    assert sorted(_output_types(data)) == [*calls, "message"]
    assert _output_types(data)[-1] == "message"
    outputs = {i["call_id"]: json.loads(i["output"]) for i in data["output"] if "output" in i}
    assert outputs == {
        "call_paris": SUNNY_PARIS,
        "call_rome": {"city": "Rome", "forecast": "sunny"},
    }
    _lookup_ran_once(rig, "Paris", "Rome")

    sent = rig.messages(1)
    [assistant] = [m for m in sent if m["role"] == "assistant"]
    assert sorted(c["id"] for c in assistant["tool_calls"]) == ["call_paris", "call_rome"]
    tools = sent[sent.index(assistant) + 1 :]
    assert [m["role"] for m in tools] == ["tool", "tool"]
    assert {m["tool_call_id"]: json.loads(m["content"]) for m in tools} == outputs


def test_a_client_tool_call_ends_the_turn_and_its_output_reaches_the_upstream(
    serve: Serve,
) -> None:
    rig = serve()
    rig.fake.push(tool_calls(("call_oslo", "get_weather", '{"city":"Oslo"}')))

    first = checked_response(
        rig.client.responses.create(model=MODEL, input="Weather in Oslo?", tools=[WEATHER])
    )

    assert first.status == "completed"
    [call] = dump(first)["output"]
    assert call["type"] == "function_call"
    assert (call["call_id"], call["name"]) == ("call_oslo", "get_weather")
    declared = {t["function"]["name"]: t["function"] for t in rig.fake.requests[0]["tools"]}
    assert declared["get_weather"]["parameters"] == WEATHER["parameters"]
    assert "lookup" in declared  # server tools are offered too

    rig.fake.push(text("Cold in Oslo."))
    second = checked_response(
        rig.client.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": "call_oslo", "output": "-3C"}],
            tools=[WEATHER],
        )
    )

    assert second.status == "completed"
    assert second.output_text == "Cold in Oslo."
    assert rig.messages(1) == [
        {"role": "user", "content": "Weather in Oslo?"},
        _tool_turn("call_oslo", "get_weather", '{"city":"Oslo"}'),
        {"role": "tool", "tool_call_id": "call_oslo", "content": "-3C"},
    ]


def test_server_and_client_calls_in_one_step_keep_the_history_tool_consistent(
    serve: Serve,
) -> None:
    rig = serve()
    rig.fake.push(tool_calls(PARIS, ("call_oslo", "get_weather", '{"city":"Oslo"}')))

    first = checked_response(
        rig.client.responses.create(model=MODEL, input="Paris and Oslo?", tools=[WEATHER])
    )

    assert first.status == "completed"
    data = dump(first)
    assert sorted(_output_types(data)) == ["function_call", "function_call", "function_call_output"]
    [answered] = [i for i in data["output"] if i["type"] == "function_call_output"]
    assert answered["call_id"] == "call_paris"
    _lookup_ran_once(rig, "Paris")

    rig.fake.push(text("Sunny and cold."))
    second = checked_response(
        rig.client.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": "call_oslo", "output": "-3C"}],
            tools=[WEATHER],
        )
    )

    assert second.status == "completed"
    sent = rig.messages(1)
    [assistant] = [m for m in sent if m["role"] == "assistant"]
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_paris", "call_oslo"]
    answers = sent[sent.index(assistant) + 1 :]
    assert sorted(m["tool_call_id"] for m in answers) == ["call_oslo", "call_paris"]
    assert all(m["role"] == "tool" for m in answers)
    _lookup_ran_once(rig, "Paris")


# -- delivery retries (G6) --------------------------------------------------------------

DELIVERY_FAILURES = [
    pytest.param(fault(503), (), id="http-503"),
    pytest.param(fault(502, {"Retry-After": "0"}), (), id="http-502-retry-after-0"),
    pytest.param(reset(), (), id="connection-reset"),
    pytest.param(stall(5), ("--upstream-timeout", "0.5"), id="read-timeout"),
    pytest.param(reset_mid("partial answer"), (), id="reset-mid-stream"),
]


@pytest.mark.parametrize(("failure", "args"), DELIVERY_FAILURES)
def test_a_failed_delivery_is_retried_without_running_the_tool_again(
    serve: Serve, failure: Turn, args: tuple[str, ...]
) -> None:
    rig = serve(*args)
    rig.fake.push(tool_calls(PARIS), failure, text("done"))

    events = post_stream(rig.http, model=MODEL, input="Weather in Paris?", background=True)

    final = _terminal(events)
    assert final["status"] == "completed", final["error"]
    _lookup_ran_once(rig, "Paris")
    assert len(rig.fake.requests) == 3
    assert rig.fake.requests[2] == rig.fake.requests[1], "the retry must resend the same request"
    kinds = _output_types(final)
    assert kinds[:2] == ["function_call", "function_call_output"]
    assert kinds[-1] == "message"
    assert final["output"][-1]["status"] == "completed"
    assert _message_text(final["output"][-1]) == "done"
    if failure.kind == "reset_mid":
        cut = final["output"][2]
        assert kinds == ["function_call", "function_call_output", "message", "message"]
        assert cut["status"] == "incomplete"
        assert cut["content"] == [], "a cut message the retry did not continue is no answer"
        assert Response.model_validate(final).output_text == "done"
        closed = [
            e["item"]
            for e in events
            if e["type"] == "response.output_item.done" and e["output_index"] == 2
        ]
        assert [item["status"] for item in closed] == ["incomplete"]
        assert "partial" not in json.dumps(rig.fake.requests[2])
    else:
        assert len(kinds) == 3

    polled = checked_response(rig.client.responses.retrieve(final["id"]))
    assert dump(polled)["output"] == final["output"]
    assert checked_events(_get_stream(rig.http, final["id"])) == events


def _get_stream(http: httpx.Client, response_id: str) -> list[dict[str, Any]]:
    with http.stream("GET", f"/v1/responses/{response_id}", params={"stream": "true"}) as r:
        r.read()
    assert r.status_code == 200, r.text
    return parse_sse(r.text)


RETRY_AFTER = [
    pytest.param({"Retry-After": "1"}, 0.9, id="retry-after-seconds"),
    pytest.param({"retry-after-ms": "800"}, 0.7, id="retry-after-ms"),
]


@pytest.mark.parametrize(("headers", "at_least"), RETRY_AFTER)
def test_a_429_is_retried_no_sooner_than_retry_after(
    serve: Serve, headers: dict[str, str], at_least: float
) -> None:
    rig = serve()
    rig.fake.push(fault(429, headers), text("after the wait"))

    response = checked_response(rig.client.responses.create(model=MODEL, input="Hi"))

    assert response.status == "completed"
    assert response.output_text == "after the wait"
    first, second = rig.fake.arrivals
    assert second - first >= at_least, f"retried after {second - first:.3f}s"


EXHAUSTED = [
    pytest.param(503, "server_error", id="http-503"),
    pytest.param(429, "rate_limit_exceeded", id="http-429"),
]


@pytest.mark.parametrize(("status", "code"), EXHAUSTED)
def test_spent_retries_fail_the_response_with_the_last_error(
    serve: Serve, status: int, code: str
) -> None:
    rig = serve("--model-retries", "2")
    rig.fake.push(fault(status), fault(status), fault(status), text("too late"))

    response = checked_response(rig.client.responses.create(model=MODEL, input="Hi"))

    assert response.status == "failed"
    assert response.error is not None
    assert response.error.code == code
    assert f"HTTP {status}" in response.error.message
    assert len(rig.fake.requests) == 3, "two retries, then no more"
    assert response.output == []


def test_spent_retries_keep_the_recorded_tool_result(serve: Serve) -> None:
    rig = serve("--model-retries", "2")
    rig.fake.push(tool_calls(PARIS), fault(503), fault(503), fault(503), text("too late"))

    created = rig.client.responses.create(model=MODEL, input="Paris?", background=True)
    response = checked_response(wait_terminal(rig.client, created.id))

    assert response.status == "failed"
    assert response.error is not None
    assert response.error.code == "server_error"
    assert "HTTP 503" in response.error.message
    data = dump(response)
    assert _output_types(data) == ["function_call", "function_call_output"]
    assert json.loads(data["output"][1]["output"]) == SUNNY_PARIS
    assert len(rig.fake.requests) == 4
    assert rig.fake.requests[1] == rig.fake.requests[2] == rig.fake.requests[3]
    _lookup_ran_once(rig, "Paris")


# -- bad upstream output ----------------------------------------------------------------


NOT_RETRIED = [
    pytest.param(malformed(), "server_error", "malformed output", id="malformed-output"),
    pytest.param(fault(400), "invalid_prompt", "HTTP 400", id="http-400"),
    pytest.param(fault(401), "server_error", "HTTP 401", id="http-401"),
]


@pytest.mark.parametrize(("failure", "code", "says"), NOT_RETRIED)
def test_a_bad_upstream_answer_fails_the_response_clearly_without_retrying(
    serve: Serve, failure: Turn, code: str, says: str
) -> None:
    rig = serve(tools=False)
    rig.fake.push(failure, text("never asked"))

    response = checked_response(rig.client.responses.create(model=MODEL, input="Hi"))

    assert response.status == "failed"
    assert response.error is not None
    assert response.error.code == code
    assert says in response.error.message
    assert len(rig.fake.requests) == 1, "a non-retryable failure is not retried"


def test_tool_calls_without_ids_get_distinct_call_ids(serve: Serve) -> None:
    """An upstream that omits tool call ids (as some local servers do) must not make two
    steps' calls share one call id: the second would reuse the first's journaled output
    instead of running, and the history would pair outputs with the wrong calls."""
    rig = serve()
    rig.fake.push(
        tool_calls(("", "lookup", '{"city":"Paris"}')),
        tool_calls(("", "lookup", '{"city":"Rome"}')),
        text("Sunny in both."),
    )

    response = checked_response(rig.client.responses.create(model=MODEL, input="Paris, Rome?"))

    assert response.status == "completed", response.error
    data = dump(response)
    call_ids = [i["call_id"] for i in data["output"] if i["type"] == "function_call"]
    assert len(call_ids) == 2
    assert len(set(call_ids)) == 2, call_ids
    outputs = [json.loads(i["output"]) for i in data["output"] if "output" in i]
    assert [o["city"] for o in outputs] == ["Paris", "Rome"]
    _lookup_ran_once(rig, "Paris", "Rome")
    tool_ids = [m["tool_call_id"] for m in rig.messages(2) if m["role"] == "tool"]
    assert tool_ids == call_ids


def test_a_length_cut_ends_incomplete_with_max_output_tokens(serve: Serve) -> None:
    rig = serve(tools=False)
    rig.fake.push(text("cut short", finish_reason="length"))

    response = checked_response(
        rig.client.responses.create(model=MODEL, input="Hi", max_output_tokens=16)
    )

    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "cut short"
    assert rig.fake.requests[0]["max_tokens"] == 16


def test_a_turn_whose_every_retry_is_cut_reads_no_partial_answer(serve: Serve) -> None:
    rig = serve("--model-retries", "2")
    rig.fake.push(*[reset_mid("partial answer")] * 3)

    events = post_stream(rig.http, model=MODEL, input="Hello?", background=True)

    final = _terminal(events)
    assert final["status"] == "failed"
    assert len(rig.fake.requests) == 3
    [cut] = final["output"]
    assert (cut["status"], cut["content"]) == ("incomplete", []), "a failed turn has no answer"
    assert Response.model_validate(final).output_text == ""
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert deltas == ["partial"], "each retry continued the cut message; none repeated it"
    assert checked_events(_get_stream(rig.http, final["id"])) == events


def test_a_retry_that_repeats_the_cut_text_continues_the_same_message(serve: Serve) -> None:
    rig = serve()
    rig.fake.push(tool_calls(PARIS), reset_mid("partial answer"), text("partial answer"))

    events = post_stream(rig.http, model=MODEL, input="Weather in Paris?", background=True)

    final = _terminal(events)
    assert final["status"] == "completed", final["error"]
    assert _output_types(final) == ["function_call", "function_call_output", "message"]
    assert Response.model_validate(final).output_text == "partial answer"
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == "partial answer", "the retry sends only what was not sent"
    assert checked_events(_get_stream(rig.http, final["id"])) == events


# -- through the openai SDK -------------------------------------------------------------


def test_the_sdk_stream_of_a_tool_turn_with_a_retry_is_well_formed(serve: Serve) -> None:
    rig = serve()
    rig.fake.push(tool_calls(PARIS), reset_mid("partial answer"), text("Sunny in Paris."))

    with rig.client.responses.create(model=MODEL, input="Paris?", stream=True) as stream:
        events = checked_events(sdk_events(stream))

    assert types(events)[-1] == "response.completed"
    final = Response.model_validate(_terminal(events))
    checked_response(final)
    assert final.output[-1].type == "message"
    _lookup_ran_once(rig, "Paris")


def test_sdk_background_polling_sees_well_formed_responses(serve: Serve) -> None:
    rig = serve("--upstream-timeout", "1")
    # The stall keeps the response running for a second, long enough to be polled.
    rig.fake.push(tool_calls(PARIS), stall(5), text("Sunny in Paris."))

    created = checked_response(
        rig.client.responses.create(model=MODEL, input="Paris?", background=True)
    )
    assert created.status in ("queued", "in_progress")
    running = checked_response(wait_status(rig.client, created.id, "in_progress"))
    assert running.status == "in_progress"
    done = checked_response(wait_terminal(rig.client, created.id))

    assert done.status == "completed", done.error
    assert done.output_text == "Sunny in Paris."
    _lookup_ran_once(rig, "Paris")


def test_a_cancel_does_not_wait_for_a_retry_s_backoff(serve: Serve) -> None:
    """A 429's Retry-After may put the retry a minute off: a cancel meanwhile ends the
    response at once, and the retry is never sent."""
    rig = serve("--cancel-wait", "5")
    rig.fake.push(fault(429, {"Retry-After": "30"}), text("too late"))
    job = rig.client.responses.create(model=MODEL, input="Hi", background=True)
    for _ in range(200):  # bounded: until the first attempt was refused
        if rig.fake.arrivals:
            break
        time.sleep(0.02)

    cancelled = rig.client.responses.cancel(job.id)

    assert cancelled.status == "cancelled"
    assert len(rig.fake.requests) == 1


def test_a_graceful_shutdown_does_not_wait_for_a_retry_s_backoff(
    start_server: StartServer, new_store: NewStore, fake_upstream: FakeUpstream
) -> None:
    """A drain pauses a turn waiting out a model retry's backoff at once (a safe point:
    nothing of the failed call was kept) and hands it over; it does not keep the process
    alive for the Retry-After, however long the grace period allows."""
    db = new_store("shared")
    cli = ("--upstream-base-url", fake_upstream.url, "--shutdown-grace", "60")
    first = start_server(*cli, db=db)
    fake_upstream.push(fault(429, {"Retry-After": "60"}), text("after the hand-over"))
    job = httpx.post(
        f"{first.url}/v1/responses",
        json={"model": MODEL, "input": "Hi", "background": True},
        timeout=30,
    ).json()
    wait_until(lambda: bool(fake_upstream.arrivals), "the first attempt")

    assert first.stop(signal.SIGTERM, timeout=20) == 0, "exited without waiting 60 s"
    survivor = start_server(*cli, db=db)
    final = wait_terminal(survivor.url, job["id"])

    assert final["status"] == "completed", final["error"]
    assert len(fake_upstream.requests) == 2
