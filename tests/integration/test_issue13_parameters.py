"""Issue 13: parameters were accepted and then ignored (`text.format`, `reasoning.effort`,
`include`, `top_logprobs`, `truncation: "auto"`, `service_tier`, `prompt_cache_key`,
`safety_identifier`, ...), `input_file` parts reached the upstream as empty content, and
the Response reported the request's `model` when `--upstream-model` pinned another.

Now each is honoured, forwarded to the upstream under its Chat Completions name (checked
on what the fake upstream received), or refused with a 400 naming it; the embedded model
answers a JSON schema with a valid instance (so `responses.parse` works offline) and
gives logprobs; the Response reports the model that answered.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

import httpx
import openai
import pytest
from pydantic import BaseModel

from tests.conftest import StartServer, make_client
from tests.integration._responses_support import (
    MODEL,
    checked_events,
    checked_response,
    dump,
    post_stream,
    text_of,
)
from tests.support.fake_upstream import FakeUpstream, fault, text
from tests.support.peek import count
from tests.support.schemas import validate_error_envelope, validate_item, validate_response
from tests.support.server import ServerProcess

PINNED = "pinned-model"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "sunny": {"type": "boolean"}},
    "required": ["city", "sunny"],
    "additionalProperties": False,
}
JSON_SCHEMA_FORMAT = {"type": "json_schema", "name": "weather", "schema": SCHEMA, "strict": True}


# -- refused, naming what cannot be honoured ----------------------------------------------


def _stored(server: ServerProcess) -> int:
    return count(server.db, "SELECT count(*) FROM responses")


FILE = {"type": "input_file", "file_id": "file-1"}
REFUSED = [
    pytest.param(
        {"input": [{"role": "user", "content": [{"type": "input_text", "text": "a"}, FILE]}]},
        "input[0].content[1]",
        "unsupported_value",
        "input_file",
        id="input-file",
    ),
    pytest.param(
        {
            "input": [
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": [FILE]},
            ],
            "tools": [{"type": "function", "name": "f"}],
        },
        "input[1].output[0]",
        "unsupported_value",
        "input_file",
        id="input-file-in-a-tool-output",
    ),
    pytest.param(
        {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}]},
        "input[0].content[0]",
        "unsupported_value",
        "file_id",
        id="image-by-file-id",
    ),
    pytest.param(
        {"input": "hi", "include": ["reasoning.encrypted_content", "file_search_call.results"]},
        "include[1]",
        "unsupported_value",
        "file_search_call.results",
        id="include-hosted-tool-results",
    ),
    pytest.param(
        {"input": "hi", "include": ["everything"]},
        "include[0]",
        "invalid_value",
        "everything",
        id="include-unknown",
    ),
    pytest.param(
        {"input": "hi", "context_management": [{"type": "compaction"}]},
        "context_management[0].compact_threshold",
        "missing_required_parameter",
        "compact_threshold",
        id="context-management-without-threshold",
    ),
    pytest.param(
        {"input": "hi", "text": {"format": {"type": "xml"}}},
        "text.format.type",
        "invalid_value",
        "xml",
        id="text-format-unknown",
    ),
    pytest.param(
        {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}},
        "text.format.schema",
        "missing_required_parameter",
        "schema",
        id="text-format-without-schema",
    ),
]


@pytest.mark.parametrize(("body", "param", "code", "named"), REFUSED)
def test_what_cannot_be_honoured_is_refused_naming_it(
    server: ServerProcess,
    http: httpx.Client,
    body: dict[str, Any],
    param: str,
    code: str,
    named: str,
) -> None:
    before = _stored(server)

    answer = http.post("/v1/responses", json={"model": MODEL, **body})

    assert answer.status_code == 400, answer.text
    validate_error_envelope(answer.json())
    error = answer.json()["error"]
    assert (error["param"], error["code"]) == (param, code)
    assert named in error["message"]
    assert _stored(server) == before


def test_conversation_items_with_a_file_are_refused_too(http: httpx.Client) -> None:
    answer = http.post("/v1/conversations", json={"items": [{"role": "user", "content": [FILE]}]})

    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == "items[0].content[0]"


# -- the embedded model honours them -------------------------------------------------------


class Address(BaseModel):
    city: str
    zip_code: int


class Person(BaseModel):
    name: str
    kind: Literal["friend", "colleague"]
    tags: list[str]
    home: Address
    work: Address | None


def test_parse_with_a_pydantic_model_works_offline(client: openai.OpenAI) -> None:
    parsed = client.responses.parse(model=MODEL, input="who is this?", text_format=Person)

    assert parsed.status == "completed"
    assert isinstance(parsed.output_parsed, Person)
    assert parsed.output_parsed.kind == "friend"
    assert parsed.output_parsed.work is None
    assert parsed.text.format.type == "json_schema"  # echoed as asked


def test_stream_with_a_pydantic_model_works_offline(client: openai.OpenAI) -> None:
    with client.responses.stream(model=MODEL, input="where?", text_format=Address) as stream:
        final = stream.get_final_response()

    assert isinstance(final.output_parsed, Address)


def test_json_object_answers_an_object(client: openai.OpenAI) -> None:
    response = checked_response(
        client.responses.create(model=MODEL, input="json", text={"format": {"type": "json_object"}})
    )

    assert json.loads(response.output_text) == {}


def test_a_json_schema_answer_and_its_events_keep_to_both_schemas(http: httpx.Client) -> None:
    events = post_stream(http, input="weather?", text={"format": JSON_SCHEMA_FORMAT})

    final = events[-1]["response"]
    assert json.loads(text_of(final)) == {"city": "", "sunny": False}
    assert final["text"]["format"] == {**JSON_SCHEMA_FORMAT, "description": None}


def test_embedded_logprobs_are_certain(client: openai.OpenAI, http: httpx.Client) -> None:
    asked = client.responses.create(
        model=MODEL,
        input="red green [[words 2]]",
        include=["message.output_text.logprobs"],
        top_logprobs=3,
    )
    plain = client.responses.create(model=MODEL, input="red green [[words 2]]")

    [part] = dump(checked_response(asked))["output"][0]["content"]
    assert part["logprobs"] == [
        {
            "token": token,
            "logprob": 0.0,
            "bytes": list(token.encode()),
            "top_logprobs": [{"token": token, "logprob": 0.0, "bytes": list(token.encode())}],
        }
        for token in ("red", " green")
    ]
    assert dump(plain)["output"][0]["content"][0]["logprobs"] == []
    events = post_stream(http, input="red green [[words 2]]", top_logprobs=1)
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert [d["logprobs"][0]["token"] for d in deltas] == ["red", " green"]


def test_embedded_reports_the_tier_that_served(client: openai.OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="hi", service_tier="flex")

    assert response.service_tier == "default"


@pytest.mark.parametrize("effort", ["minimal", "max"])
def test_openai_s_reasoning_efforts_are_echoed(http: httpx.Client, effort: str) -> None:
    """`minimal` and `max` are OpenAI's (the SDK sends them), not in Open Responses' enum:
    a documented divergence (tests/support/schemas.py)."""
    answer = http.post(
        "/v1/responses", json={"model": MODEL, "input": "hi", "reasoning": {"effort": effort}}
    )

    assert answer.status_code == 200, answer.text
    validate_response(answer.json())
    assert answer.json()["reasoning"] == {"effort": effort, "summary": None}


def test_every_reasoning_field_asked_is_echoed(http: httpx.Client, client: openai.OpenAI) -> None:
    reasoning = {"generate_summary": "concise", "context": "all_turns", "mode": "pro"}

    answer = http.post(
        "/v1/responses", json={"model": MODEL, "input": "hi", "reasoning": reasoning}
    )

    assert answer.status_code == 200, answer.text
    validate_response(answer.json())
    assert answer.json()["reasoning"] == {"effort": None, "summary": "concise", **reasoning}
    retrieved = client.responses.retrieve(answer.json()["id"])
    assert retrieved.reasoning is not None
    assert (retrieved.reasoning.summary, retrieved.reasoning.context) == ("concise", "all_turns")


# -- the upstream is sent them ------------------------------------------------------------


@pytest.fixture
def pinned(start_server: StartServer, fake_upstream: FakeUpstream) -> Iterator[openai.OpenAI]:
    server = start_server(
        "--upstream-base-url", fake_upstream.url, "--upstream-model", PINNED, "--model-retries", "0"
    )
    with make_client(server.url) as client:
        yield client


def test_every_option_reaches_the_upstream_under_its_chat_completions_name(
    pinned: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    # Under a JSON schema the (strict) fake answers only JSON for it, as a real model does.
    answer = '{"city": "Paris", "sunny": true}'
    fake_upstream.push(text(answer, model="pinned-model-2026-08-01", service_tier="flex"))

    raw = pinned.responses.with_raw_response.create(
        model="gpt-x",
        input="weather?",
        text={"format": JSON_SCHEMA_FORMAT, "verbosity": "low"},
        reasoning={"effort": "low", "summary": "auto"},
        include=["message.output_text.logprobs"],
        top_logprobs=2,
        prompt_cache_key="cache-1",
        prompt_cache_retention="24h",
        safety_identifier="user-hash",
        service_tier="flex",
        user="u-1",
        extra_body={"presence_penalty": 0.5, "frequency_penalty": 0.25},
        truncation="disabled",
    )
    data = raw.http_response.json()  # what the server sent (the SDK renames `schema`)
    validate_response(data)
    for item in data["output"]:
        validate_item(item)
    response = raw.parse()

    [sent] = fake_upstream.requests
    assert sent["model"] == PINNED
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True},
    }
    expected = {
        "verbosity": "low",
        "reasoning_effort": "low",
        "logprobs": True,
        "top_logprobs": 2,
        "prompt_cache_key": "cache-1",
        "prompt_cache_retention": "24h",
        "safety_identifier": "user-hash",
        "service_tier": "flex",
        "presence_penalty": 0.5,
        "frequency_penalty": 0.25,
        "user": "u-1",
    }
    assert {key: sent.get(key) for key in expected} == expected
    # The Response reports the model and tier that answered, as OpenAI does.
    assert (response.model, response.service_tier) == ("pinned-model-2026-08-01", "flex")
    assert data["text"]["format"] == {**JSON_SCHEMA_FORMAT, "description": None}
    [part] = data["output"][0]["content"]
    first = '{"city":'
    assert [p["token"] for p in part["logprobs"]] == [first, ' "Paris",', ' "sunny":', " true}"]
    assert part["logprobs"][0] == {
        "token": first,
        "logprob": -0.5,
        "bytes": list(first.encode()),  # null upstream: filled in
        "top_logprobs": [
            {"token": first, "logprob": -0.5, "bytes": list(first.encode())},
            {"token": "alt", "logprob": -1.5, "bytes": list(b"alt")},
        ],
    }


def test_a_pinned_model_is_reported_when_the_upstream_names_none(
    pinned: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    fake_upstream.push(text("{}"))

    response = pinned.responses.create(
        model="gpt-x", input="hi, in JSON", text={"format": {"type": "json_object"}}
    )

    assert response.model == PINNED
    assert fake_upstream.requests[0]["response_format"] == {"type": "json_object"}
    for absent in ("logprobs", "reasoning_effort", "service_tier", "prompt_cache_key"):
        assert absent not in fake_upstream.requests[0]


def test_the_stream_carries_the_logprobs_and_the_answering_model(
    start_server: StartServer, fake_upstream: FakeUpstream
) -> None:
    server = start_server("--upstream-base-url", fake_upstream.url)
    fake_upstream.push(text("hello there", model="gpt-x-2026"))
    with httpx.Client(base_url=server.url, timeout=30.0) as http:
        events = post_stream(http, model="gpt-x", input="hi", top_logprobs=1)

    checked_events(events)
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert [d["logprobs"][0]["token"] for d in deltas] == ["hello", " there"]
    assert fake_upstream.requests[0]["model"] == "gpt-x"  # passed through, not pinned
    assert events[-1]["response"]["model"] == "gpt-x-2026"


# -- truncation ------------------------------------------------------------------------

OVERFLOW = {
    "error": {
        "message": "This model's maximum context length is 16 tokens. However, you requested 40.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


def _two_turns(client: openai.OpenAI, fake: FakeUpstream) -> str:
    fake.push(text("first answer"), text("second answer"))
    first = client.responses.create(model="m", input="first question")
    second = client.responses.create(
        model="m", input="second question", previous_response_id=first.id
    )
    return second.id


def test_truncation_auto_drops_the_oldest_turns_when_the_context_overflows(
    pinned: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    previous = _two_turns(pinned, fake_upstream)
    fake_upstream.push(fault(400, body=OVERFLOW), text("third answer"))

    response = pinned.responses.create(
        model="m", input="third question", previous_response_id=previous, truncation="auto"
    )

    assert response.status == "completed", response.error
    assert response.output_text == "third answer"
    full, truncated = fake_upstream.requests[-2:]
    assert [m["content"] for m in full["messages"]] == [
        "first question",
        "first answer",
        "second question",
        "second answer",
        "third question",
    ]
    assert truncated["messages"] == full["messages"][2:]  # the oldest turn, whole


def test_without_truncation_an_overflow_fails_the_response_as_the_request_s_fault(
    pinned: openai.OpenAI, fake_upstream: FakeUpstream
) -> None:
    previous = _two_turns(pinned, fake_upstream)
    fake_upstream.push(fault(400, body=OVERFLOW))

    response = checked_response(
        pinned.responses.create(model="m", input="third question", previous_response_id=previous)
    )

    assert response.status == "failed"
    assert dump(response)["error"] == {
        "code": "invalid_prompt",
        "message": response.error.message if response.error else "",
        "type": "invalid_request_error",
        "param": None,
    }
    assert "maximum context length" in (response.error.message if response.error else "")
