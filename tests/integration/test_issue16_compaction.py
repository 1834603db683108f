"""Issue 16, item 8: compaction, as the OpenAI Agents SDK's compaction session uses it.

`POST /v1/responses/compact` (`client.responses.compact(...)`) answered a 400, and
`context_management` on a create was refused. Now a compaction answers the history's user
messages and one compaction item (`{"type": "compaction", "id": "cmp_...",
"encrypted_content": ...}`) holding the model's summary of the rest, from the request's
`input`, its `previous_response_id` chain, or both. A later turn whose history holds the
item sends the model its user messages, then the summary (an assistant message), then
what follows the item: the scripted upstream's requests show it. With `context_management`
(`compact_threshold`), a step whose input is over the threshold compacts first, and the
compaction item appears in the output (and the stream) before the step's answer. A
compaction item this server did not make is a 400 naming it, unless the model is a
Responses upstream, which is sent it as it is.

The embedded model summarises deterministically and counts words as tokens, so a test
sees through `usage.input_tokens` how much history the model was given.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import StartServer, make_client
from tests.integration._issue16_support import MODEL as UPSTREAM_MODEL
from tests.integration._issue16_support import Rig, rig_on
from tests.integration._responses_support import MODEL, checked_response, post_stream, types
from tests.support.fake_responses_upstream import FakeResponsesUpstream
from tests.support.fake_upstream import FakeUpstream, text
from tests.support.peek import count
from tests.support.schemas import validate_compacted, validate_error_envelope
from tests.support.server import ServerProcess

Item = dict[str, Any]
COMPACTION: Any = [{"type": "compaction", "compact_threshold": 1000}]
SUMMARY_HEADING = "Summary of the conversation so far"
PROMPT = "Summarize the conversation above"  # how the summary request ends
OPENAI_MADE = {"type": "compaction", "id": "cmp_openai", "encrypted_content": "gAAAAABpM0Yj-x="}
HISTORY: list[Item] = [
    {"role": "user", "content": "what is the weather in Paris"},
    {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"city":"Paris"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "sunny and warm"},
    {"role": "assistant", "content": "It is sunny and warm in Paris today."},
    {"role": "user", "content": "and in Rome"},
    {"role": "assistant", "content": "Rome is cloudy."},
]


def stored(server: ServerProcess) -> int:
    return count(server.db, "SELECT count(*) FROM responses")


def compact(http: httpx.Client, **body: Any) -> dict[str, Any]:
    """POST /v1/responses/compact; the compacted response, checked against both schemas."""
    answer = http.post("/v1/responses/compact", json={"model": "gpt-4.1", **body})
    assert answer.status_code == 200, answer.text
    compacted: dict[str, Any] = answer.json()
    validate_compacted(compacted)
    return compacted


def user_texts(items: list[Item]) -> list[str]:
    assert all(i["type"] == "message" and i["role"] == "user" for i in items), items
    return [part["text"] for item in items for part in item["content"]]


def refused(answer: httpx.Response, param: str | None, code: str) -> str:
    assert answer.status_code == 400, answer.text
    validate_error_envelope(answer.json())
    error = answer.json()["error"]
    assert (error["param"], error["code"]) == (param, code), error
    return str(error["message"])


# -- POST /v1/responses/compact ------------------------------------------------------------


def test_compact_keeps_the_user_messages_then_one_compaction_item(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    compacted = compact(http, input=HISTORY)

    *kept, item = compacted["output"]
    assert user_texts(kept) == ["what is the weather in Paris", "and in Rome"]
    assert item["type"] == "compaction" and item["id"].startswith("cmp_")
    assert item["encrypted_content"]
    assert compacted["object"] == "response.compaction"
    assert compacted["usage"]["input_tokens"] > 0 and compacted["usage"]["output_tokens"] > 0

    through_sdk = client.responses.compact(model="gpt-4.1", input=HISTORY)
    assert through_sdk.object == "response.compaction"
    assert [o.type for o in through_sdk.output] == ["message", "message", "compaction"]


def test_compact_a_previous_response_chain_and_continue_from_it(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    first = client.responses.create(model=MODEL, input="tell me about the sea [[words 300]]")
    second = client.responses.create(
        model=MODEL, input="and the hills [[words 300]]", previous_response_id=first.id
    )

    compacted = compact(http, previous_response_id=second.id)
    more = compact(http, previous_response_id=second.id, input="and one more thing")

    texts = ["tell me about the sea [[words 300]]", "and the hills [[words 300]]"]
    assert user_texts(compacted["output"][:-1]) == texts
    assert user_texts(more["output"][:-1]) == [*texts, "and one more thing"]
    # The next turn sends the compacted output and its new message: the model is given
    # the user messages and the summary (at most 64 words), not the 600 words answered.
    follow_up = {"role": "user", "content": "now the rivers [[words 3]]"}
    later = client.responses.create(model=MODEL, input=[*compacted["output"], follow_up])
    assert later.status == "completed" and later.output_text == "now the rivers"
    assert later.usage is not None
    assert later.usage.input_tokens < 100
    counted = client.responses.input_tokens.count(
        model=MODEL, input=[*compacted["output"], follow_up]
    )
    assert counted.input_tokens == later.usage.input_tokens
    # Chained on the response that holds the compaction item, the summary still stands.
    chained = client.responses.create(model=MODEL, input="go on", previous_response_id=later.id)
    assert chained.usage is not None and chained.usage.input_tokens < 100


@pytest.fixture
def rig(start_server: StartServer, fake_upstream: FakeUpstream, tmp_path: Path) -> Iterator[Rig]:
    with rig_on(start_server, fake_upstream, tmp_path) as made:
        yield made


def test_an_upstream_summarises_and_a_later_turn_is_sent_the_summary(rig: Rig) -> None:
    rig.fake.push(
        text("It is sunny in Rome too."),
        text("The user asked about the weather: Paris sunny and warm, Rome sunny."),
        text("Tomorrow it rains."),
        text("Then it clears."),
    )
    first = rig.client.responses.create(model=UPSTREAM_MODEL, input=[*HISTORY[:4], HISTORY[4]])

    compacted = compact(rig.http, model=UPSTREAM_MODEL, previous_response_id=first.id)

    # The summary is one more model call: the whole history, then the summary prompt.
    asked = rig.messages(1)
    roles = ["user", "assistant", "tool", "assistant", "user", "assistant", "user"]
    assert [m["role"] for m in asked] == roles
    assert asked[-1]["content"].startswith(PROMPT)
    assert "tools" not in rig.fake.requests[1]

    # The next turn, with the compacted output as its input.
    follow_up = {"role": "user", "content": "and tomorrow"}
    later = rig.client.responses.create(
        model=UPSTREAM_MODEL, input=[*compacted["output"], follow_up]
    )
    assert later.output_text == "Tomorrow it rains."
    summary = SUMMARY_HEADING
    sent = rig.messages(2)
    assert [(m["role"], m["content"].startswith(summary)) for m in sent] == [
        ("user", False),
        ("user", False),
        ("assistant", True),
        ("user", False),
    ]
    assert sent[2]["content"].endswith("Paris sunny and warm, Rome sunny.")
    assert [sent[0]["content"], sent[1]["content"], sent[3]["content"]] == [
        "what is the weather in Paris",
        "and in Rome",
        "and tomorrow",
    ]

    # Chained on that turn: its stored input holds the compaction item, which still
    # stands for what it summarised.
    rig.client.responses.create(
        model=UPSTREAM_MODEL, input="and after", previous_response_id=later.id
    )
    chained = rig.messages(3)
    roles = ["user", "user", "assistant", "user", "assistant", "user"]
    assert [m["role"] for m in chained] == roles
    assert not any("sunny in Rome too" in str(m.get("content")) for m in chained)


def test_a_compaction_item_after_a_previous_response_stands_for_its_chain(rig: Rig) -> None:
    """The compaction item may also follow a `previous_response_id`: the chain's user
    messages stay (each once), the rest is the summary."""
    rig.fake.push(text("Sunny."), text("Paris was sunny."), text("Rainy tomorrow."))
    first = rig.client.responses.create(model=UPSTREAM_MODEL, input="weather in Paris")
    compacted = compact(rig.http, model=UPSTREAM_MODEL, previous_response_id=first.id)

    rig.client.responses.create(
        model=UPSTREAM_MODEL,
        previous_response_id=first.id,
        input=[*compacted["output"], {"role": "user", "content": "tomorrow"}],
    )

    sent = rig.messages(2)
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"] == f"{SUMMARY_HEADING} (it replaces the earlier turns):\n\n" + (
        "Paris was sunny."
    )


# -- context_management ----------------------------------------------------------------------


def test_a_step_over_the_threshold_compacts_first(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    big = client.responses.create(model=MODEL, input="tell me everything [[words 1200]]")

    small = client.responses.create(
        model=MODEL,
        input="and briefly [[words 3]]",
        previous_response_id=big.id,
        context_management=COMPACTION,
    )

    checked_response(small)
    assert [item.type for item in small.output] == ["compaction", "message"]
    assert small.output_text == "and briefly and"
    assert small.usage is not None and small.usage.input_tokens > 1200  # summary + step
    # The next turn (even without context_management) is given the summary, not the
    # 1200 words; the count agrees.
    nxt = client.responses.create(
        model=MODEL, input="next [[words 2]]", previous_response_id=small.id
    )
    assert nxt.usage is not None and nxt.usage.input_tokens < 100
    counted = client.responses.input_tokens.count(
        model=MODEL, input="next [[words 2]]", previous_response_id=small.id
    )
    assert counted.input_tokens == nxt.usage.input_tokens
    # The history is all still there: the big answer, in its response.
    assert client.responses.retrieve(big.id).output_text.count(" ") == 1199


def test_a_streamed_compaction_is_an_output_item_before_the_answer(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    big = client.responses.create(model=MODEL, input="tell me everything [[words 1100]]")

    events = post_stream(
        http,
        input="and briefly [[words 2]]",
        previous_response_id=big.id,
        context_management=COMPACTION,
    )

    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [e["item"]["type"] for e in added] == ["compaction", "message"]
    compaction = [e for e in events if e.get("output_index") == 0]
    assert types(compaction) == ["response.output_item.added", "response.output_item.done"]
    assert compaction[1]["item"]["encrypted_content"]
    final = events[-1]["response"]
    assert final["output"][0] == compaction[1]["item"]


def test_a_step_under_the_threshold_does_not_compact(client: openai.OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="a short chat [[words 200]]")

    answer = client.responses.create(
        model=MODEL,
        input="still short [[words 2]]",
        previous_response_id=first.id,
        context_management=COMPACTION,
    )

    assert [item.type for item in answer.output] == ["message"]
    assert answer.usage is not None and answer.usage.input_tokens == 5 + 200 + 4


def test_a_conversation_keeps_its_compaction_item(client: openai.OpenAI) -> None:
    conversation = client.conversations.create()
    client.responses.create(
        model=MODEL, conversation=conversation.id, input="a long one [[words 1100]]"
    )

    compacting = client.responses.create(
        model=MODEL,
        conversation=conversation.id,
        input="short [[words 2]]",
        context_management=COMPACTION,
    )
    later = client.responses.create(model=MODEL, conversation=conversation.id, input="more")

    assert [item.type for item in compacting.output] == ["compaction", "message"]
    items = client.conversations.items.list(conversation.id, order="asc").data
    assert [i.type for i in items].count("compaction") == 1
    assert later.usage is not None and later.usage.input_tokens < 100


def test_an_upstream_is_asked_for_the_summary_before_the_step(rig: Rig) -> None:
    rig.fake.push(
        text(" ".join(["lorem"] * 1500)),
        text("A long lorem ipsum was said."),
        text("Short now."),
    )
    first = rig.client.responses.create(model=UPSTREAM_MODEL, input="say a lot")

    answer = rig.client.responses.create(
        model=UPSTREAM_MODEL,
        input="and now briefly",
        previous_response_id=first.id,
        context_management=COMPACTION,
    )

    assert [item.type for item in answer.output] == ["compaction", "message"]
    assert answer.output_text == "Short now."
    summary_request = rig.messages(1)
    assert [m["role"] for m in summary_request] == ["user", "assistant", "user", "user"]
    assert summary_request[-1]["content"].startswith(PROMPT)
    step = rig.messages(2)
    assert [m["role"] for m in step] == ["user", "user", "assistant"]
    assert step[2]["content"].endswith("A long lorem ipsum was said.")
    assert len(rig.fake.requests) == 3


# -- what is refused -------------------------------------------------------------------------


BAD_CREATES: list[Any] = [
    pytest.param(
        {"input": [OPENAI_MADE, {"role": "user", "content": "hi"}]},
        "input[0].encrypted_content",
        "invalid_encrypted_content",
        id="compaction-item-made-elsewhere",
    ),
    pytest.param(
        {"input": "hi", "context_management": [{"type": "compaction"}]},
        "context_management[0].compact_threshold",
        "missing_required_parameter",
        id="no-threshold",
    ),
    pytest.param(
        {"input": "hi", "context_management": [{"type": "compaction", "compact_threshold": 10}]},
        "context_management[0].compact_threshold",
        "invalid_value",
        id="threshold-below-1000",
    ),
    pytest.param(
        {"input": "hi", "context_management": [{"type": "truncation", "compact_threshold": 2000}]},
        "context_management[0].type",
        "invalid_value",
        id="not-compaction",
    ),
]


@pytest.mark.parametrize(("body", "param", "code"), BAD_CREATES)
def test_a_bad_create_is_a_400_and_stores_nothing(
    server: ServerProcess, http: httpx.Client, body: dict[str, Any], param: str, code: str
) -> None:
    before = stored(server)

    refused(http.post("/v1/responses", json={"model": MODEL, **body}), param, code)

    assert stored(server) == before


def test_a_compaction_item_between_a_call_and_its_output_is_a_400(
    server: ServerProcess, http: httpx.Client
) -> None:
    """The item stands for the call before it; its output after it would answer nothing."""
    item = compact(http, input="hi")["output"][-1]
    before = stored(server)

    answer = http.post(
        "/v1/responses",
        json={"model": MODEL, "input": [*HISTORY[:2], item, HISTORY[2]]},
    )

    assert "between function call 'c1' and its output" in refused(answer, "input", "invalid_value")
    assert stored(server) == before


BAD_COMPACTS: list[Any] = [
    pytest.param(
        {"model": "m", "input": [{"role": "user", "content": "hi"}, OPENAI_MADE]},
        "input[1].encrypted_content",
        "invalid_encrypted_content",
        id="compaction-item-made-elsewhere",
    ),
    pytest.param(
        {"model": "m", "input": HISTORY[:2]},
        "input",
        "tool_output_missing",
        id="unanswered-call",
    ),
    pytest.param({"input": "hi"}, "model", "missing_required_parameter", id="no-model"),
    pytest.param({"model": "m"}, "input", "missing_required_parameter", id="no-history"),
    pytest.param(
        {"model": "m", "input": "hi", "conversation": "conv_x"},
        "conversation",
        "unknown_parameter",
        id="conversation",
    ),
    pytest.param(
        {"model": "m", "previous_response_id": "resp_nope"},
        "previous_response_id",
        "previous_response_not_found",
        id="unknown-previous",
    ),
    # what only tunes OpenAI's service is dropped, but in the shapes OpenAI's compact takes
    pytest.param(
        {"model": "m", "input": "hi", "prompt_cache_options": "x"},
        "prompt_cache_options",
        "invalid_type",
        id="prompt-cache-options-not-an-object",
    ),
    pytest.param(
        {"model": "m", "input": "hi", "prompt_cache_options": {"ttl": "12h"}},
        "prompt_cache_options.ttl",
        "invalid_value",
        id="prompt-cache-ttl-compact-has-not",
    ),
    pytest.param(
        {"model": "m", "input": "hi", "image": {"context_compression": "max"}},
        "image.context_compression",
        "invalid_value",
        id="image-options-malformed",
    ),
]


@pytest.mark.parametrize(("body", "param", "code"), BAD_COMPACTS)
def test_a_bad_compact_is_a_400_and_stores_nothing(
    server: ServerProcess, http: httpx.Client, body: dict[str, Any], param: str, code: str
) -> None:
    before = stored(server)

    message = refused(http.post("/v1/responses/compact", json=body), param, code)

    if code == "invalid_encrypted_content":
        assert "cmp_openai" in message and "not made by this server" in message
    assert stored(server) == before
    with make_client(server.url) as sdk, pytest.raises(openai.BadRequestError):
        extra = {name: value for name, value in body.items() if name != "model"}
        sdk.responses.compact(model=body.get("model"), extra_body=extra)


# -- a Responses upstream --------------------------------------------------------------------


@pytest.fixture
def responses_fake() -> Iterator[FakeResponsesUpstream]:
    fake = FakeResponsesUpstream().start()
    yield fake
    fake.stop()


def test_a_responses_upstream_summarises_with_a_step_and_is_sent_foreign_items_as_they_are(
    start_server: StartServer, responses_fake: FakeResponsesUpstream
) -> None:
    """The summary is one stateless `POST /responses` (never the upstream's own
    /responses/compact: our item must stay readable whatever model reads it later); a
    compaction item OpenAI made goes to the upstream untouched, for it to read."""
    server = start_server("--upstream-base-url", responses_fake.url, "--upstream-api", "responses")
    with httpx.Client(base_url=server.url, timeout=30) as http:
        compacted = compact(http, model=UPSTREAM_MODEL, input=HISTORY)
        sent = responses_fake.requests[0]
        assert sent["input"][-1]["content"][0]["text"].startswith(PROMPT)
        assert compacted["output"][-1]["type"] == "compaction"

        answer = http.post(
            "/v1/responses",
            json={
                "model": UPSTREAM_MODEL,
                "input": [OPENAI_MADE, {"role": "user", "content": "hi"}],
            },
        )

    assert answer.status_code == 200, answer.text
    assert responses_fake.requests[1]["input"][0] == OPENAI_MADE
