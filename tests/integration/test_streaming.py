"""Streams through the SDK's helpers and resumes: `responses.stream(...)`,
`retrieve(stream=True, starting_after=N)`, replays and live followers (G7)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest

from tests.integration._responses_support import (
    MODEL,
    SLOW,
    SLOW_WORDS,
    Event,
    checked_events,
    checked_response,
    dump,
    get_stream,
    post_stream,
    sdk_events,
    text_of,
    types,
    unparsed,
)
from tests.support.schemas import validate_error_envelope
from tests.support.stream_rules import check_stream, parse_sse
from tests.support.waiting import wait_status

CLIENTS = [
    pytest.param("client", id="client"),
    pytest.param("strict_client", id="strict_client"),
]


@pytest.fixture(params=CLIENTS)
def sdk(request: pytest.FixtureRequest) -> openai.OpenAI:
    sdk: openai.OpenAI = request.getfixturevalue(request.param)
    return sdk


@pytest.fixture
def finished(http: httpx.Client) -> list[Event]:
    """The raw stream of a finished background response (16 events)."""
    events = post_stream(http, input="finished one [[words 6]]", background=True)
    assert events[-1]["type"] == "response.completed"
    return events


def test_stream_helper_gives_text_deltas_and_the_final_response(sdk: openai.OpenAI) -> None:
    with sdk.responses.stream(model=MODEL, input="foo bar baz [[words 5]]") as stream:
        events = [dump(event) for event in stream]
        final = stream.get_final_response()

    # The helper adds `snapshot` to deltas and `parsed` to output text: not server fields.
    checked_events([unparsed({k: v for k, v in e.items() if k != "snapshot"}) for e in events])
    snapshots = [e["snapshot"] for e in events if e["type"] == "response.output_text.delta"]
    assert snapshots[-1] == "foo bar baz foo bar"
    checked_response(final)
    assert final.status == "completed"
    assert final.output_text == "foo bar baz foo bar"
    assert final.id == events[0]["response"]["id"]
    assert unparsed(dump(final)) == dump(sdk.responses.retrieve(final.id))


def test_stream_helper_in_background_mode(sdk: openai.OpenAI) -> None:
    with sdk.responses.stream(model=MODEL, input="bg helper [[words 3]]", background=True) as s:
        final = s.get_final_response()

    checked_response(final)
    assert final.background is True
    assert final.output_text == "bg helper bg"


@pytest.mark.parametrize("where", ["after-first", "middle", "before-last", "after-last", "beyond"])
def test_retrieve_stream_resumes_after_starting_after(
    sdk: openai.OpenAI, http: httpx.Client, finished: list[Event], where: str
) -> None:
    last = finished[-1]["sequence_number"]
    after = {
        "after-first": 0,
        "middle": last // 2,
        "before-last": last - 1,
        "after-last": last,
        "beyond": last + 5,
    }[where]
    response_id = finished[0]["response"]["id"]

    with sdk.responses.retrieve(response_id, stream=True, starting_after=after) as stream:
        via_sdk = sdk_events(stream)
    raw = get_stream(http, response_id, starting_after=after)

    assert raw == finished[after + 1 :]
    assert via_sdk == raw
    if after >= last:
        assert raw == []


def test_replay_of_a_finished_background_response_equals_the_original(
    http: httpx.Client, finished: list[Event]
) -> None:
    response_id = finished[0]["response"]["id"]

    assert get_stream(http, response_id) == finished
    assert get_stream(http, response_id, starting_after=-1) == finished


def test_replay_of_a_background_response_created_without_stream(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    created = client.responses.create(model=MODEL, input="no stream [[words 3]]", background=True)
    wait_status(client, created.id, "completed")

    events = get_stream(http, created.id)

    assert types(events)[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert events[-1]["response"] == dump(client.responses.retrieve(created.id))


@pytest.mark.parametrize("after", [pytest.param(0, id="0"), pytest.param(7, id="7")])
def test_stream_helper_resumes_by_response_id(
    sdk: openai.OpenAI, finished: list[Event], after: int
) -> None:
    response_id = finished[0]["response"]["id"]

    with sdk.responses.stream(response_id=response_id, starting_after=after) as stream:
        events = [dump(event) for event in stream]
        final = stream.get_final_response()

    assert [e["sequence_number"] for e in events] == [
        e["sequence_number"] for e in finished[after + 1 :]
    ]
    assert final.id == response_id
    assert unparsed(dump(final)) == finished[-1]["response"]


def _follow(http: httpx.Client, response_id: str, after: int | None = None) -> list[Event]:
    params: dict[str, Any] = {"stream": "true"}
    if after is not None:
        params["starting_after"] = after
    with http.stream("GET", f"/v1/responses/{response_id}", params=params) as r:
        assert r.status_code == 200
        body = r.read().decode()
    return parse_sse(body)


def test_a_live_follower_sees_every_event_once_in_order(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    created = client.responses.create(model=MODEL, input=SLOW, background=True)

    live = checked_events(_follow(http, created.id))

    assert live[-1]["type"] == "response.completed"
    assert len(text_of(live[-1]["response"]).split()) == SLOW_WORDS
    assert live == get_stream(http, created.id)


def test_two_concurrent_followers_see_identical_streams(client: openai.OpenAI, server: Any) -> None:
    created = client.responses.create(model=MODEL, input=SLOW, background=True)

    def follow() -> list[Event]:
        with httpx.Client(base_url=server.url, timeout=30.0) as own:
            return _follow(own, created.id)

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(lambda _: follow(), range(2))

    checked_events(first)
    assert first == second
    assert first[-1]["type"] == "response.completed"


def test_a_follower_that_drops_mid_stream_resumes_from_its_last_event(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    created = client.responses.create(model=MODEL, input=SLOW, background=True)

    seen: list[Event] = []
    with client.responses.retrieve(created.id, stream=True) as stream:
        for event in stream:
            seen.append(dump(event))
            if event.type == "response.output_text.delta":
                break  # the client goes away while the response runs
    after = seen[-1]["sequence_number"]
    rest = checked_events(_follow(http, created.id, after), starting_after=after)

    whole = seen + rest
    check_stream(whole)
    assert whole == get_stream(http, created.id)
    assert rest[-1]["type"] == "response.completed"


def test_sdk_follower_with_starting_after_on_a_running_response(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    created = client.responses.create(model=MODEL, input=SLOW, background=True)
    wait_status(client, created.id, "in_progress")

    with client.responses.retrieve(created.id, stream=True, starting_after=2) as stream:
        events = checked_events(sdk_events(stream), starting_after=2)

    assert events[0]["sequence_number"] == 3
    assert events[-1]["type"] == "response.completed"
    assert events == get_stream(http, created.id)[3:]


def test_streaming_a_foreground_response_is_refused(sdk: openai.OpenAI) -> None:
    created = sdk.responses.create(model=MODEL, input="foreground [[words 2]]")

    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.retrieve(created.id, stream=True)

    assert caught.value.param == "stream"
    assert "background=true" in caught.value.message


BAD_STARTING_AFTER = [
    pytest.param("-5", "invalid_value", id="below-minus-one"),
    pytest.param("abc", "invalid_type", id="not-an-integer"),
]


@pytest.mark.parametrize(("value", "code"), BAD_STARTING_AFTER)
def test_a_bad_starting_after_is_refused(
    http: httpx.Client, finished: list[Event], value: str, code: str
) -> None:
    response_id = finished[0]["response"]["id"]

    answer = http.get(
        f"/v1/responses/{response_id}", params={"stream": "true", "starting_after": value}
    )

    assert answer.status_code == 400
    validate_error_envelope(answer.json())
    assert answer.json()["error"]["param"] == "starting_after"
    assert answer.json()["error"]["code"] == code


def test_streaming_an_unknown_response_is_not_found(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve("resp_nope", stream=True)


def test_a_stream_helper_on_a_failed_response_has_no_final_response(
    client: openai.OpenAI,
) -> None:
    with client.responses.stream(model=MODEL, input="[[fail]]") as stream:
        events = [dump(e) for e in stream]
        with pytest.raises(RuntimeError, match=r"response\.completed"):
            stream.get_final_response()

    assert events[-1]["type"] == "response.failed"


def test_foreground_stream_client_disconnect_cancels_the_response(
    client: openai.OpenAI,
) -> None:
    stream = client.responses.create(model=MODEL, input=SLOW, stream=True)
    response_id = ""
    for event in stream:
        if event.type == "response.created":
            response_id = event.response.id
        if event.type == "response.output_text.delta":
            break
    stream.close()

    final = wait_status(client, response_id, "cancelled")
    checked_response(final)


def test_concurrent_foreground_streams_do_not_mix(http: httpx.Client) -> None:
    words = ["apple", "banana", "cherry"]
    with ThreadPoolExecutor(len(words)) as pool:
        results = list(
            pool.map(lambda w: post_stream(http, input=f"{w} [[words 3]] [[delay 5]]"), words)
        )

    assert [text_of(r[-1]["response"]) for r in results] == [f"{w} {w} {w}" for w in words]
    assert len({r[0]["response"]["id"] for r in results}) == 3
