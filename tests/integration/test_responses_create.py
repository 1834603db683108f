"""`responses.create` through the real openai SDK: plain, streamed, background,
background + stream, budget and failure endings, and the SDK's error classes."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.integration._responses_support import (
    MODEL,
    SLOW,
    checked_events,
    checked_response,
    dump,
    post_stream,
    sdk_events,
    text_of,
    types,
)
from tests.support.schemas import validate_error_envelope
from tests.support.waiting import wait_terminal

CLIENTS = [
    pytest.param("client", id="client"),
    pytest.param("strict_client", id="strict_client"),
]


@pytest.fixture(params=CLIENTS)
def sdk(request: pytest.FixtureRequest) -> openai.OpenAI:
    """Each test runs with the default client and with a strictly validating one."""
    sdk: openai.OpenAI = request.getfixturevalue(request.param)
    return sdk


def test_plain_create_returns_a_completed_response(sdk: openai.OpenAI) -> None:
    response = checked_response(
        sdk.responses.create(model=MODEL, input="red green blue [[words 5]]")
    )

    assert response.id.startswith("resp_")
    assert response.object == "response"
    assert response.status == "completed"
    assert response.model == MODEL
    assert response.background is False
    assert response.error is None
    assert response.incomplete_details is None
    assert response.completed_at is not None
    assert response.output_text == "red green blue red green"
    [message] = response.output
    assert message.type == "message"
    assert message.role == "assistant"
    assert message.status == "completed"
    assert response.usage is not None
    assert response.usage.output_tokens == 5
    assert response.usage.total_tokens == response.usage.input_tokens + 5


def test_a_foreground_response_is_stored_and_retrievable(sdk: openai.OpenAI) -> None:
    created = sdk.responses.create(
        model=MODEL, input="keep me [[words 2]]", metadata={"k": "v"}, instructions="be brief"
    )

    retrieved = checked_response(sdk.responses.retrieve(created.id))

    assert dump(retrieved) == dump(created)
    assert retrieved.metadata == {"k": "v"}
    assert retrieved.instructions == "be brief"


def test_a_running_foreground_response_is_visible_as_in_progress(
    client: openai.OpenAI, strict_client: openai.OpenAI
) -> None:
    running = None
    with client.responses.create(model=MODEL, input=SLOW, stream=True) as stream:
        events = []
        for event in stream:
            events.append(dump(event))
            if event.type == "response.output_text.delta" and running is None:
                running = checked_response(
                    strict_client.responses.retrieve(events[0]["response"]["id"])
                )
        checked_events(events)

    assert running is not None
    assert running.status == "in_progress"
    assert running.background is False
    assert running.completed_at is None
    final = strict_client.responses.retrieve(running.id)
    assert final.status == "completed"
    assert dump(final) == events[-1]["response"]


def test_sdk_stream_is_well_formed_and_ends_completed(sdk: openai.OpenAI) -> None:
    with sdk.responses.create(model=MODEL, input="one two [[words 4]]", stream=True) as stream:
        events = checked_events(sdk_events(stream))

    assert types(events)[:2] == ["response.created", "response.in_progress"]
    assert events[0]["response"]["status"] == "in_progress"
    assert events[-1]["type"] == "response.completed"
    final = events[-1]["response"]
    assert text_of(final) == "one two one two"
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert "".join(deltas) == "one two one two"


def test_raw_stream_has_sse_framing_and_the_canonical_order(http: httpx.Client) -> None:
    events = post_stream(http, input="alpha beta [[words 2]]")

    assert types(events) == [
        "response.created",
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
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_background_create_returns_queued_at_once_then_completes(sdk: openai.OpenAI) -> None:
    created = checked_response(
        sdk.responses.create(model=MODEL, input="later please [[words 3]]", background=True)
    )

    assert created.background is True
    assert created.status in ("queued", "in_progress")
    assert created.output == []
    final = checked_response(wait_terminal(sdk, created.id))
    assert final.status == "completed"
    assert final.background is True
    assert final.output_text == "later please later"


def test_background_stream_starts_queued_and_ends_completed(sdk: openai.OpenAI) -> None:
    with sdk.responses.create(
        model=MODEL, input="in the back [[words 3]]", background=True, stream=True
    ) as stream:
        events = checked_events(sdk_events(stream))

    assert types(events)[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert events[0]["response"]["status"] == "queued"
    assert events[0]["response"]["background"] is True
    assert events[-1]["type"] == "response.completed"
    assert text_of(events[-1]["response"]) == "in the back"
    stored = checked_response(sdk.responses.retrieve(events[0]["response"]["id"]))
    assert dump(stored) == events[-1]["response"]


BUDGET = [
    pytest.param({}, id="foreground"),
    pytest.param({"background": True}, id="background"),
]


@pytest.mark.parametrize("mode", BUDGET)
def test_max_output_tokens_ends_incomplete(sdk: openai.OpenAI, mode: dict[str, bool]) -> None:
    created = sdk.responses.create(
        model=MODEL, input="many words here [[words 30]]", max_output_tokens=16, **mode
    )
    response = checked_response(wait_terminal(sdk, created.id))

    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.completed_at is None
    assert response.max_output_tokens == 16
    assert len(response.output_text.split()) == 16
    assert response.usage is not None
    assert response.usage.output_tokens == 16


@pytest.mark.parametrize("mode", BUDGET)
def test_max_output_tokens_stream_ends_with_response_incomplete(
    http: httpx.Client, mode: dict[str, bool]
) -> None:
    events = post_stream(http, input="many words [[words 30]]", max_output_tokens=16, **mode)

    assert events[-1]["type"] == "response.incomplete"
    final = events[-1]["response"]
    assert final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert len(text_of(final).split()) == 16


@pytest.mark.parametrize("mode", BUDGET)
def test_model_failure_ends_failed_with_server_error(
    sdk: openai.OpenAI, mode: dict[str, bool]
) -> None:
    created = sdk.responses.create(model=MODEL, input="break please [[fail]]", **mode)
    response = checked_response(wait_terminal(sdk, created.id))

    assert response.status == "failed"
    assert response.error is not None
    assert response.error.code == "server_error"
    assert response.error.message
    assert response.completed_at is None


@pytest.mark.parametrize("mode", BUDGET)
def test_model_failure_stream_ends_with_response_failed(
    http: httpx.Client, mode: dict[str, bool]
) -> None:
    events = post_stream(http, input="break please [[fail]]", **mode)

    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.failed"
    final = events[-1]["response"]
    assert final["status"] == "failed"
    assert final["error"]["code"] == "server_error"


def test_request_id_is_exposed_on_objects(sdk: openai.OpenAI) -> None:
    first = sdk.responses.create(model=MODEL, input="x [[words 1]]")
    second = sdk.responses.retrieve(first.id)

    assert first._request_id is not None
    assert first._request_id.startswith("req_")
    assert second._request_id is not None
    assert second._request_id != first._request_id


def test_unknown_response_raises_not_found_with_request_id(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        sdk.responses.retrieve("resp_does_not_exist")

    error = caught.value
    assert error.status_code == 404
    assert error.request_id is not None
    assert error.request_id.startswith("req_")
    assert error.request_id == error.response.headers["x-request-id"]
    assert error.type == "invalid_request_error"
    assert str(error) == "Error code: 404 - Response with id 'resp_does_not_exist' not found."
    validate_error_envelope({"error": error.body})


BAD_REQUESTS = [
    pytest.param(
        {"input": "hi", "extra_body": {"bogus": 1}},
        "bogus",
        "unknown_parameter",
        id="unknown-parameter",
    ),
    pytest.param(
        {"input": "hi", "background": True, "store": False},
        "store",
        "invalid_value",
        id="background-without-store",
    ),
    pytest.param(
        {"input": "hi", "max_output_tokens": 3},
        "max_output_tokens",
        None,
        id="max-output-tokens-below-16",
    ),
    pytest.param({}, "input", "missing_required_parameter", id="missing-input"),
]


@pytest.mark.parametrize(("kwargs", "param", "code"), BAD_REQUESTS)
def test_invalid_create_raises_bad_request_naming_the_parameter(
    sdk: openai.OpenAI, kwargs: dict[str, object], param: str, code: str | None
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(model=MODEL, **kwargs)  # type: ignore[call-overload]

    error = caught.value
    assert error.status_code == 400
    assert error.param == param
    if code is not None:
        assert error.code == code
    assert error.request_id is not None
    validate_error_envelope({"error": error.body})


def test_a_stream_create_error_is_raised_before_streaming(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(model=MODEL, input="hi", stream=True, background=True, store=False)

    assert caught.value.param == "store"
    assert "Background mode requires store=true." in str(caught.value)
