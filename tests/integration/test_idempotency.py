"""Retried creates do not run twice (docs/guarantees.md G11; issue 5): a POST /v1/responses
with an `Idempotency-Key` that was already used returns the first response and starts
nothing, whether the client repeats it on purpose or the openai SDK retries it after a
timeout. Runs are counted with a server tool that appends to a file per call."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest

from tests.conftest import StartServer, make_client
from tests.integration._responses_support import MODEL, checked_events, sse_events, types
from tests.support.peek import count
from tests.support.schemas import validate_error_envelope
from tests.support.server import ServerProcess
from tests.support.side_effects import effects
from tests.support.stream_rules import parse_sse
from tests.support.waiting import DEADLINE, wait_terminal

AGENT = ("--agent", "tests.agents.tool_agent:agent")

Event = dict[str, Any]


def email(to: str) -> str:
    """A prompt whose turn sends one email (a non-idempotent server tool) to `to`."""
    return f'[[call send_email {{"to": "{to}"}}]]'


def new_key() -> str:
    return f"key-{uuid.uuid4()}"


@pytest.fixture
def effects_dir(tmp_path: Path) -> Path:
    return tmp_path / "effects"


@pytest.fixture
def tool_server(start_server: StartServer, effects_dir: Path) -> ServerProcess:
    return start_server(*AGENT, env={"SIDE_EFFECTS_DIR": str(effects_dir)})


@pytest.fixture
def http(tool_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=tool_server.url, timeout=DEADLINE) as client:
        yield client


@pytest.fixture
def sdk(tool_server: ServerProcess) -> Iterator[openai.OpenAI]:
    with make_client(tool_server.url) as client:
        yield client


def post(http: httpx.Client, key: str, body: dict[str, Any]) -> httpx.Response:
    return http.post("/v1/responses", json=body, headers={"Idempotency-Key": key})


def post_stream(http: httpx.Client, key: str, body: dict[str, Any]) -> list[Event]:
    with http.stream(
        "POST", "/v1/responses", json=body, headers={"Idempotency-Key": key}
    ) as response:
        response.read()
    return checked_events(sse_events(response))


def sent_emails(folder: Path) -> list[str]:
    return [to for _, to in effects(folder, "send_email")]


# -- an explicit repeat --------------------------------------------------------------------


def test_a_repeated_plain_create_returns_the_first_response(
    http: httpx.Client, effects_dir: Path
) -> None:
    key, body = new_key(), {"model": MODEL, "input": email("plain")}

    first = post(http, key, body)
    again = [post(http, key, body) for _ in range(2)]

    assert first.status_code == 200, first.text
    assert first.json()["status"] == "completed"
    assert [r.status_code for r in again] == [200, 200]
    assert [r.json() for r in again] == [first.json()] * 2
    assert sent_emails(effects_dir) == ["plain"]


def test_a_repeated_streaming_create_streams_the_first_response(
    http: httpx.Client, effects_dir: Path
) -> None:
    key, body = new_key(), {"model": MODEL, "input": email("stream"), "stream": True}

    first = post_stream(http, key, body)
    again = post_stream(http, key, body)

    assert first[-1]["type"] == again[-1]["type"] == "response.completed"
    assert again[-1]["response"] == first[-1]["response"]
    assert http.get(f"/v1/responses/{first[-1]['response']['id']}").json() == first[-1]["response"]
    added = [e["item"]["id"] for e in again if e["type"] == "response.output_item.added"]
    assert added == [item["id"] for item in first[-1]["response"]["output"]]
    assert sent_emails(effects_dir) == ["stream"]


def test_a_streaming_repeat_of_a_running_foreground_create_waits_and_streams_its_end(
    tool_server: ServerProcess, http: httpx.Client
) -> None:
    key = new_key()
    body = {"model": MODEL, "input": "slow [[words 40]] [[delay 30]]", "stream": True}
    lines: list[str] = []
    started = threading.Event()

    def first_request() -> None:
        with (
            httpx.Client(base_url=tool_server.url, timeout=DEADLINE) as own,
            own.stream(
                "POST", "/v1/responses", json=body, headers={"Idempotency-Key": key}
            ) as response,
        ):
            for line in response.iter_lines():
                lines.append(line)
                if "response.output_text.delta" in line:
                    started.set()

    original = threading.Thread(target=first_request, daemon=True)
    original.start()
    try:
        assert started.wait(DEADLINE), "the first request's turn did not start"
        again = post_stream(http, key, body)  # sent while the first turn still runs
    finally:
        original.join(DEADLINE)

    first = checked_events(parse_sse("\n".join(lines) + "\n"))
    assert again[-1]["type"] == "response.completed"
    assert again[-1]["response"] == first[-1]["response"]
    assert again[-1]["response"]["output"][0]["content"][0]["text"].split() == ["slow"] * 40


@pytest.mark.parametrize(
    "stream", [pytest.param(False, id="background"), pytest.param(True, id="background-stream")]
)
def test_a_repeated_background_create_returns_the_same_response(
    http: httpx.Client, effects_dir: Path, stream: bool
) -> None:
    key = new_key()
    body = {"model": MODEL, "input": email("bg"), "background": True, "stream": stream}

    if stream:
        first = post_stream(http, key, body)
        again = post_stream(http, key, body)
        assert again == first  # the same event log, replayed from the start
        response_id = first[0]["response"]["id"]
        assert types(first)[:2] == ["response.created", "response.queued"]
        assert first[-1]["type"] == "response.completed"
    else:
        created = post(http, key, body)
        repeats = [post(http, key, body) for _ in range(2)]
        response_id = created.json()["id"]
        assert created.json()["status"] == "queued"
        assert {r.json()["id"] for r in repeats} == {response_id}
        final = wait_terminal(http, response_id)
        assert final["status"] == "completed"
        assert post(http, key, body).json() == final  # a late repeat: the same, finished

    assert sent_emails(effects_dir) == ["bg"]
    assert http.get(f"/v1/responses/{response_id}").json()["status"] == "completed"


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"input": email("someone else")}, id="other-input"),
        pytest.param({"background": True}, id="now-background"),
        pytest.param({"instructions": "be brief"}, id="added-field"),
    ],
)
def test_a_reused_key_with_a_different_body_is_refused(
    http: httpx.Client, effects_dir: Path, change: dict[str, Any]
) -> None:
    key, body = new_key(), {"model": MODEL, "input": email("original")}
    first = post(http, key, body).json()

    refused = post(http, key, {**body, **change})

    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "idempotency_key_reused"
    assert error["type"] == "invalid_request_error"
    assert key in error["message"]
    assert sent_emails(effects_dir) == ["original"]  # nothing new ran
    assert post(http, key, body).json() == first  # and the key still means the first one


def test_the_sdk_refuses_a_reused_key_without_retrying(
    tool_server: ServerProcess, effects_dir: Path
) -> None:
    sent: list[httpx2.Request] = []
    counting = httpx2.Client(event_hooks={"request": [sent.append]})
    key = new_key()
    with openai.OpenAI(
        base_url=f"{tool_server.url}/v1", api_key="test-key", max_retries=3, http_client=counting
    ) as sdk:
        sdk.responses.create(
            model=MODEL, input=email("one"), extra_headers={"Idempotency-Key": key}
        )
        with pytest.raises(openai.BadRequestError) as caught:
            sdk.responses.create(
                model=MODEL, input=email("two"), extra_headers={"Idempotency-Key": key}
            )

    assert caught.value.code == "idempotency_key_reused"
    assert len(sent) == 2
    assert sent_emails(effects_dir) == ["one"]


def test_two_keys_in_one_create_are_refused_and_run_nothing(
    tool_server: ServerProcess, http: httpx.Client, effects_dir: Path
) -> None:
    """Which of two keys a retry would repeat cannot be known: a 400 naming the header."""
    headers = [("Idempotency-Key", new_key()), ("Idempotency-Key", new_key())]

    answer = http.post(
        "/v1/responses", json={"model": MODEL, "input": email("two keys")}, headers=headers
    )

    assert answer.status_code == 400, answer.text
    validate_error_envelope(answer.json())
    error = answer.json()["error"]
    assert (error["param"], error["code"]) == ("Idempotency-Key", "invalid_value")
    assert count(tool_server.db, "SELECT count(*) FROM responses") == 0
    assert sent_emails(effects_dir) == []


def test_keys_are_independent(http: httpx.Client, effects_dir: Path) -> None:
    body = {"model": MODEL, "input": email("twice")}

    first = post(http, new_key(), body).json()
    second = post(http, new_key(), body).json()
    unkeyed = http.post("/v1/responses", json=body).json()

    assert len({first["id"], second["id"], unkeyed["id"]}) == 3
    assert sent_emails(effects_dir) == ["twice"] * 3


# -- the SDK retries a create after a dropped connection ------------------------------------


def conversation_items(http: httpx.Client, conversation_id: str) -> list[dict[str, Any]]:
    page = http.get(
        f"/v1/conversations/{conversation_id}/items", params={"order": "asc", "limit": 100}
    ).json()
    items: list[dict[str, Any]] = page["data"]
    return items


@pytest.mark.parametrize(
    "strategy",
    [
        pytest.param(None, id="default-strategy"),
        pytest.param("reject", id="reject"),  # the retry must not be locked out by itself
    ],
)
def test_a_create_retried_by_the_sdk_after_a_timeout_runs_once(
    tool_server: ServerProcess,
    http: httpx.Client,
    sdk: openai.OpenAI,
    effects_dir: Path,
    strategy: str | None,
) -> None:
    conversation = sdk.conversations.create()
    sent: list[httpx2.Request] = []
    counting = httpx2.Client(event_hooks={"request": [sent.append]})
    impatient = openai.OpenAI(
        base_url=f"{tool_server.url}/v1",
        api_key="test-key",
        timeout=0.5,
        max_retries=4,
        http_client=counting,
    )
    extra_body = {"multitask_strategy": strategy} if strategy else None

    with impatient:
        response = impatient.responses.create(
            model=MODEL,
            input='[[call wait_a_bit {"seconds": 1.5}]]',  # outlasts the client's timeout
            conversation=conversation.id,
            extra_headers={"Idempotency-Key": new_key()},
            extra_body=extra_body,
        )

    posts = [r for r in sent if r.method == "POST"]
    assert len(posts) >= 2  # the SDK did time out and retry
    assert len({r.headers["x-stainless-retry-count"] for r in posts}) == len(posts)
    assert len({r.content for r in posts}) == 1  # a retry sends the same body
    assert response.status == "completed"
    assert "wait_a_bit -> waited 1.5" in response.output_text
    assert len(effects(effects_dir, "wait_a_bit")) == 1
    assert sdk.responses.retrieve(response.id).model_dump(mode="json") == response.model_dump(
        mode="json"
    )
    # One response in the conversation, not one per attempt.
    inputs = http.get(f"/v1/responses/{response.id}/input_items", params={"order": "asc"})
    expected = inputs.json()["data"] + response.model_dump(mode="json")["output"]
    items = conversation_items(http, conversation.id)
    assert [i["id"] for i in items] == [i["id"] for i in expected]
    assert [i["type"] for i in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]


def test_a_background_create_retried_by_the_sdk_is_accepted_once(
    tool_server: ServerProcess, sdk: openai.OpenAI, effects_dir: Path
) -> None:
    """The first attempt's answer is lost (the client gave up before reading it); the
    retry gets the same background response."""
    key = new_key()
    body = {"model": MODEL, "input": email("lost answer"), "background": True}
    with httpx.Client(base_url=tool_server.url, timeout=DEADLINE) as http:
        with http.stream("POST", "/v1/responses", json=body, headers={"Idempotency-Key": key}):
            pass  # the connection is closed without reading the body
        retried = sdk.responses.create(
            model=MODEL,
            input=email("lost answer"),
            background=True,
            extra_headers={"Idempotency-Key": key},
        )
    final = wait_terminal(sdk, retried.id)

    assert final.status == "completed"
    assert sent_emails(effects_dir) == ["lost answer"]
