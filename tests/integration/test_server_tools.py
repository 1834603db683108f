"""Server-side tools run by the server through its journal (docs/guarantees.md G3, G5, G6),
observed from outside: the SDK's view of the response and the tools' side-effect files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import StartServer, make_client
from tests.support.schemas import validate_event, validate_response
from tests.support.server import ServerProcess
from tests.support.side_effects import effects, runs_per_key
from tests.support.stream_rules import check_stream, parse_sse
from tests.support.waiting import wait_terminal

AGENT = ("--agent", "tests.agents.tool_agent:agent")


@pytest.fixture
def effects_dir(tmp_path: Path) -> Path:
    return tmp_path / "effects"


@pytest.fixture
def tool_server(start_server: StartServer, effects_dir: Path) -> ServerProcess:
    return start_server(*AGENT, env={"SIDE_EFFECTS_DIR": str(effects_dir)})


@pytest.fixture
def sdk(tool_server: ServerProcess) -> Iterator[openai.OpenAI]:
    with make_client(tool_server.url, _strict_response_validation=False) as client:
        yield client


def kinds(output: list[dict[str, object]]) -> list[object]:
    return [item["type"] for item in output]


def test_a_server_tool_runs_once_and_its_output_reaches_the_model(
    sdk: openai.OpenAI, effects_dir: Path
) -> None:
    response = sdk.responses.create(model="m", input='[[call lookup {"city": "Paris"}]]')

    body = response.model_dump(mode="json", exclude_unset=True)
    validate_response(body)
    assert response.status == "completed"
    assert kinds(body["output"]) == ["function_call", "function_call_output", "message"]
    call, output, _message = body["output"]
    assert call["name"] == "lookup" and json.loads(call["arguments"]) == {"city": "Paris"}
    assert output["call_id"] == call["call_id"]
    assert json.loads(output["output"]) == {"city": "Paris", "forecast": "sunny"}
    assert "lookup ->" in response.output_text and "sunny" in response.output_text
    assert [detail for _, detail in effects(effects_dir, "lookup")] == ["Paris"]


def test_polling_and_replaying_never_run_a_tool_again(
    tool_server: ServerProcess, sdk: openai.OpenAI, effects_dir: Path
) -> None:
    created = sdk.responses.create(
        model="m", input='[[call send_email {"to": "a@example.com"}]]', background=True
    )
    with httpx.Client(base_url=tool_server.url, timeout=30) as http:
        first = parse_sse(http.get(f"/v1/responses/{created.id}?stream=true").text)
        for _ in range(3):
            assert sdk.responses.retrieve(created.id).status == "completed"
            again = parse_sse(http.get(f"/v1/responses/{created.id}?stream=true").text)
            assert again == first

    check_stream(first)
    for event in first:
        validate_event(event)
    assert len(effects(effects_dir, "send_email")) == 1


def test_parallel_calls_run_concurrently_and_one_failing_does_not_stop_the_other(
    sdk: openai.OpenAI, effects_dir: Path
) -> None:
    response = sdk.responses.create(
        model="m",
        input='[[call lookup {"city": "Oslo"}]] [[call explode {"reason": "no luck"}]]',
    )

    body = response.model_dump(mode="json", exclude_unset=True)
    assert response.status == "completed"
    assert kinds(body["output"]) == [
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
        "message",
    ]
    outputs = {o["call_id"]: o["output"] for o in body["output"] if o["type"].endswith("output")}
    by_name = {
        c["name"]: outputs[c["call_id"]] for c in body["output"] if c["type"] == "function_call"
    }
    assert "Oslo" in by_name["lookup"]
    assert by_name["explode"] == "Error: tool 'explode' failed: ValueError: no luck"
    assert len(effects(effects_dir, "lookup")) == 1


@pytest.mark.parametrize(
    ("directive", "expected"),
    [
        pytest.param(
            '[[call lookup {"town": "Rome"}]]',
            "Error: invalid arguments for tool 'lookup'",
            id="unknown-argument",
        ),
        pytest.param(
            "[[call lookup {}]]",
            "Error: invalid arguments for tool 'lookup'",
            id="missing-argument",
        ),
        pytest.param("[[call lookup not-json]]", "arguments are not valid JSON", id="not-json"),
        pytest.param(
            "[[call dawdle {}]]", "Error: tool 'dawdle' timed out after 0.2s", id="timeout"
        ),
    ],
)
def test_a_bad_call_becomes_an_error_output_the_model_sees(
    sdk: openai.OpenAI, effects_dir: Path, directive: str, expected: str
) -> None:
    response = sdk.responses.create(model="m", input=directive)

    body = response.model_dump(mode="json", exclude_unset=True)
    assert response.status == "completed"
    output = next(item for item in body["output"] if item["type"] == "function_call_output")
    assert expected in output["output"]
    assert expected.split(":")[0] in response.output_text  # the model was told
    assert effects(effects_dir, "lookup") == []


def test_a_sync_tool_runs_in_a_thread(sdk: openai.OpenAI, effects_dir: Path) -> None:
    response = sdk.responses.create(model="m", input='[[call shout {"text": "hey"}]]')

    assert "HEY" in response.output_text
    assert effects(effects_dir, "shout") == [("-", "hey")]


def test_steps_follow_one_another_and_each_tool_runs_once(
    sdk: openai.OpenAI, effects_dir: Path
) -> None:
    response = sdk.responses.create(
        model="m",
        input='[[call lookup {"city": "A"}]] [[next]] [[call lookup {"city": "B"}]]',
        stream=False,
    )

    body = response.model_dump(mode="json", exclude_unset=True)
    assert kinds(body["output"]) == [
        "function_call",
        "function_call_output",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert [d for _, d in effects(effects_dir, "lookup")] == ["A", "B"]
    assert all(n == 1 for n in runs_per_key(effects_dir, "lookup").values())


def test_server_and_client_tools_mix_in_one_turn(sdk: openai.OpenAI, effects_dir: Path) -> None:
    client_tool = {
        "type": "function",
        "name": "ask_user",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
    first = sdk.responses.create(
        model="m",
        input='[[call lookup {"city": "Lima"}]] [[call ask_user {"q": "ok?"}]]',
        tools=[client_tool],  # type: ignore[list-item]
    )
    body = first.model_dump(mode="json", exclude_unset=True)
    assert first.status == "completed"
    assert kinds(body["output"]) == ["function_call", "function_call", "function_call_output"]
    pending = next(
        i for i in body["output"] if i["type"] == "function_call" and i["name"] == "ask_user"
    )

    second = sdk.responses.create(
        model="m",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": pending["call_id"], "output": "yes"}],
        tools=[client_tool],  # type: ignore[list-item]
    )

    assert second.status == "completed"
    assert "ask_user -> yes" in second.output_text
    assert len(effects(effects_dir, "lookup")) == 1


def test_a_client_call_can_be_answered_as_soon_as_it_is_published(
    sdk: openai.OpenAI, effects_dir: Path
) -> None:
    """A step's calls are published with its step record, while its server tools still
    run and before its snapshot holds them: a client that answers its own call at once,
    continuing the running response, is accepted (its turn waits in the lane). Before,
    it was refused tool_call_not_found, for a call the server had just published."""
    client_tool: Any = {
        "type": "function",
        "name": "ask_user",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
    stream = sdk.responses.create(
        model="m",
        input='go [[call wait_a_bit {"seconds": 2}]] [[call ask_user {"q": "ok?"}]]',
        tools=[client_tool],
        background=True,
        stream=True,
    )
    first_id, call_id = published_call(stream)
    assert sdk.responses.retrieve(first_id).status == "in_progress", "the server tool still runs"

    second = sdk.responses.create(
        model="m",
        previous_response_id=first_id,
        input=[{"type": "function_call_output", "call_id": call_id, "output": "yes"}],
        tools=[client_tool],
        background=True,
    )

    final = wait_terminal(sdk, second.id)
    assert final.status == "completed", final.error
    assert "ask_user -> yes" in final.output_text
    assert len(effects(effects_dir, "wait_a_bit")) == 1


def published_call(stream: Any) -> tuple[str, str]:
    """(response id, call id) of the first `ask_user` call the stream publishes."""
    first_id = ""
    with stream:
        for event in stream:
            if event.type == "response.created":
                first_id = event.response.id
            if event.type == "response.output_item.done" and getattr(event.item, "name", "") == (
                "ask_user"
            ):
                return first_id, event.item.call_id
    raise AssertionError("no ask_user call was published")


def test_a_conversations_client_call_can_be_answered_as_soon_as_it_is_published(
    sdk: openai.OpenAI, effects_dir: Path
) -> None:
    """As above, in a conversation: the answer queues behind the running turn, whose
    published calls count as its history. Before, it was refused tool_call_not_found."""
    conversation, first_id, call_id = answer_early(sdk)
    assert sdk.responses.retrieve(first_id).status == "in_progress", "the server tool still runs"

    second = sdk.responses.retrieve(answer(sdk, conversation, call_id))

    assert second.status == "queued"
    final = wait_terminal(sdk, second.id)
    assert final.status == "completed", final.error
    assert "ask_user -> yes" in final.output_text
    assert len(effects(effects_dir, "wait_a_bit")) == 1
    items = sdk.conversations.items.list(conversation, order="asc", limit=100).data
    kinds = [(i.type, getattr(i, "call_id", None)) for i in items]
    assert kinds.index(("function_call", call_id)) < kinds.index(("function_call_output", call_id))


def test_a_tool_choice_may_name_allow_or_require_the_servers_own_tools(
    sdk: openai.OpenAI, effects_dir: Path
) -> None:
    """`tool_choice` names or needs tools the turn has: the server's own count, with none
    declared in `tools` (a name that is neither is a 400, tests/integration/test_bad_input.py)."""
    allowed: Any = {
        "type": "allowed_tools",
        "mode": "auto",
        "tools": [{"type": "function", "name": "lookup"}],
    }
    named: Any = {"type": "function", "name": "lookup"}
    for choice in (allowed, named, "required"):
        response = sdk.responses.create(
            model="m", input='[[call lookup {"city": "Oslo"}]]', tool_choice=choice
        )
        assert response.status == "completed"
    tokens = sdk.responses.input_tokens.count(model="m", input="hi", tool_choice=named)
    assert tokens.input_tokens > 0
    assert len(effects(effects_dir, "lookup")) == 3


def test_declaring_a_server_tool_as_a_client_tool_is_refused(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(
            model="m",
            input="hi",
            tools=[{"type": "function", "name": "lookup", "parameters": {}}],  # type: ignore[list-item]
        )
    assert caught.value.param == "tools[0].name"


@pytest.mark.parametrize(
    ("directive", "reason", "runs"),
    [
        pytest.param(
            '[[call lookup {"city": "1"}]] [[call lookup {"city": "2"}]]'
            ' [[call lookup {"city": "3"}]]',
            "max_tool_calls",
            2,
            id="tool-calls",
        ),
        pytest.param(
            '[[call lookup {"city": "1"}]] [[next]] [[call lookup {"city": "2"}]] [[next]]'
            ' [[call lookup {"city": "3"}]]',
            "max_steps",
            2,
            id="steps",
        ),
    ],
)
def test_budgets_end_the_turn_incomplete(
    start_server: StartServer, effects_dir: Path, directive: str, reason: str, runs: int
) -> None:
    server = start_server(
        "--agent",
        "tests.agents.tool_agent:small_budget",
        env={"SIDE_EFFECTS_DIR": str(effects_dir)},
    )
    with make_client(server.url) as sdk:
        response = sdk.responses.create(model="m", input=directive)

    body = response.model_dump(mode="json", exclude_unset=True)
    assert response.status == "incomplete"
    assert body["incomplete_details"] == {"reason": reason}
    assert len(effects(effects_dir, "lookup")) == runs
    calls = [i["call_id"] for i in body["output"] if i["type"] == "function_call"]
    answered = [i["call_id"] for i in body["output"] if i["type"] == "function_call_output"]
    assert sorted(calls) == sorted(answered)  # tool-consistent even when cut short (G5)


def test_the_request_max_tool_calls_lowers_the_budget(
    sdk: openai.OpenAI, effects_dir: Path
) -> None:
    response = sdk.responses.create(
        model="m",
        input='[[call lookup {"city": "1"}]] [[call lookup {"city": "2"}]]',
        max_tool_calls=1,
    )

    assert response.status == "incomplete"
    assert len(effects(effects_dir, "lookup")) == 1


ASK_USER: Any = {
    "type": "function",
    "name": "ask_user",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
}


def answer_early(sdk: openai.OpenAI) -> tuple[str, str, str]:
    """(conversation, running response, call id): a call published while a tool runs."""
    conversation = sdk.conversations.create().id
    stream = sdk.responses.create(
        model="m",
        input='go [[call wait_a_bit {"seconds": 3}]] [[call ask_user {"q": "ok?"}]]',
        conversation=conversation,
        tools=[ASK_USER],
        background=True,
        stream=True,
    )
    first_id, call_id = published_call(stream)
    return conversation, first_id, call_id


def answer(sdk: openai.OpenAI, conversation: str, call_id: str) -> str:
    return sdk.responses.create(
        model="m",
        conversation=conversation,
        input=[{"type": "function_call_output", "call_id": call_id, "output": "yes"}],
        tools=[ASK_USER],
        background=True,
    ).id


def held(sdk: openai.OpenAI, conversation: str, call_id: str) -> list[str]:
    items = sdk.conversations.items.list(conversation, order="asc", limit=100).data
    return [i.type for i in items if getattr(i, "call_id", None) == call_id]


def test_an_early_answer_to_a_turn_that_ends_cancelled_fails_at_its_start(
    sdk: openai.OpenAI,
) -> None:
    """The answered turn is cancelled, so the call never reaches the conversation: the
    answer's turn fails tool_call_not_found when it starts, and stores nothing. Before,
    the conversation kept the output without its call."""
    conversation, first_id, call_id = answer_early(sdk)
    second = answer(sdk, conversation, call_id)
    sdk.responses.cancel(first_id)

    ended = wait_terminal(sdk, second)
    assert ended.status == "failed" and ended.error is not None
    assert ended.error.code == "tool_call_not_found"
    assert held(sdk, conversation, call_id) == []


def test_a_second_early_answer_to_one_call_fails_at_its_start(sdk: openai.OpenAI) -> None:
    conversation, _, call_id = answer_early(sdk)
    second, third = answer(sdk, conversation, call_id), answer(sdk, conversation, call_id)

    assert wait_terminal(sdk, second).status == "completed"
    ended = wait_terminal(sdk, third)
    assert ended.status == "failed" and ended.error is not None
    assert ended.error.code == "duplicate_tool_output"
    assert held(sdk, conversation, call_id) == ["function_call", "function_call_output"]
