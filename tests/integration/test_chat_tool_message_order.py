"""G5 at the wire, Chat Completions upstream: a `tool` message must follow the assistant
message of its call directly (the strict fake refuses otherwise, as OpenAI does), while a
Responses history may hold a message between a call and its output: a client said more
before it answered, in a chain's input, through the conversation items API, or while
the turn answering the call ran. Such a message is sent after the outputs."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.conftest import StartServer, make_client
from tests.support.client_tools import WEATHER
from tests.support.fake_upstream import FakeUpstream, text, tool_calls
from tests.support.waiting import wait_terminal

MODEL = "fake-model"
CALL = ("call_w", "get_weather", '{"city":"Paris"}')


@pytest.fixture
def fake() -> Iterator[FakeUpstream]:
    upstream = FakeUpstream().start()
    yield upstream
    upstream.stop()


@pytest.fixture
def client(start_server: StartServer, fake: FakeUpstream) -> Iterator[openai.OpenAI]:
    server = start_server("--upstream-base-url", fake.url, "--retry-base-delay", "0.01")
    with make_client(server.url) as sdk:
        yield sdk


def _out(call_id: str, output: str) -> Any:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def _user(said: str) -> Any:
    return {"role": "user", "content": said}


def test_chain_user_message_before_the_output(client: openai.OpenAI, fake: FakeUpstream) -> None:
    fake.push(tool_calls(CALL), text("It is sunny."))
    first = client.responses.create(model=MODEL, input="weather?", tools=[WEATHER])
    assert [i.type for i in first.output] == ["function_call"]
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[_user("and please be brief"), _out("call_w", "sunny")],
        tools=[WEATHER],
    )
    # Either refused with a 400 by the server, or sent as a valid history: never sent
    # to the model as a call without its output.
    assert fake.refusals == [], (fake.refusals, fake.requests[-1]["messages"])
    assert second.status == "completed", second.error


def test_conversation_message_added_before_the_output(
    client: openai.OpenAI, fake: FakeUpstream
) -> None:
    conv = client.conversations.create()
    fake.push(tool_calls(CALL), text("It is sunny."))
    first = client.responses.create(
        model=MODEL, conversation=conv.id, input="weather?", tools=[WEATHER]
    )
    assert [i.type for i in first.output] == ["function_call"]
    client.conversations.items.create(conv.id, items=[_user("in Celsius please")])
    second = client.responses.create(
        model=MODEL, conversation=conv.id, input=[_out("call_w", "21C")], tools=[WEATHER]
    )
    assert fake.refusals == [], (fake.refusals, fake.requests[-1]["messages"])
    assert second.status == "completed", second.error


def test_conversation_message_added_while_the_answering_turn_runs(
    client: openai.OpenAI, fake: FakeUpstream
) -> None:
    """The answer is sent as a background turn; while it runs, the user's next message
    is added through the items API (what a chat UI does). The items API places it
    before the running turn's input, between the call and its output."""
    conv = client.conversations.create()
    fake.push(tool_calls(CALL))
    first = client.responses.create(
        model=MODEL, conversation=conv.id, input="weather?", tools=[WEATHER]
    )
    assert [i.type for i in first.output] == ["function_call"]
    fake.push(text("It is sunny in Paris today, enjoy.", pace=0.3))
    answer_while_the_user_says_more(client, conv.id)
    listed = client.conversations.items.list(conv.id, order="asc").data
    items = [item.type + ":" + (getattr(item, "role", "") or "") for item in listed]
    fake.push(text("Tomorrow too."))
    third = client.responses.create(
        model=MODEL, conversation=conv.id, input="thanks", tools=[WEATHER]
    )
    assert fake.refusals == [], (fake.refusals, fake.requests[-1]["messages"], items)
    assert third.status == "completed", third.error


def answer_while_the_user_says_more(client: openai.OpenAI, conversation_id: str) -> None:
    """Answer call_w in a background turn and, while it runs (its answer is paced by the
    test), add the user's next message through the items API, as a chat UI does: it is
    stored between the call and its output."""
    second = client.responses.create(
        model=MODEL,
        conversation=conversation_id,
        input=[_out("call_w", "sunny")],
        tools=[WEATHER],
        background=True,
    )
    time.sleep(0.8)
    client.conversations.items.create(conversation_id, items=[_user("and tomorrow?")])
    ended = wait_terminal(client, second.id)
    assert ended.status == "completed", ended.error
