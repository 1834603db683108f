"""Items and calls a history would hold twice (review of the conversation and chain checks).

Two turns of one conversation could carry the same item: the second, queued while the
first ran, was checked against the conversation as it was then, and the first added the
item when it ended. The second's end then collided with the conversation's unique index
on every try: recovery ran it again, calling the model each time, until it ended
`recovery_exhausted` some 40 seconds later, its lane blocked all along. An item the client
added (`POST /v1/conversations/{id}/items`) while the turn carrying it ran made that turn
end the same way. Now a turn checks its whole history when it starts (a conversation's
item its input repeats is `duplicate_item`, without calling the model), and a turn's end
leaves out the items its conversation already holds: the client's copy stays.

A `function_call` whose call id the history already held (a continuation sending the call
of its previous response again, by reference or written out, with its output) was
accepted and sent to the model twice, which refuses that. Now the create is a 400
`duplicate_tool_call` naming the call, storing nothing; in a chain, a conversation, its
items routes and within one request alike.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.integration._issue16_support import MODEL, Rig, rig_on
from tests.support.client_tools import WEATHER
from tests.support.fake_upstream import FakeUpstream, Turn, text, tool_calls
from tests.support.peek import count
from tests.support.schemas import refused
from tests.support.waiting import wait_status, wait_terminal, wait_until

CALL: Any = {
    "type": "function_call",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city":"Paris"}',
}
OUTPUT: Any = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}


@pytest.fixture
def rig(start_server: StartServer, tmp_path: Path) -> Iterator[Rig]:
    fake = FakeUpstream().start()
    try:
        with rig_on(start_server, fake, tmp_path) as made:
            yield made
    finally:
        fake.stop()


class Gate:
    """Holds every model call the script does not answer until `release`, then answers
    it with `turn`: a turn that stays running for as long as a test needs."""

    def __init__(self, fake: FakeUpstream, turn: Turn) -> None:
        self._open = threading.Event()
        self._turn = turn
        fake.respond = self._answer

    def _answer(self, body: dict[str, Any]) -> Turn:
        self._open.wait(30)
        return self._turn

    def release(self) -> None:
        self._open.set()


def stored_responses(rig: Rig) -> int:
    return count(rig.server.db, "SELECT count(*) FROM responses")


def item_ids(rig: Rig, conversation: str) -> list[str]:
    return [
        i.id for i in rig.client.conversations.items.list(conversation, order="asc", limit=100).data
    ]


def an_answer(rig: Rig) -> str:
    """The id of the answer of a response outside any conversation, to refer to."""
    rig.fake.push(text("alpha beta gamma"))
    return rig.client.responses.create(model=MODEL, input="say three words").output[0].id


def start_turn(rig: Rig, conversation: str, *items: Any, background: bool = True) -> str:
    answer = rig.http.post(
        "/v1/responses",
        json={
            "model": MODEL,
            "conversation": conversation,
            "tools": [WEATHER],
            "input": list(items),
            "background": background,
        },
    )
    assert answer.status_code == 200, answer.text
    response_id: str = answer.json()["id"]
    return response_id


def continue_chain(rig: Rig, response_id: str) -> list[Any]:
    """Continue `response_id` by a chain (it must complete); the messages it sent."""
    rig.fake.push(text("fine"))
    answer = rig.http.post(
        "/v1/responses",
        json={
            "model": MODEL,
            "previous_response_id": response_id,
            "tools": [WEATHER],
            "input": "thanks",
            "background": True,
        },
    )
    assert answer.status_code == 200, answer.text
    ended = wait_terminal(rig.http, answer.json()["id"], deadline=15)
    assert ended["status"] == "completed", ended.get("error")
    sent: list[Any] = rig.fake.requests[-1]["messages"]
    return sent


# -- an item two turns of a conversation carry --------------------------------------------


def test_a_queued_turn_repeating_an_item_the_running_turn_adds_fails_at_once(rig: Rig) -> None:
    answer_id = an_answer(rig)
    conversation = rig.client.conversations.create(items=[{"role": "user", "content": "hi"}]).id
    gate = Gate(rig.fake, text("the long answer"))
    reference = {"type": "item_reference", "id": answer_id}
    first = start_turn(rig, conversation, reference, {"role": "user", "content": "long"})
    wait_status(rig.client, first, "in_progress")
    second = start_turn(rig, conversation, reference, {"role": "user", "content": "short"})
    assert wait_status(rig.client, second, "queued").status == "queued"
    gate.release()

    assert wait_terminal(rig.client, first).status == "completed"
    ended = wait_terminal(rig.client, second, deadline=15)  # not ~40 s of recoveries
    assert ended.status == "failed"
    assert ended.error is not None
    assert (ended.error.code, ended.error.type) == ("duplicate_item", "invalid_request_error")
    assert answer_id in ended.error.message
    assert len(rig.fake.requests) == 2  # the answer referred to, and the first turn
    ids = item_ids(rig, conversation)
    assert len(ids) == len(set(ids)) and answer_id in ids, ids
    # The lane goes on at once.
    rig.fake.push(text("next answer"))
    third = start_turn(rig, conversation, {"role": "user", "content": "next"}, background=False)
    assert rig.client.responses.retrieve(third).status == "completed"


def test_an_item_added_while_the_turn_carrying_it_runs_is_kept_once(rig: Rig) -> None:
    answer_id = an_answer(rig)
    conversation = rig.client.conversations.create(items=[{"role": "user", "content": "hi"}]).id
    gate = Gate(rig.fake, text("the long answer"))
    reference = {"type": "item_reference", "id": answer_id}
    first = start_turn(rig, conversation, reference, {"role": "user", "content": "long"})
    wait_status(rig.client, first, "in_progress")
    added = rig.http.post(f"/v1/conversations/{conversation}/items", json={"items": [reference]})
    assert added.status_code == 200, added.text
    gate.release()

    ended = wait_terminal(rig.client, first, deadline=15)
    assert ended.status == "completed", ended.error
    assert len(rig.fake.requests) == 2
    ids = item_ids(rig, conversation)
    assert ids.count(answer_id) == 1, ids
    assert ids[:2] == [ids[0], answer_id]  # where the client put it, before the turn's
    assert len(ids) == 4, ids  # hi, the answer, the turn's question and its answer


def test_a_chain_from_a_foreground_turn_that_skipped_an_item_holds_it_once(rig: Rig) -> None:
    """A foreground conversation turn whose input call the client added meanwhile skips it
    at its end; a chain continuing from that turn reads the conversation only up to where
    the turn's items start, the skipped one included, so the call is not sent twice.
    Before, the chain's history held it twice and the continuation failed."""
    conversation = rig.client.conversations.create(items=[{"role": "user", "content": "hi"}]).id
    gate = Gate(rig.fake, text("the long answer"))
    call = {**CALL, "id": "fc_dup"}
    body = {
        "model": MODEL,
        "conversation": conversation,
        "tools": [WEATHER],
        "input": [call, OUTPUT, {"role": "user", "content": "and now?"}],
    }
    result: dict[str, Any] = {}
    worker = threading.Thread(
        target=lambda: result.update(r=rig.http.post("/v1/responses", json=body, timeout=30))
    )
    worker.start()
    wait_until(lambda: bool(rig.fake.requests), "the foreground turn's model call")
    added = rig.http.post(f"/v1/conversations/{conversation}/items", json={"items": [call]})
    assert added.status_code == 200, added.text
    gate.release()
    worker.join(30)
    first = result["r"].json()
    assert first["status"] == "completed", first
    assert item_ids(rig, conversation).count("fc_dup") == 1

    sent = continue_chain(rig, first["id"])
    calls = [c["id"] for m in sent for c in m.get("tool_calls") or []]
    assert calls == ["call_1"], sent


def test_a_chain_from_a_foreground_turn_reads_the_conversation_as_the_turn_did(
    rig: Rig,
) -> None:
    """While a foreground conversation turn runs, the client adds a call, then an item
    with the id of the turn's own input, then the call's output. A chain continuing from
    the turn reads the conversation as the turn read it, when it started: without that
    call and output. Before, the turn's recorded end was the skipped item's position,
    which split the pair, and the continuation sent a call with no output."""
    conversation = rig.client.conversations.create(items=[{"role": "user", "content": "hi"}]).id
    gate = Gate(rig.fake, text("the long answer"))
    question = {"type": "message", "role": "user", "content": "and now?", "id": "msg_q"}
    body = {"model": MODEL, "conversation": conversation, "tools": [WEATHER], "input": [question]}
    result: dict[str, Any] = {}
    worker = threading.Thread(
        target=lambda: result.update(r=rig.http.post("/v1/responses", json=body, timeout=30))
    )
    worker.start()
    wait_until(lambda: bool(rig.fake.requests), "the foreground turn's model call")
    for item in ({**CALL, "id": "fc_side"}, question, OUTPUT):
        added = rig.http.post(f"/v1/conversations/{conversation}/items", json={"items": [item]})
        assert added.status_code == 200, added.text
    gate.release()
    worker.join(30)
    first = result["r"].json()
    assert first["status"] == "completed", first

    sent = continue_chain(rig, first["id"])
    assert [m["content"] for m in sent if m["role"] == "user"] == ["hi", "and now?", "thanks"]
    assert not [c for m in sent for c in m.get("tool_calls") or []], sent


# -- a call a history would hold twice ----------------------------------------------------


@pytest.mark.parametrize("how", ["item_reference", "written_out"])
def test_a_continuation_repeating_its_previous_call_is_refused(rig: Rig, how: str) -> None:
    rig.fake.push(tool_calls(("call_1", "get_weather", '{"city":"Paris"}')))
    first = rig.client.responses.create(model=MODEL, input="weather?", tools=[WEATHER])
    [call] = first.output
    again = {"type": "item_reference", "id": call.id} if how == "item_reference" else CALL
    before, asked = stored_responses(rig), len(rig.fake.requests)
    answer = rig.http.post(
        "/v1/responses",
        json={
            "model": MODEL,
            "previous_response_id": first.id,
            "tools": [WEATHER],
            "input": [again, OUTPUT],
        },
    )
    assert "call_1" in refused(answer, "input", "duplicate_tool_call")
    assert (stored_responses(rig), len(rig.fake.requests)) == (before, asked)
    # Sent with its output alone, the continuation runs, and the model sees the call once.
    rig.fake.push(text("sunny it is"))
    done = rig.client.responses.create(
        model=MODEL, previous_response_id=first.id, tools=[WEATHER], input=[OUTPUT]
    )
    assert done.status == "completed" and not rig.fake.refusals


@pytest.mark.parametrize(
    "items",
    [
        pytest.param([CALL, OUTPUT, CALL, OUTPUT], id="answered-then-again"),
        pytest.param([CALL, CALL, OUTPUT], id="twice-in-a-row"),
    ],
)
def test_a_call_repeated_within_one_request_is_refused(rig: Rig, items: list[Any]) -> None:
    answer = rig.http.post(
        "/v1/responses", json={"model": MODEL, "tools": [WEATHER], "input": items}
    )
    assert "call_1" in refused(answer, "input", "duplicate_tool_call")
    assert stored_responses(rig) == 0 and rig.fake.requests == []
    created = rig.http.post("/v1/conversations", json={"items": items})
    assert "call_1" in refused(created, "items", "duplicate_tool_call")


@pytest.mark.parametrize("route", ["responses", "items"])
def test_a_conversation_refuses_a_call_it_holds(rig: Rig, route: str) -> None:
    conversation = rig.client.conversations.create(items=[CALL]).id
    if route == "responses":
        body = {"model": MODEL, "conversation": conversation, "input": [CALL, OUTPUT]}
        answer = rig.http.post("/v1/responses", json={**body, "tools": [WEATHER]})
        assert "call_1" in refused(answer, "input", "duplicate_tool_call")
    else:
        answer = rig.http.post(
            f"/v1/conversations/{conversation}/items", json={"items": [CALL, OUTPUT]}
        )
        assert "call_1" in refused(answer, "items", "duplicate_tool_call")
    assert len(item_ids(rig, conversation)) == 1
    assert stored_responses(rig) == 0 and rig.fake.requests == []


def test_a_call_the_running_turn_makes_under_a_queued_turns_call_id_gets_a_new_id(
    rig: Rig,
) -> None:
    conversation = rig.client.conversations.create(items=[{"role": "user", "content": "hi"}]).id
    gate = Gate(rig.fake, tool_calls(("call_1", "get_weather", '{"city":"Paris"}')))
    first = start_turn(rig, conversation, {"role": "user", "content": "weather?"})
    wait_status(rig.client, first, "in_progress")
    second = start_turn(rig, conversation, CALL, OUTPUT)  # the client's own call_1, answered
    gate.release()

    ran = wait_terminal(rig.client, first)
    assert ran.status == "completed"
    [made] = [i.call_id for i in ran.output if i.type == "function_call"]
    assert made != "call_1"  # the queued input holds call_1: the model's call gets a new id
    # The queued turn then starts after a client call nobody answered, and fails at once.
    ended = wait_terminal(rig.client, second, deadline=15)
    assert ended.status == "failed"
    assert ended.error is not None
    assert (ended.error.code, ended.error.type) == ("tool_output_missing", "invalid_request_error")
    assert made in ended.error.message
    assert len(rig.fake.requests) == 1 and not rig.fake.refusals
