"""Issue 16: `item_reference` input items were a 400, so every chat of the Vercel AI SDK
(`@ai-sdk/openai`, whose default `store: true` sends earlier answers as
`{"type": "item_reference", "id": "msg_..."}`) failed on its second turn. (Compaction,
which the OpenAI Agents SDK's compaction session asks for: test_issue16_compaction.py.)

Now a reference is replaced by the stored item it names, from any response or conversation
of the same API key, before the request is checked (tool pairing, G5) or stored: the model
and `input_items.list` see the item itself. An id not stored, or stored by another API
key, is a 400 naming the reference (`input[1].id`).

The embedded model echoes the last user message and counts the words of its whole input
as `usage.input_tokens`, so a test sees what history the model was given.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import StartServer
from tests.integration._responses_support import MODEL
from tests.support.peek import count
from tests.support.schemas import refused
from tests.support.server import ServerProcess

TOOL = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}


def words(text: str) -> int:
    return len(text.split())


def stored(server: ServerProcess) -> int:
    return count(server.db, "SELECT count(*) FROM responses")


# -- resolving ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reference",
    [
        pytest.param({"type": "item_reference"}, id="typed"),
        pytest.param({}, id="type-left-out"),
        pytest.param({"type": None}, id="type-null"),
    ],
)
def test_a_second_turn_may_send_the_first_answer_as_a_reference(
    client: openai.OpenAI, http: httpx.Client, reference: dict[str, Any]
) -> None:
    """The Vercel AI SDK's second turn: the user's first message in full, the answer by
    reference, then the new message. The model is given the answer's text, and the stored
    input holds the answer itself."""
    first = client.responses.create(model=MODEL, input="alpha beta gamma [[words 3]]")
    answer = first.output[0]
    assert answer.type == "message" and first.output_text == "alpha beta gamma"

    second = http.post(
        "/v1/responses",
        json={
            "model": MODEL,
            "input": [
                {"role": "user", "content": "alpha beta gamma [[words 3]]"},
                {**reference, "id": answer.id},
                {"role": "user", "content": "delta [[words 1]]"},
            ],
        },
    )

    assert second.status_code == 200, second.text
    body = second.json()
    assert body["status"] == "completed" and body["output"][0]["content"][0]["text"] == "delta"
    given = words("alpha beta gamma [[words 3]]") + words("alpha beta gamma")
    assert body["usage"]["input_tokens"] == given + words("delta [[words 1]]")
    items = client.responses.input_items.list(body["id"], order="asc").data
    assert [item.type for item in items] == ["message", "message", "message"]
    assert items[1].id == answer.id and items[1].role == "assistant"
    assert items[1].model_dump(mode="json", exclude_unset=True) == answer.model_dump(
        mode="json", exclude_unset=True
    )


def test_a_reference_may_name_an_input_item(client: openai.OpenAI) -> None:
    first = client.responses.create(
        model=MODEL,
        input=[{"type": "message", "id": "msg_kept", "role": "user", "content": "one two"}],
    )

    second = client.responses.create(
        model=MODEL,
        input=[
            {"type": "item_reference", "id": "msg_kept"},
            {"role": "user", "content": "three"},
        ],
    )

    assert second.status == "completed", second.error
    assert second.usage is not None and second.usage.input_tokens == words("one two three")
    items = client.responses.input_items.list(second.id, order="asc").data
    assert items[0].id == "msg_kept" and items[0].type == "message"
    assert items[0].content[0].text == "one two"  # type: ignore[union-attr]
    assert first.id != second.id


def test_a_reference_works_after_a_previous_response(client: openai.OpenAI) -> None:
    """With `previous_response_id`, a reference to an item of another chain is resolved
    and follows that history."""
    elsewhere = client.responses.create(model=MODEL, input="far away [[words 2]]")
    chain = client.responses.create(model=MODEL, input="near [[words 1]]")

    turn = client.responses.create(
        model=MODEL,
        previous_response_id=chain.id,
        input=[
            {"type": "item_reference", "id": elsewhere.output[0].id},  # type: ignore[typeddict-item]
            {"role": "user", "content": "last [[words 1]]"},
        ],
    )

    assert turn.status == "completed" and turn.output_text == "last"
    history = words("near [[words 1]]") + words("near")
    given = history + words("far away") + words("last [[words 1]]")
    assert turn.usage is not None and turn.usage.input_tokens == given


def test_a_conversation_turn_and_its_items_resolve_references(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    """A conversation's turn stores the resolved item, so the conversation holds it; a
    reference to an item the conversation already holds is refused (it would be there
    twice), and so are POST /v1/conversations/{id}/items references alike."""
    answer = client.responses.create(model=MODEL, input="red green [[words 2]]").output[0]
    conversation = client.conversations.create()

    turn = client.responses.create(
        model=MODEL,
        conversation=conversation.id,
        input=[
            {"type": "item_reference", "id": answer.id},  # type: ignore[typeddict-item]
            {"role": "user", "content": "blue [[words 1]]"},
        ],
    )

    assert turn.status == "completed" and turn.output_text == "blue"
    held = client.conversations.items.list(conversation.id, order="asc").data
    assert [item.id for item in held][:1] == [answer.id]
    again = http.post(
        "/v1/responses",
        json={
            "model": MODEL,
            "conversation": conversation.id,
            "input": [{"role": "user", "content": "x"}, {"id": answer.id}],
        },
    )
    assert answer.id in refused(again, "input[1].id", "duplicate_item")

    other = http.post("/v1/conversations", json={"items": [{"id": answer.id}]})
    assert other.status_code == 200, other.text
    other_id = other.json()["id"]
    listed = http.get(f"/v1/conversations/{other_id}/items").json()["data"]
    assert [(i["id"], i["role"]) for i in listed] == [(answer.id, "assistant")]
    added = http.post(
        f"/v1/conversations/{other_id}/items",
        json={"items": [{"type": "item_reference", "id": held[-1].id}]},
    )
    assert added.status_code == 200, added.text
    assert added.json()["data"][0]["id"] == held[-1].id
    # Held already (it was a 503 of the store's unique index before): refused, naming it.
    for again in ({"id": held[-1].id}, {"id": answer.id, "role": "user", "content": "x"}):
        twice = http.post(f"/v1/conversations/{other_id}/items", json={"items": [again]})
        assert again["id"] in refused(twice, "items[0].id", "duplicate_item")
    both = http.post("/v1/conversations", json={"items": [{"id": answer.id}, {"id": answer.id}]})
    said = refused(both, "items[1].id", "duplicate_item")
    assert answer.id in said and "appears twice in 'items'" in said
    unknown = http.post(
        f"/v1/conversations/{other_id}/items",
        json={"items": [{"role": "user", "content": "a"}, {"id": "msg_nowhere"}]},
    )
    assert "msg_nowhere" in refused(unknown, "items[1].id", "item_not_found")


# -- refusing -----------------------------------------------------------------------------


def test_an_unknown_id_is_refused_naming_the_reference(
    server: ServerProcess, http: httpx.Client
) -> None:
    before = stored(server)

    answer = http.post(
        "/v1/responses",
        json={
            "model": MODEL,
            "input": [
                {"role": "user", "content": "a"},
                {"role": "user", "content": "b"},
                {"role": "user", "content": "c"},
                {"type": "item_reference", "id": "msg_nowhere"},
            ],
        },
    )

    message = refused(answer, "input[3].id", "item_not_found")
    assert "msg_nowhere" in message and "not found" in message
    assert stored(server) == before


def test_a_referenced_call_without_its_output_is_refused_as_any_call(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    """G5 holds for resolved items: a function_call sent by reference, with no output
    after it, is refused as the call itself would be; with its output, the turn runs."""
    first = client.responses.create(
        model=MODEL,
        input="[[call lookup {}]]",
        tools=[TOOL],  # type: ignore[list-item]
    )
    call = first.output[0]
    assert call.type == "function_call"
    history = [{"role": "user", "content": "[[call lookup {}]]"}, {"id": call.id}]

    missing = http.post(
        "/v1/responses",
        json={
            "model": MODEL,
            "tools": [TOOL],
            "input": [*history, {"role": "user", "content": "go"}],
        },
    )

    assert call.call_id in refused(missing, "input", "tool_output_missing")
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "found"}
    answered = client.responses.create(
        model=MODEL,
        tools=[TOOL],
        input=[*history, output],  # type: ignore[list-item]
    )
    assert answered.status == "completed" and answered.output_text == "lookup -> found"


KEYS = {"alice": "sk-alice-16", "bob": "sk-bob-16"}


@pytest.fixture
def keyed(start_server: StartServer) -> ServerProcess:
    return start_server("--api-keys", ",".join(f"{who}:{key}" for who, key in KEYS.items()))


@pytest.fixture
def tenants(keyed: ServerProcess) -> Iterator[dict[str, httpx.Client]]:
    clients = {
        who: httpx.Client(
            base_url=keyed.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )
        for who, key in KEYS.items()
    }
    yield clients
    for raw in clients.values():
        raw.close()


def test_another_tenants_item_is_refused_exactly_as_an_unknown_one(
    tenants: dict[str, httpx.Client],
) -> None:
    alice, bob = tenants["alice"], tenants["bob"]
    created = alice.post("/v1/responses", json={"model": MODEL, "input": "private words"})
    theirs = created.json()["output"][0]["id"]
    conversation = alice.post(
        "/v1/conversations", json={"items": [{"role": "user", "content": "x"}]}
    )
    conversation_item = alice.get(f"/v1/conversations/{conversation.json()['id']}/items").json()

    answers = {
        item_id: bob.post(
            "/v1/responses",
            json={"model": MODEL, "input": [{"role": "user", "content": "hi"}, {"id": item_id}]},
        )
        for item_id in (theirs, conversation_item["data"][0]["id"], "msg_nowhere")
    }

    shapes = {}
    for item_id, answer in answers.items():
        message = refused(answer, "input[1].id", "item_not_found")
        shapes[item_id] = message.replace(item_id, "<id>")
    assert len(set(shapes.values())) == 1, shapes
    mine = alice.post(
        "/v1/responses",
        json={"model": MODEL, "input": [{"role": "user", "content": "hi"}, {"id": theirs}]},
    )
    assert mine.status_code == 200, mine.text


def test_an_answer_holding_a_nul_character_finishes_and_may_be_referenced(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    """PostgreSQL's json functions fail on a document holding an escaped NUL, which any
    client can send and the embedded model echoes: the answer must still end, and its
    output item still resolve (the store reads such documents in Python)."""
    first = client.responses.create(model=MODEL, input="nul\x00here [[words 1]]")
    assert first.status == "completed"
    assert first.output_text == "nul\x00here"

    second = http.post(
        "/v1/responses",
        json={
            "model": MODEL,
            "input": [
                {"type": "item_reference", "id": first.output[0].id},
                {"role": "user", "content": "next [[words 1]]"},
            ],
        },
    )

    assert second.status_code == 200, second.text
    items = client.responses.input_items.list(second.json()["id"], order="asc").data
    assert items[0].id == first.output[0].id and items[0].role == "assistant"
