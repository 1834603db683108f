"""Background mode (docs/protocol.md section 8): accepted at once, polled to a terminal
status, streamed and replayed from the durable event log."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from tests.integration._responses_support import (
    MODEL,
    SLOW,
    SLOW_WORDS,
    checked_response,
    dump,
    get_stream,
    post_stream,
    text_of,
    types,
)
from tests.support.waiting import DEADLINE, TERMINAL, wait_status, wait_terminal

CLIENTS = [
    pytest.param("client", id="client"),
    pytest.param("strict_client", id="strict_client"),
]


@pytest.fixture(params=CLIENTS)
def sdk(request: pytest.FixtureRequest) -> openai.OpenAI:
    sdk: openai.OpenAI = request.getfixturevalue(request.param)
    return sdk


def test_polling_sees_only_forward_statuses_until_completed(sdk: openai.OpenAI) -> None:
    created = sdk.responses.create(model=MODEL, input=SLOW, background=True)
    assert created.status == "queued"

    seen = [created.status]
    lengths = [0]
    end = time.monotonic() + DEADLINE
    while seen[-1] not in TERMINAL:
        assert time.monotonic() < end, f"still {seen[-1]} after {DEADLINE}s"
        polled = checked_response(sdk.responses.retrieve(created.id))
        seen.append(polled.status)
        lengths.append(len(polled.output_text.split()))
        time.sleep(0.02)  # polling interval

    order = ["queued", "in_progress", "completed"]
    assert [order.index(s) for s in seen] == sorted(order.index(s) for s in seen)
    assert "in_progress" in seen, "a 0.7 s answer was never seen running"
    assert lengths == sorted(lengths), "the visible output shrank while polling"
    assert lengths[-1] == SLOW_WORDS


def test_a_running_background_response_is_retrievable_while_it_runs(
    sdk: openai.OpenAI,
) -> None:
    created = sdk.responses.create(model=MODEL, input=SLOW, background=True)

    running = checked_response(wait_status(sdk, created.id, "in_progress"))

    assert running.background is True
    assert running.completed_at is None
    assert running.error is None
    final = wait_terminal(sdk, created.id)
    assert final.status == "completed"
    assert final.created_at == running.created_at


def test_background_result_matches_its_stream(sdk: openai.OpenAI, http: httpx.Client) -> None:
    created = sdk.responses.create(model=MODEL, input="match me [[words 4]]", background=True)
    final = checked_response(wait_terminal(sdk, created.id))

    events = get_stream(http, created.id)

    assert events[0]["response"]["id"] == created.id
    assert events[0]["response"]["status"] == "queued"
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"] == dump(final)
    assert final.output_text == "match me match me"


def test_background_stream_lifecycle_order(http: httpx.Client) -> None:
    events = post_stream(http, input="order [[words 2]]", background=True)

    assert types(events) == [
        "response.created",
        "response.queued",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["response"]["status"] for e in events if "response" in e] == [
        "queued",
        "queued",
        "in_progress",
        "completed",
    ]
    assert all(e["response"]["background"] is True for e in events if "response" in e)


def test_background_max_output_tokens_replay_ends_incomplete(
    sdk: openai.OpenAI, http: httpx.Client
) -> None:
    created = sdk.responses.create(
        model=MODEL, input="long [[words 40]]", max_output_tokens=16, background=True
    )
    final = checked_response(wait_terminal(sdk, created.id))

    assert final.status == "incomplete"
    assert final.incomplete_details is not None
    assert final.incomplete_details.reason == "max_output_tokens"
    events = get_stream(http, created.id)
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"] == dump(final)
    assert len(text_of(events[-1]["response"]).split()) == 16


def test_background_failure_is_durable_and_replayed(sdk: openai.OpenAI, http: httpx.Client) -> None:
    created = sdk.responses.create(model=MODEL, input="[[fail]]", background=True)
    final = checked_response(wait_terminal(sdk, created.id))

    assert final.status == "failed"
    assert final.error is not None
    assert final.error.code == "server_error"
    events = get_stream(http, created.id)
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == "server_error"
    assert events[-1]["response"] == dump(final)


def test_background_requires_store(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(model=MODEL, input="hi", background=True, store=False)

    assert caught.value.param == "store"
    assert caught.value.message == "Error code: 400 - Background mode requires store=true."


def test_many_background_responses_all_complete(sdk: openai.OpenAI) -> None:
    ids = [
        sdk.responses.create(
            model=MODEL, input=f"item{i} [[words 3]] [[delay 5]]", background=True
        ).id
        for i in range(8)
    ]

    finals = [wait_terminal(sdk, response_id) for response_id in ids]

    assert [f.status for f in finals] == ["completed"] * 8
    assert [f.output_text for f in finals] == [f"item{i} item{i} item{i}" for i in range(8)]


def test_dropping_a_background_stream_does_not_stop_the_response(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    with client.responses.create(model=MODEL, input=SLOW, background=True, stream=True) as stream:
        response_id = ""
        for event in stream:
            if event.type == "response.created":
                response_id = event.response.id
            if event.type == "response.output_text.delta":
                break
    # The connection is closed; the turn goes on and its whole stream is kept.
    final = wait_terminal(client, response_id)

    assert final.status == "completed"
    assert len(final.output_text.split()) == SLOW_WORDS
    assert get_stream(http, response_id)[-1]["response"] == dump(final)
