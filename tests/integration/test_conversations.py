"""Conversations through the real openai SDK against a real server process.

Every `client.conversations` call (docs/protocol.md section 2), and
`responses.create(conversation=...)` appending each turn's input and output to the
conversation (section 3, `conversation`).
The embedded model counts usage in words of the whole history it sees, which makes
"the second turn saw the first" observable from the outside.
"""

from __future__ import annotations

import time
from typing import Any

import openai
import pytest
from openai.types.conversations import Conversation
from openai.types.responses import Response

from tests.support.schemas import validate_item
from tests.support.waiting import wait_terminal

CLIENTS = [pytest.param("client", id="sdk"), pytest.param("strict_client", id="strict-sdk")]


@pytest.fixture(params=CLIENTS)
def sdk(request: pytest.FixtureRequest) -> openai.OpenAI:
    """The default SDK client, then one that validates every response strictly."""
    chosen: openai.OpenAI = request.getfixturevalue(request.param)
    return chosen


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def texts(items: list[Any]) -> list[str]:
    """The text of each message item (input_text or output_text parts joined)."""
    out = []
    for item in items:
        assert item.type == "message", item
        out.append("".join(part.text for part in item.content))
    return out


def all_items(sdk: openai.OpenAI, conversation_id: str) -> list[Any]:
    return list(sdk.conversations.items.list(conversation_id, order="asc", limit=100))


def words(text: str) -> int:
    return len(text.split())


# -- the conversation object ------------------------------------------------------------


def test_create_returns_a_conversation_with_its_metadata(sdk: openai.OpenAI) -> None:
    before = time.time()

    conversation = sdk.conversations.create(
        items=[user("hello there"), {"role": "assistant", "content": "hi back"}],
        metadata={"topic": "greetings", "owner": "tests"},
    )

    assert isinstance(conversation, Conversation)
    assert conversation.id.startswith("conv_")
    assert conversation.object == "conversation"
    assert conversation.metadata == {"topic": "greetings", "owner": "tests"}
    assert before - 5 <= conversation.created_at <= time.time() + 5
    assert texts(all_items(sdk, conversation.id)) == ["hello there", "hi back"]


def test_create_without_arguments_gives_an_empty_conversation(sdk: openai.OpenAI) -> None:
    conversation = sdk.conversations.create()

    assert conversation.metadata == {}
    page = sdk.conversations.items.list(conversation.id)
    assert page.data == []
    assert page.has_more is False


def test_retrieve_returns_what_create_returned(sdk: openai.OpenAI) -> None:
    created = sdk.conversations.create(metadata={"k": "v"})

    fetched = sdk.conversations.retrieve(created.id)

    assert fetched.model_dump() == created.model_dump()


def test_update_replaces_the_metadata_and_is_persisted(sdk: openai.OpenAI) -> None:
    created = sdk.conversations.create(items=[user("keep me")], metadata={"a": "1", "b": "2"})

    updated = sdk.conversations.update(created.id, metadata={"c": "3"})

    assert updated.id == created.id
    assert updated.created_at == created.created_at
    assert updated.metadata == {"c": "3"}
    assert sdk.conversations.retrieve(created.id).metadata == {"c": "3"}
    assert texts(all_items(sdk, created.id)) == ["keep me"], "update must not touch the items"


def test_delete_then_retrieve_is_not_found(sdk: openai.OpenAI) -> None:
    created = sdk.conversations.create(items=[user("short-lived")])

    deleted = sdk.conversations.delete(created.id)

    assert deleted.id == created.id
    assert deleted.object == "conversation.deleted"
    assert deleted.deleted is True
    with pytest.raises(openai.NotFoundError) as caught:
        sdk.conversations.retrieve(created.id)
    assert created.id in caught.value.message
    with pytest.raises(openai.NotFoundError):
        sdk.conversations.items.list(created.id)
    with pytest.raises(openai.NotFoundError):
        sdk.conversations.delete(created.id)


def test_unknown_conversation_is_not_found_on_every_call(sdk: openai.OpenAI) -> None:
    missing = "conv_does_not_exist"
    calls = [
        lambda: sdk.conversations.retrieve(missing),
        lambda: sdk.conversations.update(missing, metadata={"a": "b"}),
        lambda: sdk.conversations.delete(missing),
        lambda: sdk.conversations.items.create(missing, items=[user("x")]),
        lambda: sdk.conversations.items.list(missing),
        lambda: sdk.conversations.items.retrieve("msg_x", conversation_id=missing),
        lambda: sdk.conversations.items.delete("msg_x", conversation_id=missing),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError) as caught:
            call()
        assert caught.value.status_code == 404
        assert caught.value.request_id


# -- items --------------------------------------------------------------------------------


def test_items_create_appends_and_returns_the_new_items(sdk: openai.OpenAI) -> None:
    conversation = sdk.conversations.create(items=[user("first")])

    added = sdk.conversations.items.create(
        conversation.id,
        items=[user("second"), {"type": "message", "role": "assistant", "content": "third"}],
    )

    assert added.object == "list"
    assert texts(added.data) == ["second", "third"]
    assert added.first_id == added.data[0].id
    assert added.last_id == added.data[-1].id
    assert added.has_more is False
    assert all(item.id for item in added.data)
    listed = all_items(sdk, conversation.id)
    assert texts(listed) == ["first", "second", "third"]
    assert [item.id for item in listed[1:]] == [item.id for item in added.data]
    for item in listed:
        if item.role == "assistant":
            validate_item(item.model_dump(exclude_none=True))


def test_items_create_accepts_the_include_query(sdk: openai.OpenAI) -> None:
    conversation = sdk.conversations.create()

    added = sdk.conversations.items.create(
        conversation.id, items=[user("with include")], include=["message.output_text.logprobs"]
    )

    assert texts(added.data) == ["with include"]


def test_items_keep_function_calls_and_outputs(sdk: openai.OpenAI) -> None:
    conversation = sdk.conversations.create(
        items=[
            user("what is the weather?"),
            {"type": "function_call", "call_id": "call_w1", "name": "weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_w1", "output": "sunny"},
        ]
    )

    listed = all_items(sdk, conversation.id)

    assert [item.type for item in listed] == ["message", "function_call", "function_call_output"]
    assert listed[1].call_id == "call_w1"
    assert listed[1].name == "weather"
    assert listed[2].call_id == "call_w1"
    assert listed[2].output == "sunny"


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_items_list_pages_through_every_item(sdk: openai.OpenAI, order: str) -> None:
    names = [f"item-{i}" for i in range(5)]
    conversation = sdk.conversations.create(items=[user(name) for name in names])
    expected = names if order == "asc" else names[::-1]

    first = sdk.conversations.items.list(conversation.id, limit=2, order=order)  # type: ignore[arg-type]

    assert texts(first.data) == expected[:2]
    assert first.has_more is True
    assert first.first_id == first.data[0].id
    assert first.last_id == first.data[1].id
    second = sdk.conversations.items.list(
        conversation.id,
        limit=2,
        order=order,  # type: ignore[arg-type]
        after=first.last_id,
    )
    assert texts(second.data) == expected[2:4]
    assert second.has_more is True
    last = sdk.conversations.items.list(
        conversation.id,
        limit=2,
        order=order,  # type: ignore[arg-type]
        after=second.last_id,
    )
    assert texts(last.data) == expected[4:]
    assert last.has_more is False
    assert last.last_id == last.data[-1].id
    # The SDK's auto-paging follows last_id and stops on has_more=false.
    paged = list(sdk.conversations.items.list(conversation.id, limit=2, order=order))  # type: ignore[arg-type]
    assert texts(paged) == expected
    assert len({item.id for item in paged}) == len(names)


def test_items_list_defaults_to_newest_first(sdk: openai.OpenAI) -> None:
    conversation = sdk.conversations.create(items=[user("old"), user("new")])

    page = sdk.conversations.items.list(conversation.id)

    assert texts(page.data) == ["new", "old"]


def test_items_retrieve_returns_one_item(sdk: openai.OpenAI) -> None:
    conversation = sdk.conversations.create(items=[user("one"), user("two")])
    second = all_items(sdk, conversation.id)[1]

    item = sdk.conversations.items.retrieve(second.id, conversation_id=conversation.id)

    assert item.model_dump() == second.model_dump()
    with pytest.raises(openai.NotFoundError):
        sdk.conversations.items.retrieve("msg_not_there", conversation_id=conversation.id)


def test_items_are_scoped_to_their_conversation(sdk: openai.OpenAI) -> None:
    mine = sdk.conversations.create(items=[user("mine")])
    other = sdk.conversations.create(items=[user("other")])
    item_id = all_items(sdk, mine.id)[0].id

    with pytest.raises(openai.NotFoundError):
        sdk.conversations.items.retrieve(item_id, conversation_id=other.id)
    with pytest.raises(openai.NotFoundError):
        sdk.conversations.items.delete(item_id, conversation_id=other.id)
    assert texts(all_items(sdk, mine.id)) == ["mine"]


def test_items_delete_returns_the_conversation_and_removes_the_item(sdk: openai.OpenAI) -> None:
    conversation = sdk.conversations.create(
        items=[user("a"), user("b"), user("c")], metadata={"kept": "yes"}
    )
    doomed = all_items(sdk, conversation.id)[1]

    result = sdk.conversations.items.delete(doomed.id, conversation_id=conversation.id)

    assert isinstance(result, Conversation)
    assert result.id == conversation.id
    assert result.object == "conversation"
    assert result.metadata == {"kept": "yes"}
    assert texts(all_items(sdk, conversation.id)) == ["a", "c"]
    with pytest.raises(openai.NotFoundError):
        sdk.conversations.items.retrieve(doomed.id, conversation_id=conversation.id)
    with pytest.raises(openai.NotFoundError):
        sdk.conversations.items.delete(doomed.id, conversation_id=conversation.id)


# -- responses in a conversation ------------------------------------------------------------


def assert_turn_appended(listed: list[Any], response: Response, prompt: str) -> None:
    """The last items of the conversation are this turn's input and then its output."""
    tail = listed[-(1 + len(response.output)) :]
    assert tail[0].type == "message"
    assert tail[0].role == "user"
    assert texts([tail[0]]) == [prompt]
    assert [item.id for item in tail[1:]] == [item.id for item in response.output]
    assert texts(tail[1:]) == [response.output_text]


def test_turns_in_a_conversation_append_their_items_and_see_the_history(
    sdk: openai.OpenAI,
) -> None:
    seed = "the seed message has six words"
    conversation = sdk.conversations.create(items=[user(seed)])
    first_prompt = "alpha beta gamma [[words 3]]"

    first = sdk.responses.create(model="embedded", input=first_prompt, conversation=conversation.id)

    assert first.status == "completed"
    assert first.output_text == "alpha beta gamma"
    assert first.conversation is not None
    assert first.conversation.id == conversation.id
    assert first.usage is not None
    assert first.usage.input_tokens == words(seed) + words(first_prompt)
    listed = all_items(sdk, conversation.id)
    assert len(listed) == 1 + 1 + len(first.output)
    assert_turn_appended(listed, first, first_prompt)

    second_prompt = "delta epsilon [[words 2]]"
    second = sdk.responses.create(
        model="embedded", input=second_prompt, conversation={"id": conversation.id}
    )

    assert second.status == "completed"
    assert second.output_text == "delta epsilon"
    assert second.usage is not None
    # The second turn's history is the seed, the whole first turn, then its own input.
    assert second.usage.input_tokens == (
        first.usage.input_tokens + first.usage.output_tokens + words(second_prompt)
    )
    listed = all_items(sdk, conversation.id)
    assert len(listed) == 1 + 2 * 2
    assert_turn_appended(listed, second, second_prompt)
    assert_turn_appended(listed[:-2], first, first_prompt)


def test_a_turn_with_items_created_through_the_api_sees_them(sdk: openai.OpenAI) -> None:
    conversation = sdk.conversations.create()
    sdk.conversations.items.create(conversation.id, items=[user("one two three four")])

    response = sdk.responses.create(model="embedded", input="five", conversation=conversation.id)

    assert response.usage is not None
    assert response.usage.input_tokens == 5


def test_a_deleted_item_leaves_the_history(sdk: openai.OpenAI) -> None:
    conversation = sdk.conversations.create(items=[user("one two three"), user("four")])
    doomed = all_items(sdk, conversation.id)[0]
    sdk.conversations.items.delete(doomed.id, conversation_id=conversation.id)

    response = sdk.responses.create(model="embedded", input="five", conversation=conversation.id)

    assert response.usage is not None
    assert response.usage.input_tokens == 2


def test_a_background_turn_appends_once_it_completes(sdk: openai.OpenAI) -> None:
    conversation = sdk.conversations.create(items=[user("before")])
    prompt = "in the background [[words 4]]"

    queued = sdk.responses.create(
        model="embedded", input=prompt, conversation=conversation.id, background=True
    )
    response = wait_terminal(sdk, queued.id)

    assert response.status == "completed"
    listed = all_items(sdk, conversation.id)
    assert texts(listed[:1]) == ["before"]
    assert len(listed) == 1 + 1 + len(response.output)
    assert_turn_appended(listed, response, prompt)


def test_a_turn_with_unknown_conversation_is_not_found(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        sdk.responses.create(model="embedded", input="hi", conversation="conv_nope")

    assert "conv_nope" in caught.value.message
    assert caught.value.request_id


def test_a_turn_in_a_deleted_conversation_is_not_found(sdk: openai.OpenAI) -> None:
    conversation = sdk.conversations.create()
    sdk.conversations.delete(conversation.id)

    with pytest.raises(openai.NotFoundError):
        sdk.responses.create(model="embedded", input="hi", conversation=conversation.id)


def test_conversation_and_previous_response_id_together_are_refused(sdk: openai.OpenAI) -> None:
    conversation = sdk.conversations.create(items=[user("untouched")])
    previous = sdk.responses.create(model="embedded", input="earlier")

    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(
            model="embedded",
            input="both",
            conversation=conversation.id,
            previous_response_id=previous.id,
        )

    assert caught.value.status_code == 400
    assert caught.value.param in ("conversation", "previous_response_id")
    assert "conversation" in caught.value.message
    assert "previous_response_id" in caught.value.message
    assert texts(all_items(sdk, conversation.id)) == ["untouched"]


def test_a_failed_turn_does_not_append_to_the_conversation(sdk: openai.OpenAI) -> None:
    conversation = sdk.conversations.create(items=[user("stable")])

    response = sdk.responses.create(
        model="embedded", input="please [[fail]]", conversation=conversation.id
    )

    assert response.status == "failed"
    assert texts(all_items(sdk, conversation.id)) == ["stable"]


def test_an_output_for_a_call_already_in_the_conversation_can_be_added(
    sdk: openai.OpenAI,
) -> None:
    conversation = sdk.conversations.create(
        items=[
            user("look it up"),
            {"type": "function_call", "call_id": "call_later", "name": "lookup", "arguments": "{}"},
        ]
    )

    added = sdk.conversations.items.create(
        conversation.id,
        items=[{"type": "function_call_output", "call_id": "call_later", "output": "found"}],
    )

    assert [item.type for item in added.data] == ["function_call_output"]
    response = sdk.responses.create(model="embedded", input="thanks", conversation=conversation.id)
    assert response.status == "completed"


def test_an_output_for_no_call_is_refused_and_not_stored(sdk: openai.OpenAI) -> None:
    """G5: an orphan function_call_output would poison every later history."""
    conversation = sdk.conversations.create(items=[user("hello")])

    with pytest.raises(openai.BadRequestError) as caught:
        sdk.conversations.items.create(
            conversation.id,
            items=[{"type": "function_call_output", "call_id": "call_ghost", "output": "boo"}],
        )

    assert "call_ghost" in caught.value.message
    assert texts(all_items(sdk, conversation.id)) == ["hello"]
    with pytest.raises(openai.BadRequestError):
        sdk.conversations.create(
            items=[{"type": "function_call_output", "call_id": "call_ghost", "output": "boo"}]
        )


def test_a_turn_sent_while_the_previous_one_runs_waits_and_sees_it(sdk: openai.OpenAI) -> None:
    """docs/guarantees.md, lanes: a conversation is one lane, and the default strategy
    (enqueue) runs the new turn after the running one, with its whole answer in history."""
    conversation = sdk.conversations.create(items=[user("seed")])
    slow_prompt = "slow answer [[words 30]] [[delay 20]]"
    running = sdk.responses.create(
        model="embedded", input=slow_prompt, conversation=conversation.id, background=True
    )

    follow_up = sdk.responses.create(model="embedded", input="next", conversation=conversation.id)

    first = sdk.responses.retrieve(running.id)
    assert first.status == "completed", "the follow-up finished first, so the first must have too"
    assert follow_up.status == "completed"
    assert follow_up.usage is not None
    assert follow_up.usage.input_tokens == words("seed") + words(slow_prompt) + 30 + 1
    listed = all_items(sdk, conversation.id)
    assert texts(listed[:2]) == ["seed", slow_prompt]
    assert_turn_appended(listed, follow_up, "next")
    assert_turn_appended(listed[:-2], first, slow_prompt)


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
def test_a_chain_from_a_conversation_turn_sees_that_turn_once(
    client: openai.OpenAI, background: bool
) -> None:
    """Continuing with previous_response_id from a turn of a conversation: the history is
    the conversation before that turn, then the turn's input and output, each once."""
    conversation = client.conversations.create()
    client.responses.create(model="m", input="one two three", conversation=conversation.id)
    first = client.responses.create(
        model="m", input="four five", conversation=conversation.id, background=background
    )
    while first.status not in ("completed", "failed", "incomplete", "cancelled"):
        time.sleep(0.05)
        first = client.responses.retrieve(first.id)
    assert first.status == "completed"

    follow = client.responses.create(model="m", input="six", previous_response_id=first.id)

    assert follow.usage is not None and first.usage is not None
    seen_by_first = first.usage.input_tokens + first.usage.output_tokens
    assert follow.usage.input_tokens == seen_by_first + 1, "the first turn's items were repeated"


def test_an_idempotency_key_is_refused_where_a_retry_would_apply_twice(
    sdk: openai.OpenAI,
) -> None:
    """Only a create keeps Idempotency-Keys: a conversation or items created with one
    would be created again by the retry the header promises is safe."""
    key = {"Idempotency-Key": "retry-me"}
    before = sdk.conversations.create().id
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.conversations.create(extra_headers=key)
    assert refused.value.code == "unsupported_parameter"
    assert refused.value.param == "Idempotency-Key"
    with pytest.raises(openai.BadRequestError):
        sdk.conversations.items.create(
            before, items=[{"role": "user", "content": "hi"}], extra_headers=key
        )
    assert sdk.conversations.items.list(before).data == []  # nothing added
    sdk.conversations.update(before, metadata={"k": "v"}, extra_headers=key)  # idempotent
