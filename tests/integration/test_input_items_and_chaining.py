"""`responses.input_items.list` paging, and `previous_response_id` chaining.

The embedded model echoes the words of the last user message and reports the number
of words in its whole input as `usage.input_tokens`, so a test can see how much
history a turn was given.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.integration._responses_support import MODEL, SLOW, SLOW_WORDS, checked_response
from tests.support.schemas import validate_item_list
from tests.support.waiting import wait_terminal

CLIENTS = [
    pytest.param("client", id="client"),
    pytest.param("strict_client", id="strict_client"),
]


@pytest.fixture(params=CLIENTS)
def sdk(request: pytest.FixtureRequest) -> openai.OpenAI:
    sdk: openai.OpenAI = request.getfixturevalue(request.param)
    return sdk


FIVE_ITEMS: list[Any] = [
    {"role": "developer", "content": "answer briefly"},
    {"role": "user", "content": "first question"},
    {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "first answer", "annotations": []}],
    },
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "second"}]},
    {"role": "user", "content": "third one [[words 2]]"},
]


def _texts(items: list[Any]) -> list[str]:
    return ["".join(part.text for part in item.content) for item in items]


@pytest.fixture
def five(client: openai.OpenAI) -> str:
    response = client.responses.create(model=MODEL, input=FIVE_ITEMS)
    assert response.status == "completed"
    assert response.output_text == "third one"
    return response.id


# -- input_items --------------------------------------------------------------------------

ORDERS = [pytest.param("asc", id="asc"), pytest.param("desc", id="desc")]


@pytest.mark.parametrize("order", ORDERS)
def test_input_items_auto_paging_by_two(sdk: openai.OpenAI, five: str, order: str) -> None:
    expected = [
        "answer briefly",
        "first question",
        "first answer",
        "second",
        "third one [[words 2]]",
    ]
    if order == "desc":
        expected.reverse()

    first = sdk.responses.input_items.list(five, limit=2, order=order)  # type: ignore[arg-type]
    pages = list(first.iter_pages())
    items = list(sdk.responses.input_items.list(five, limit=2, order=order))  # type: ignore[arg-type]

    assert [len(page.data) for page in pages] == [2, 2, 1]
    assert [page.has_more for page in pages] == [True, True, False]
    assert [page.first_id for page in pages] == [page.data[0].id for page in pages]
    assert [page.last_id for page in pages] == [page.data[-1].id for page in pages]
    assert _texts(items) == expected
    ids = [item.id for item in items]
    assert ids == [item.id for page in pages for item in page.data]
    assert len(set(ids)) == 5
    assert all(item.type == "message" for item in items)
    assert [item.role for item in items] == (
        ["developer", "user", "assistant", "user", "user"]
        if order == "asc"
        else ["user", "user", "assistant", "user", "developer"]
    )


def test_input_items_default_to_descending_order(sdk: openai.OpenAI, five: str) -> None:
    default = sdk.responses.input_items.list(five)
    ascending = sdk.responses.input_items.list(five, order="asc")

    assert [i.id for i in default.data] == [i.id for i in reversed(ascending.data)]
    assert default.has_more is False


def test_input_items_of_a_string_input_are_one_user_message(sdk: openai.OpenAI) -> None:
    response = sdk.responses.create(model=MODEL, input="just text [[words 2]]")

    [item] = sdk.responses.input_items.list(response.id).data

    assert item.type == "message"
    assert item.role == "user"
    assert _texts([item]) == ["just text [[words 2]]"]


def test_replayed_reasoning_and_annotations_are_stored_within_the_item_list_schema(
    http: httpx.Client,
) -> None:
    """A reasoning item's parts and an answer's annotations and logprobs, in OpenAI's
    shapes (anything else is a 400: tests/integration/test_bad_input.py), are stored and
    listed as they came."""
    logprob = {"token": "a", "logprob": -0.5, "bytes": [97]}
    said = {
        "type": "output_text",
        "text": "a",
        "annotations": [
            {
                "type": "url_citation",
                "url": "https://x.test",
                "start_index": 0,
                "end_index": 1,
                "title": "X",
            },
            {"type": "file_citation", "file_id": "file-1", "index": 0, "filename": "a.txt"},
            {
                "type": "container_file_citation",
                "container_id": "cntr_1",
                "file_id": "file-2",
                "start_index": 0,
                "end_index": 1,
                "filename": "b.txt",
            },
            {"type": "file_path", "file_id": "file-3", "index": 1},
        ],
        "logprobs": [{**logprob, "top_logprobs": [logprob]}],
    }
    reasoning = {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "thought"}],
        "content": [{"type": "reasoning_text", "text": "thinking"}],
    }
    items = [reasoning, {"role": "assistant", "content": [said]}, {"role": "user", "content": "go"}]

    created = http.post("/v1/responses", json={"model": MODEL, "input": items})

    assert created.status_code == 200, created.text
    page = http.get(f"/v1/responses/{created.json()['id']}/input_items?order=asc").json()
    validate_item_list(page, "input_items")
    assert page["data"][0]["summary"] == reasoning["summary"]
    assert page["data"][1]["content"] == [said]


def test_input_items_after_an_unknown_item_is_refused(sdk: openai.OpenAI, five: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.input_items.list(five, after="msg_not_here")

    assert caught.value.param == "after"


def test_input_items_of_an_unknown_response_is_not_found(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        sdk.responses.input_items.list("resp_missing")


# -- previous_response_id -----------------------------------------------------------------


def _words(text: str) -> int:
    return len(text.split())


def test_chaining_grows_the_history_and_drops_instructions(sdk: openai.OpenAI) -> None:
    first_input = "alpha beta [[words 3]]"
    first = checked_response(
        sdk.responses.create(model=MODEL, input=first_input, instructions="be terse")
    )
    second_input = "gamma [[words 2]]"
    second = checked_response(
        sdk.responses.create(model=MODEL, input=second_input, previous_response_id=first.id)
    )
    third_input = "delta [[words 1]]"
    third = checked_response(
        sdk.responses.create(model=MODEL, input=third_input, previous_response_id=second.id)
    )

    assert first.instructions == "be terse"
    assert second.instructions is None
    assert third.instructions is None
    assert second.previous_response_id == first.id
    assert third.previous_response_id == second.id
    assert first.output_text == "alpha beta alpha"
    assert second.output_text == "gamma gamma"
    assert third.output_text == "delta"
    assert first.usage is not None and second.usage is not None and third.usage is not None
    assert first.usage.input_tokens == _words(first_input)
    # Each turn sees every earlier input and output, then its own input.
    assert second.usage.input_tokens == (
        first.usage.input_tokens + first.usage.output_tokens + _words(second_input)
    )
    assert third.usage.input_tokens == (
        second.usage.input_tokens + second.usage.output_tokens + _words(third_input)
    )


def test_two_turns_can_fork_from_one_response(sdk: openai.OpenAI) -> None:
    root = sdk.responses.create(model=MODEL, input="root words [[words 2]]")

    left = sdk.responses.create(model=MODEL, input="left [[words 1]]", previous_response_id=root.id)
    right = sdk.responses.create(
        model=MODEL, input="right side [[words 1]]", previous_response_id=root.id
    )

    assert left.output_text == "left"
    assert right.output_text == "right"
    assert left.usage is not None and right.usage is not None
    assert right.usage.input_tokens == left.usage.input_tokens + 1


def test_a_background_turn_can_continue_a_background_turn(sdk: openai.OpenAI) -> None:
    first = sdk.responses.create(model=MODEL, input="one two [[words 2]]", background=True)
    first_final = wait_terminal(sdk, first.id)

    second = sdk.responses.create(
        model=MODEL, input="three [[words 1]]", background=True, previous_response_id=first.id
    )
    second_final = checked_response(wait_terminal(sdk, second.id))

    assert second_final.status == "completed"
    assert first_final.usage is not None and second_final.usage is not None
    assert second_final.usage.input_tokens == (
        first_final.usage.input_tokens + first_final.usage.output_tokens + 3
    )


def test_a_follow_up_of_a_running_response_waits_for_its_whole_answer(
    sdk: openai.OpenAI,
) -> None:
    """docs/guarantees.md, Lane: a turn chained to a response that is not yet terminal joins
    its lane and runs after it, with the finished turn in its history."""
    running = sdk.responses.create(model=MODEL, input=SLOW, background=True)
    follow_up = sdk.responses.create(
        model=MODEL, input="next [[words 1]]", background=True, previous_response_id=running.id
    )

    first = wait_terminal(sdk, running.id)
    second = wait_terminal(sdk, follow_up.id)

    assert first.status == "completed"
    assert second.status == "completed"
    assert first.usage is not None and second.usage is not None
    assert first.usage.output_tokens == SLOW_WORDS
    assert second.usage.input_tokens == first.usage.input_tokens + SLOW_WORDS + 3
    assert second.created_at >= first.created_at


def test_unknown_previous_response_is_a_bad_request(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(model=MODEL, input="hi", previous_response_id="resp_nope")

    error = caught.value
    assert error.status_code == 400
    assert error.param == "previous_response_id"
    assert error.code == "previous_response_not_found"
    assert error.message == "Error code: 400 - Previous response with id 'resp_nope' not found."
    assert error.request_id is not None


def test_previous_response_and_conversation_cannot_be_combined(sdk: openai.OpenAI) -> None:
    root = sdk.responses.create(model=MODEL, input="root [[words 1]]")
    conversation = sdk.conversations.create()

    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(
            model=MODEL,
            input="hi",
            previous_response_id=root.id,
            conversation=conversation.id,
        )

    assert caught.value.param in ("conversation", "previous_response_id")
