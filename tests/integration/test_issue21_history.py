"""Issue 21: histories that lost the pairing of a call and its output (docs/guarantees.md G5),
against real server processes.

Window 3. A turn accepted while its lane was busy was checked with pending calls allowed
(the running turn might still answer them); when the turn before it ended waiting for a
client tool's output (or was interrupted with one pending), the queued turn was run
anyway and the model was sent a call without its output. Fix: a turn's whole history is
checked when it starts; a call left unanswered ends the turn `failed` with the create
check's code, `tool_output_missing`, naming the call, and the model is not called.

Window 6. The claim recorded the end of a conversation turn's history as a count of
items while items are numbered by position, so after a deletion a background turn lost
its newest items. Fix: the end is recorded as a position. Deleting one half of a
call/output pair deletes both, so a conversation never holds half a pair.

Window 8. Deleting or purging the head of a previous_response_id chain left the rest of
the chain holding an output whose call was gone, and it was sent to the model. Fix: the
retention purge spares every response that a queued or running response's chain
reaches; a history that lost a call (the user deleted it) drops the orphaned outputs and
says so in the log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import StartServer, make_client
from tests.integration._responses_support import MODEL
from tests.support.fake_upstream import FakeUpstream, Turn, text, tool_calls
from tests.support.waiting import wait_status, wait_terminal, wait_until

WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
CALL_WEATHER = '[[call get_weather {"city":"Paris"}]]'
AGENT = ("--agent", "tests.agents.tool_agent:agent")
Item = dict[str, Any]
Message = dict[str, Any]


def user(words: str) -> Item:
    return {"type": "message", "role": "user", "content": words}


def call(call_id: str) -> Item:
    return {"type": "function_call", "call_id": call_id, "name": "get_weather", "arguments": "{}"}


def output(call_id: str, value: str = "sunny") -> Item:
    return {"type": "function_call_output", "call_id": call_id, "output": value}


def assert_paired(messages: list[Message]) -> None:
    """Every tool message answers a call an earlier assistant message made (what OpenAI
    checks), and every call is answered."""
    calls: list[str] = []
    answered: list[str] = []
    for message in messages:
        calls += [c["id"] for c in message.get("tool_calls") or []]
        if message["role"] == "tool":
            assert message["tool_call_id"] in calls, messages
            answered.append(message["tool_call_id"])
    assert sorted(calls) == sorted(answered), messages


@pytest.fixture
def tool_server(start_server: StartServer, tmp_path: Path) -> Iterator[openai.OpenAI]:
    """A server with the tool agent (server tools such as `wait_a_bit`)."""
    server = start_server(*AGENT, env={"SIDE_EFFECTS_DIR": str(tmp_path / "effects")})
    with make_client(server.url) as sdk:
        yield sdk


# -- window 3: a queued turn behind a pending client call --------------------------------


@pytest.mark.parametrize("lane", ["chain", "conversation"])
def test_a_turn_queued_behind_a_client_call_fails_naming_the_call(
    client: openai.OpenAI, lane: str
) -> None:
    where: dict[str, Any] = {}
    if lane == "conversation":
        where["conversation"] = client.conversations.create(items=[user("hello")]).id
    first = client.responses.create(
        model=MODEL,
        input="weather please [[delay 800]] " + CALL_WEATHER,
        tools=[WEATHER],
        background=True,
        **where,
    )
    after = where or {"previous_response_id": first.id}
    queued = client.responses.create(
        model=MODEL, input="and tomorrow?", tools=[WEATHER], background=True, **after
    )
    assert queued.status == "queued"  # accepted: the first turn might still answer its call

    ended = wait_terminal(client, first.id)
    [pending] = ended.output
    assert pending.type == "function_call" and ended.status == "completed"
    second = wait_terminal(client, queued.id)

    assert second.status == "failed"
    assert second.error is not None
    assert second.error.code == "tool_output_missing"
    assert pending.call_id in second.error.message
    assert second.output == []  # the model was not called
    if lane == "conversation":
        items = client.conversations.items.list(where["conversation"], order="asc").data
        assert [i.type for i in items] == ["message", "message", "function_call"]


def test_the_successor_of_an_interrupt_that_left_a_client_call_fails_naming_it(
    tool_server: openai.OpenAI,
) -> None:
    client = tool_server
    prompt = f'go [[call wait_a_bit {{"seconds": 1.5}}]] {CALL_WEATHER}'
    stream = client.responses.create(
        model=MODEL, input=prompt, tools=[WEATHER], background=True, stream=True
    )
    first_id = ""
    client_call_id = ""
    with stream:
        for event in stream:  # until the step's calls are out: the server tool runs now
            if event.type == "response.created":
                first_id = event.response.id
            done = event.type == "response.output_item.done"
            if done and event.item.type == "function_call" and event.item.name == "get_weather":
                client_call_id = event.item.call_id
                break
    assert first_id and client_call_id

    successor = client.responses.create(
        model=MODEL,
        input="stop, do something else",
        previous_response_id=first_id,
        tools=[WEATHER],
        background=True,
        extra_body={"multitask_strategy": "interrupt"},
    )

    interrupted = wait_terminal(client, first_id)
    assert interrupted.status == "incomplete"
    assert interrupted.incomplete_details is not None
    assert interrupted.incomplete_details.reason == "steered"  # type: ignore[comparison-overlap]
    second = wait_terminal(client, successor.id)
    assert second.status == "failed"
    assert second.error is not None
    assert second.error.code == "tool_output_missing"
    assert client_call_id in second.error.message
    assert second.output == []


# -- window 6: deleting conversation items ----------------------------------------------


def test_a_deleted_item_does_not_cut_a_background_turns_history(client: openai.OpenAI) -> None:
    conversation = client.conversations.create(
        items=[user("one"), user("two two"), user("three three three")]
    )
    oldest = client.conversations.items.list(conversation.id, order="asc").data[0]
    client.conversations.items.delete(oldest.id, conversation_id=conversation.id)

    turn = client.responses.create(
        model=MODEL, input="four four four four", conversation=conversation.id, background=True
    )
    done = wait_terminal(client, turn.id)

    assert done.status == "completed"
    assert done.usage is not None
    assert done.usage.input_tokens == 2 + 3 + 4  # the embedded model counts history words


@pytest.mark.parametrize("half", ["function_call", "function_call_output"])
def test_deleting_half_of_a_call_pair_deletes_both(client: openai.OpenAI, half: str) -> None:
    conversation = client.conversations.create(
        items=[user("weather?"), call("call_pair"), output("call_pair"), user("thanks")]
    )
    items = client.conversations.items.list(conversation.id, order="asc").data
    [chosen] = [i for i in items if i.type == half]

    deleted = client.conversations.items.delete(chosen.id, conversation_id=conversation.id)

    assert deleted.id == conversation.id
    left = client.conversations.items.list(conversation.id, order="asc").data
    assert [i.type for i in left] == ["message", "message"]
    turn = client.responses.create(model=MODEL, input="again", conversation=conversation.id)
    assert turn.status == "completed"


def test_deleting_a_pending_call_deletes_only_it(client: openai.OpenAI) -> None:
    conversation = client.conversations.create(items=[user("weather?"), call("call_open")])
    pending = client.conversations.items.list(conversation.id, order="asc").data[1]

    client.conversations.items.delete(pending.id, conversation_id=conversation.id)

    left = client.conversations.items.list(conversation.id, order="asc").data
    assert [i.type for i in left] == ["message"]
    turn = client.responses.create(model=MODEL, input="hello", conversation=conversation.id)
    assert turn.status == "completed"  # no call is left waiting for an output


# -- window 8: the head of a previous_response_id chain ---------------------------------


def _weather_chain(
    client: openai.OpenAI, fake: FakeUpstream, then: list[Turn], **second: Any
) -> tuple[Any, Any]:
    """A client call (call_oslo), then the turn that answers it; the upstream plays
    `then` after the call."""
    fake.push(tool_calls(("call_oslo", "get_weather", '{"city":"Oslo"}')))
    first = client.responses.create(model=MODEL, input="Weather in Oslo?", tools=[WEATHER])
    assert first.status == "completed"
    fake.push(*then)
    answer = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[output("call_oslo", "-3C")],
        tools=[WEATHER],
        **second,
    )
    return first, answer


def test_a_chain_whose_head_was_deleted_drops_the_orphaned_output(
    start_server: StartServer, fake_upstream: FakeUpstream
) -> None:
    server = start_server("--upstream-base-url", fake_upstream.url)
    with make_client(server.url) as client:
        first, second = _weather_chain(client, fake_upstream, [text("Cold in Oslo.")])
        assert second.output_text == "Cold in Oslo."
        client.responses.delete(first.id)

        fake_upstream.push(text("Bye."))
        third = client.responses.create(
            model=MODEL, previous_response_id=second.id, input="thanks", tools=[WEATHER]
        )

    assert third.status == "completed"
    sent: list[Message] = fake_upstream.requests[-1]["messages"]
    assert_paired(sent)
    assert [m["role"] for m in sent] == ["assistant", "user"]
    assert "dropped the outputs of function calls 'call_oslo'" in server.log()


def _status(client: openai.OpenAI, response_id: str) -> str:
    try:
        return client.responses.retrieve(response_id).status or ""
    except openai.NotFoundError:
        return "purged"


def test_retention_spares_the_chain_of_a_queued_turn(
    start_server: StartServer, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    retention = 1.0  # seconds
    server = start_server(
        "--upstream-base-url",
        fake_upstream.url,
        "--retention-days",
        str(retention / 86400),
        "--purge-interval",
        "0.1",
        *AGENT,
        env={"SIDE_EFFECTS_DIR": str(tmp_path / "effects")},
    )
    with make_client(server.url) as client:
        wait = tool_calls(("call_wait", "wait_a_bit", '{"seconds": 2.5}'))
        then = [wait, text("Noted."), text("Bye.")]
        first, second = _weather_chain(client, fake_upstream, then, background=True)
        wait_status(client, second.id, "in_progress")
        third = client.responses.create(
            model=MODEL,
            previous_response_id=second.id,
            input="thanks",
            tools=[WEATHER],
            background=True,
        )
        assert third.status == "queued"

        # The first turn is past retention long before the third one runs.
        wait_until(lambda: _status(client, third.id) != "queued", "the third turn's start")
        wait_until(lambda: _status(client, third.id) != "in_progress", "the third turn's end")
        assert len(fake_upstream.requests) == 4, "the third turn did not call the model"
        sent: list[Message] = fake_upstream.requests[3]["messages"]
        assert_paired(sent)
        assert sent[0] == {"role": "user", "content": "Weather in Oslo?"}

        def purged() -> bool:  # once no live chain needs it, it goes
            try:
                client.responses.retrieve(first.id)
            except openai.NotFoundError:
                return True
            return False

        wait_until(purged, "the purge of the first turn once its chain is finished")
