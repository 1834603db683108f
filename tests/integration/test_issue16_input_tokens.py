"""Issue 16: `POST /v1/responses/input_tokens` (`client.responses.input_tokens.count`), and
the routes beside the response ids (`input_tokens`, `compact`: test_issue16_compaction.py),
which no other route reads as an id.

A count is what the create with the same parameters would report as its usage's
`input_tokens`, for a model that counts (the embedded one counts words, over the history
a previous response or a conversation brings too); for one that cannot (a Chat
Completions upstream) it is an estimate, and the upstream is not called. Bad input is
refused as create refuses it.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.conftest import StartServer, make_client
from tests.support.fake_upstream import FakeUpstream
from tests.support.server import ServerProcess

AGENTS = "tests.agents.named_agents"
ITEMS: Any = [
    {"role": "user", "content": "what is the weather"},
    {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city": "Paris"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "sunny and warm"},
    {"role": "user", "content": [{"type": "input_text", "text": "and tomorrow then"}]},
]
WEATHER: Any = {"type": "function", "name": "weather", "parameters": {"type": "object"}}


def test_a_count_is_the_usage_the_create_reports(client: openai.OpenAI) -> None:
    for given in ("one two three", ITEMS):
        counted = client.responses.input_tokens.count(
            model="embedded", input=given, tools=[WEATHER]
        )
        created = client.responses.create(model="embedded", input=given, tools=[WEATHER])
        assert created.usage is not None
        assert counted.object == "response.input_tokens"
        assert counted.input_tokens == created.usage.input_tokens > 0


def test_a_count_includes_the_history_of_a_previous_response_or_a_conversation(
    client: openai.OpenAI,
) -> None:
    first = client.responses.create(model="embedded", input="alpha beta gamma [[words 4]]")
    chained = client.responses.input_tokens.count(
        model="embedded", input="delta", previous_response_id=first.id
    )
    created = client.responses.create(
        model="embedded", input="delta", previous_response_id=first.id
    )
    assert created.usage is not None
    # The words of the first input (5, with the directive), its answer (4), and "delta".
    assert chained.input_tokens == created.usage.input_tokens == 5 + 4 + 1

    conversation = client.conversations.create(items=[{"role": "user", "content": "a b c d e"}])
    in_conversation = client.responses.input_tokens.count(
        model="embedded", input="f", conversation=conversation.id
    )
    assert in_conversation.input_tokens == 6


def test_a_reference_is_counted_as_the_item_it_names(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    first = client.responses.create(model="embedded", input="one two three four five")
    named = client.responses.input_items.list(first.id).data[0].id
    reference: Any = [{"type": "item_reference", "id": named}]

    counted = client.responses.input_tokens.count(model="embedded", input=reference)
    created = client.responses.create(model="embedded", input=reference)
    assert created.usage is not None
    assert counted.input_tokens == created.usage.input_tokens == 5


def test_the_named_agents_model_counts(start_server: StartServer) -> None:
    server = start_server("--agent", f"alpha={AGENTS}:alpha")

    with make_client(server.url) as sdk:
        counted = sdk.responses.input_tokens.count(model="alpha", input="one two three four")
        created = sdk.responses.create(model="alpha", input="one two three four")
        assert created.usage is not None
        assert counted.input_tokens == created.usage.input_tokens == 4
        with pytest.raises(openai.NotFoundError) as refused:
            sdk.responses.input_tokens.count(model="gpt-4o", input="hi")
        assert refused.value.code == "model_not_found"
        with pytest.raises(openai.BadRequestError) as no_model:
            sdk.responses.input_tokens.count(input="hi")
        assert no_model.value.param == "model"


def test_with_an_upstream_the_count_is_an_estimate_and_the_upstream_is_not_asked(
    start_server: StartServer, fake_upstream: FakeUpstream
) -> None:
    server = start_server("--upstream-base-url", fake_upstream.url)

    with make_client(server.url) as sdk:
        short = sdk.responses.input_tokens.count(model="m", input="hello")
        long = sdk.responses.input_tokens.count(model="m", input="hello " * 200)
        with_instructions = sdk.responses.input_tokens.count(
            model="m", input="hello", instructions="Answer in French, briefly and kindly."
        )

    assert 0 < short.input_tokens < long.input_tokens
    assert 200 <= long.input_tokens <= 1200  # about four characters a token
    assert with_instructions.input_tokens > short.input_tokens
    assert fake_upstream.requests == []


BAD: list[Any] = [
    pytest.param({"input": [{"type": "bogus"}]}, id="item-type"),
    pytest.param({"input": [{"role": "user"}]}, id="no-content"),
    pytest.param({"input": "hi", "tools": [{"type": "function"}]}, id="tool-without-name"),
    pytest.param({"input": "hi", "tool_choice": {"type": "function", "name": "x"}}, id="choice"),
    pytest.param({"input": "hi", "temperature": 2.5}, id="create-only-out-of-range"),
    pytest.param({"conversation": "conv_x", "previous_response_id": "resp_x"}, id="both"),
    pytest.param({}, id="no-input"),
    pytest.param({"input": "hi", "previous_response_id": "resp_nope"}, id="unknown-previous"),
    pytest.param({"input": [{"type": "item_reference", "id": "msg_nope"}]}, id="unknown-reference"),
    pytest.param(
        {"input": [{"type": "function_call_output", "call_id": "zz", "output": "x"}]},
        id="output-without-call",
    ),
    pytest.param({"input": ITEMS[:2]}, id="call-without-output"),
    pytest.param(
        {"input": [{"type": "compaction", "encrypted_content": "gAAA"}]}, id="foreign-compaction"
    ),
]


@pytest.mark.parametrize("body", BAD)
def test_bad_input_gets_the_400_a_create_gets(
    http: httpx.Client, server: ServerProcess, body: dict[str, Any]
) -> None:
    counted = http.post("/v1/responses/input_tokens", json={"model": "embedded", **body})
    created = http.post("/v1/responses", json={"model": "embedded", **body})

    assert counted.status_code == 400, counted.text
    if "temperature" in body:  # a create parameter a count does not take: named
        assert counted.json()["error"]["param"] == "temperature"
        return
    assert created.status_code == 400
    if "compaction" in str(body):  # its message names the id given the item
        assert counted.json()["error"]["code"] == created.json()["error"]["code"]
    else:
        assert counted.json()["error"] == created.json()["error"]
    with make_client(server.url) as sdk, pytest.raises(openai.BadRequestError):
        sdk.responses.input_tokens.count(model="embedded", **body)


def test_compact_is_a_route_of_its_own_not_a_response_id(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    compacted = client.responses.compact(model="gpt-5", input="summarize all of this")

    assert compacted.object == "response.compaction"
    for path in ("/responses/compact", "/v1/responses/compact"):
        answer = http.post(path, json={"model": "m", "input": "x"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["output"][-1]["type"] == "compaction"
    # Not read as response ids by the other routes: another method is a 405 naming POST.
    for path in ("/v1/responses/compact", "/v1/responses/input_tokens"):
        for method in ("GET", "DELETE"):
            wrong = http.request(method, path)
            assert wrong.status_code == 405, (method, path)
            assert wrong.headers["allow"] == "POST"
    assert http.post("/v1/responses/compact/cancel").status_code == 404
