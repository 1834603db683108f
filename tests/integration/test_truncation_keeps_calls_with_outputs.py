"""G5 at the wire, `truncation: "auto"`: after the upstream refuses a request for its
context window, the server sends it again without its oldest turns
(server/_upstream_http.py `drop_oldest_turns`). A turn starts at a user message, but not
at one that came while a call waited for its output: cut there, the retry would carry
the output without its call, which the strict fake refuses, as OpenAI does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.integration._issue16_support import ServeResponses, responses_servers
from tests.integration.test_chat_tool_message_order import answer_while_the_user_says_more
from tests.support.client_tools import WEATHER
from tests.support.fake_responses_upstream import FakeResponsesUpstream, fault, text, tool_calls

MODEL = "fake-model"
CALL = ("call_w", "get_weather", '{"city":"Paris"}')
OVERFLOW = {
    "error": {
        "message": "Your input exceeds the context window of this model.",
        "type": "invalid_request_error",
        "param": "input",
        "code": "context_length_exceeded",
    }
}


@pytest.fixture
def fake() -> Iterator[FakeResponsesUpstream]:
    upstream = FakeResponsesUpstream().start()
    yield upstream
    upstream.stop()


@pytest.fixture
def serve(
    start_server: StartServer, fake: FakeResponsesUpstream, tmp_path: Path
) -> Iterator[ServeResponses]:
    with responses_servers(start_server, fake, tmp_path / "effects") as serve:
        yield serve


def _out(call_id: str, output: str) -> Any:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def _user(said: str) -> Any:
    return {"role": "user", "content": said}


def test_chain(serve: ServeResponses, fake: FakeResponsesUpstream) -> None:
    rig = serve(tools=False)
    client = rig.client
    fake.push(tool_calls(CALL), text("It is sunny."))
    first = client.responses.create(model=MODEL, input="weather?", tools=[WEATHER])
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[_user("be brief"), _out("call_w", "sunny")],
        tools=[WEATHER],
    )
    assert second.status == "completed", second.error
    assert fake.refusals == []  # valid for the Responses API
    fake.push(fault(400, body=OVERFLOW), text("Bye."))
    third = client.responses.create(
        model=MODEL,
        previous_response_id=second.id,
        input="thanks",
        tools=[WEATHER],
        truncation="auto",
    )
    assert fake.refusals == [], (fake.refusals, fake.requests[-1]["input"])
    assert third.status == "completed", third.error


def test_conversation_message_added_while_answer_runs(
    serve: ServeResponses, fake: FakeResponsesUpstream
) -> None:
    rig = serve(tools=False)
    client = rig.client
    conv = client.conversations.create()
    fake.push(tool_calls(CALL))
    client.responses.create(model=MODEL, conversation=conv.id, input="weather?", tools=[WEATHER])
    fake.push(text("It is sunny in Paris today, enjoy.", pace=0.3))
    answer_while_the_user_says_more(client, conv.id)
    assert fake.refusals == []
    fake.push(fault(400, body=OVERFLOW), text("Bye."))
    third = client.responses.create(
        model=MODEL, conversation=conv.id, input="thanks", tools=[WEATHER], truncation="auto"
    )
    assert fake.refusals == [], (fake.refusals, fake.requests[-1]["input"])
    assert third.status == "completed", third.error
