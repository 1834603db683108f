"""Cancel (docs/guarantees.md G9, docs/protocol.md section 12) and delete of responses."""

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
    get_stream,
    types,
)
from tests.support.schemas import validate_error_envelope
from tests.support.stream_rules import parse_sse
from tests.support.waiting import wait_status, wait_terminal

# Long enough (200 x 20 ms = 4 s) never to finish before the test cancels it.
LONG = "cancel me [[words 200]] [[delay 20]]"

CLIENTS = [
    pytest.param("client", id="client"),
    pytest.param("strict_client", id="strict_client"),
]


@pytest.fixture(params=CLIENTS)
def sdk(request: pytest.FixtureRequest) -> openai.OpenAI:
    sdk: openai.OpenAI = request.getfixturevalue(request.param)
    return sdk


def _running(sdk: openai.OpenAI) -> str:
    """A background response that is in progress (and would run for seconds)."""
    created = sdk.responses.create(model=MODEL, input=LONG, background=True)
    wait_status(sdk, created.id, "in_progress")
    return created.id


def _queued(sdk: openai.OpenAI) -> tuple[str, str]:
    """(running id, queued id): a follow-up of a running response waits in its lane."""
    running = sdk.responses.create(model=MODEL, input=SLOW, background=True)
    queued = sdk.responses.create(
        model=MODEL, input="after [[words 2]]", background=True, previous_response_id=running.id
    )
    assert queued.status == "queued"
    return running.id, queued.id


# -- cancel ------------------------------------------------------------------------------


def test_cancel_a_running_background_response(sdk: openai.OpenAI) -> None:
    response_id = _running(sdk)

    cancelled = checked_response(sdk.responses.cancel(response_id))

    assert cancelled.id == response_id
    assert cancelled.status == "cancelled"
    assert cancelled.completed_at is None
    assert cancelled.error is None
    assert dump(sdk.responses.retrieve(response_id)) == dump(cancelled)


def test_cancel_a_queued_background_response(sdk: openai.OpenAI, http: httpx.Client) -> None:
    running_id, queued_id = _queued(sdk)

    cancelled = checked_response(sdk.responses.cancel(queued_id))

    assert cancelled.status == "cancelled"
    assert cancelled.output == []
    assert wait_terminal(sdk, running_id).status == "completed"
    # The lane moved on without running the cancelled turn.
    assert dump(sdk.responses.retrieve(queued_id)) == dump(cancelled)
    events = get_stream(http, queued_id)
    assert types(events) == ["response.created", "response.queued", "response.failed"]
    assert events[-1]["response"]["status"] == "cancelled"


def test_cancel_again_returns_the_same_object(sdk: openai.OpenAI) -> None:
    response_id = _running(sdk)
    first = sdk.responses.cancel(response_id)

    second = checked_response(sdk.responses.cancel(response_id))

    assert second.status == "cancelled"
    assert dump(second) == dump(first)


def test_a_cancelled_stream_ends_with_response_failed_status_cancelled(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    with http.stream(
        "POST",
        "/v1/responses",
        json={"model": MODEL, "input": LONG, "background": True, "stream": True},
    ) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        response_id = ""
        body: list[str] = []
        for line in lines:
            body.append(line)
            if line.startswith("data:") and '"response.output_text.delta"' in line:
                break
        events_so_far = parse_sse("\n".join(body) + "\n\n")
        response_id = events_so_far[0]["response"]["id"]
        client.responses.cancel(response_id)
        body.extend(lines)
    events = checked_events(parse_sse("\n".join(body) + "\n"))

    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["status"] == "cancelled"
    assert events[-1]["response"]["error"] is None
    assert get_stream(http, response_id) == events
    assert events[-1]["response"] == dump(client.responses.retrieve(response_id))


def test_a_cancelled_sdk_stream_ends_with_response_failed(sdk: openai.OpenAI) -> None:
    response_id = _running(sdk)
    sdk.responses.cancel(response_id)

    with sdk.responses.retrieve(response_id, stream=True) as stream:
        events = checked_events([dump(e) for e in stream])

    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["status"] == "cancelled"


TERMINAL_REFUSALS = [
    pytest.param("[[words 2]]", {}, "Cannot cancel a completed response.", id="completed"),
    pytest.param("[[fail]]", {}, "Cannot cancel a failed response.", id="failed"),
    pytest.param(
        "[[words 30]]",
        {"max_output_tokens": 16},
        "Cannot cancel an incomplete response.",
        id="incomplete",
    ),
]


@pytest.mark.parametrize(("text", "extra", "message"), TERMINAL_REFUSALS)
def test_cancel_of_a_finished_background_response_is_refused(
    sdk: openai.OpenAI, text: str, extra: dict[str, int], message: str
) -> None:
    created = sdk.responses.create(model=MODEL, input=text, background=True, **extra)
    before = wait_terminal(sdk, created.id)

    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.cancel(created.id)

    assert caught.value.status_code == 400
    assert caught.value.type == "invalid_request_error"
    assert caught.value.message == f"Error code: 400 - {message}"
    assert caught.value.request_id is not None
    validate_error_envelope({"error": caught.value.body})
    assert dump(sdk.responses.retrieve(created.id)) == dump(before)


def test_cancel_of_a_foreground_response_is_refused(sdk: openai.OpenAI) -> None:
    created = sdk.responses.create(model=MODEL, input="[[words 2]]")

    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.cancel(created.id)

    assert caught.value.message == "Error code: 400 - Cannot cancel a synchronous response."


def test_cancel_of_an_unknown_response_is_not_found(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        sdk.responses.cancel("resp_unknown")

    assert caught.value.message == "Error code: 404 - Response with id 'resp_unknown' not found."
    assert caught.value.request_id is not None


# -- delete ------------------------------------------------------------------------------


def test_delete_then_the_response_is_gone(sdk: openai.OpenAI, http: httpx.Client) -> None:
    created = sdk.responses.create(model=MODEL, input="[[words 2]]")

    assert sdk.responses.delete(created.id) is None

    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.input_items.list(created.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.cancel(created.id)
    with pytest.raises(openai.NotFoundError) as again:
        sdk.responses.delete(created.id)
    assert again.value.message == f"Error code: 404 - Response with id '{created.id}' not found."


def test_delete_answers_with_a_deleted_marker(client: openai.OpenAI, http: httpx.Client) -> None:
    created = client.responses.create(model=MODEL, input="[[words 2]]", background=True)
    wait_terminal(client, created.id)

    answer = http.delete(f"/v1/responses/{created.id}")

    assert answer.status_code == 200
    assert answer.json() == {"id": created.id, "object": "response.deleted", "deleted": True}
    assert http.get(f"/v1/responses/{created.id}", params={"stream": "true"}).status_code == 404


def test_a_deleted_response_cannot_be_continued(sdk: openai.OpenAI) -> None:
    created = sdk.responses.create(model=MODEL, input="[[words 2]]")
    sdk.responses.delete(created.id)

    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(model=MODEL, input="more", previous_response_id=created.id)

    assert caught.value.code == "previous_response_not_found"


def test_delete_of_a_running_response_is_refused_until_it_ends(sdk: openai.OpenAI) -> None:
    response_id = _running(sdk)

    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.delete(response_id)

    assert caught.value.status_code == 400
    assert sdk.responses.retrieve(response_id).status in ("in_progress", "completed")
    sdk.responses.cancel(response_id)
    sdk.responses.delete(response_id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(response_id)


def test_delete_of_an_unknown_response_is_not_found(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        sdk.responses.delete("resp_unknown")

    assert caught.value.request_id is not None


def test_cancel_racing_the_end_of_a_turn_never_reports_another_status(
    client: openai.OpenAI,
) -> None:
    """Regression: a cancel that reached a short turn just as it ended answered 200 with
    `status: "completed"`. It must either cancel (200 cancelled) or say the response had
    already ended (400), and what it says must agree with the stored response."""
    for _ in range(15):
        created = client.responses.create(model=MODEL, input="a b [[words 2]]", background=True)
        try:
            answer = client.responses.cancel(created.id)
        except openai.BadRequestError as refused:
            assert refused.message == "Error code: 400 - Cannot cancel a completed response."
            assert client.responses.retrieve(created.id).status == "completed"
        else:
            assert answer.status == "cancelled"
            assert dump(client.responses.retrieve(created.id)) == dump(answer)
