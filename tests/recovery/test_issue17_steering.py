"""Issue 17: steering over WebSocket (`response.steer`), the runtime's part.

A steer commits before it is acknowledged, stops its running target at a safe point and
is applied once to a successor that continues the target; a target that waits for client
tool output keeps the steer pending until the client's continuation takes it; a target
that ends failed or cancelled hands the input back. The socket (server/) only carries
these; the WebSocket tests drive the same paths through the SDK.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from recovery import (
    Agent,
    FunctionCallDelta,
    ModelEvent,
    ModelRequest,
    Runtime,
    RuntimeSettings,
    SteerRefused,
    TextDelta,
    normalize_input,
    open_store,
    text_of,
    tool,
)
from recovery._turn import Stop

FAST = RuntimeSettings(scan_interval=0.1, heartbeat_interval=0.05, max_pending_steers=3)

gate: dict[str, asyncio.Event] = {}  # one event per test (each test has its own loop)


@tool
async def wait_for_release() -> str:
    """A server tool whose body is running while the test steers."""
    gate["started"].set()
    await gate["release"].wait()
    return "released"


class Scripted:
    """Answers by the last user message: `slow` streams one word and then nothing (until a
    stop cuts it), `client` asks for a client tool, `server` calls `wait_for_release`;
    anything else is echoed."""

    name = "scripted"

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []
        self.called = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.requests.append(request)
        self.called.set()
        last = request.input[-1]
        said = text_of(last) if last.get("type", "message") == "message" else ""
        if last.get("type") == "function_call_output":
            yield TextDelta("tool done")
        elif said == "slow":
            yield TextDelta("Once upon ")
            await asyncio.Event().wait()
        elif said == "client":
            yield FunctionCallDelta("call_c", "client_tool", "{}")
        elif said == "server":
            yield FunctionCallDelta("call_s", "wait_for_release", "{}")
        else:
            yield TextDelta(f"echo: {said}")


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[tuple[Runtime, Scripted]]:
    gate["release"], gate["started"] = asyncio.Event(), asyncio.Event()
    model = Scripted()
    async with (
        open_store(tmp_path / "steer.db") as store,
        Runtime(store, Agent(tools=[wait_for_release]), model, FAST).running() as running,
    ):
        yield running, model


CLIENT_TOOL = {"type": "function", "name": "client_tool", "parameters": {"type": "object"}}


async def start(runtime: Runtime, said: str, **params: Any) -> str:
    body = {"model": "m", "input": normalize_input(said), "background": True, **params}
    record, _ = await runtime.create(body, tenant="t")
    return record.id


async def final(runtime: Runtime, response_id: str) -> dict[str, Any]:
    return await asyncio.wait_for(runtime.wait_final(response_id, "t"), 10)


async def tool_running() -> None:
    await asyncio.wait_for(gate["started"].wait(), 10)


async def cancel_while_the_tool_runs(rt: Runtime, response_id: str) -> None:
    """Cancel, then let the tool body end (the cancel waits for it)."""
    cancelling = asyncio.create_task(rt.cancel(response_id, "t"))
    await asyncio.sleep(0.05)
    gate["release"].set()
    await cancelling


def says(text: str) -> list[dict[str, Any]]:
    return normalize_input([{"role": "user", "content": text}])


async def test_a_steer_cuts_the_answer_and_a_successor_continues_with_the_input(
    runtime: tuple[Runtime, Scripted],
) -> None:
    rt, model = runtime
    target = await start(rt, "slow")
    await asyncio.wait_for(model.called.wait(), 10)

    accepted = await rt.steer(target, says("actually, be brief"), tenant="t")
    [outcome] = await asyncio.wait_for(rt.steer_outcomes(target, tenant="t"), 10)

    ended = await final(rt, target)
    assert (ended["status"], ended["incomplete_details"]) == ("incomplete", {"reason": "steered"})
    assert outcome.state == "applied" and outcome.steer_id == accepted.id
    assert outcome.successor_id is not None
    successor = await final(rt, outcome.successor_id)
    assert successor["status"] == "completed"
    assert successor["previous_response_id"] == target
    assert successor["output"][-1]["content"][0]["text"] == "echo: actually, be brief"
    # The successor's model saw the target's cut answer, then the steer.
    history = model.requests[-1].input
    assert [text_of(i) for i in history[-3:]] == ["slow", "Once upon ", "actually, be brief"]


async def test_steers_sent_while_a_tool_runs_share_one_successor_in_order(
    runtime: tuple[Runtime, Scripted],
) -> None:
    rt, model = runtime
    target = await start(rt, "server")
    await tool_running()

    first = await rt.steer(target, says("one"), tenant="t")
    second = await rt.steer(target, says("two"), tenant="t")
    gate["release"].set()
    outcomes = await asyncio.wait_for(rt.steer_outcomes(target, tenant="t"), 10)

    ended = await final(rt, target)
    assert ended["status"] == "incomplete"
    # The running tool body finished and was recorded before the stop.
    assert [o["type"] for o in ended["output"]] == ["function_call", "function_call_output"]
    assert [o.steer_id for o in outcomes] == [first.id, second.id]
    assert {o.state for o in outcomes} == {"applied"}
    assert outcomes[0].successor_id == outcomes[1].successor_id
    successor = outcomes[0].successor_id
    assert successor is not None
    await final(rt, successor)
    assert [text_of(i) for i in model.requests[-1].input[-2:]] == ["one", "two"]


async def test_a_steer_of_a_response_waiting_for_a_client_tool_is_pending_until_continued(
    runtime: tuple[Runtime, Scripted],
) -> None:
    rt, model = runtime
    target = await start(rt, "client", tools=[CLIENT_TOOL])
    ended = await final(rt, target)
    assert ended["output"][-1]["type"] == "function_call"

    accepted = await rt.steer(target, says("also check the weather"), tenant="t")
    [pending] = await rt.steer_outcomes(target, tenant="t")
    assert (pending.state, pending.steer_id) == ("pending", accepted.id)
    assert pending.required_input == [
        {"type": "function_call_output", "call_id": "call_c", "name": "client_tool"}
    ]

    output = {"type": "function_call_output", "call_id": "call_c", "output": "sunny"}
    body = {"model": "m", "input": normalize_input([output]), "previous_response_id": target}
    body["tools"] = [CLIENT_TOOL]
    record, _ = await rt.create({**body, "background": True}, tenant="t")
    await final(rt, record.id)

    sent = model.requests[-1].input
    assert [i.get("type", "message") for i in sent[-3:]] == [
        "function_call",
        "function_call_output",
        "message",
    ]
    assert text_of(sent[-1]) == "also check the weather"
    [taken] = await rt.steer_outcomes(target, tenant="t")
    assert taken.state == "pending"  # it was pending; the continuation took it
    # Taken once; and a continued response takes no more steers.
    assert [i.get("content") for i in sent].count(sent[-1]["content"]) == 1
    with pytest.raises(SteerRefused) as continued:
        await rt.steer(target, says("more"), tenant="t")
    assert continued.value.code == "response_already_completed"


async def test_a_steer_of_a_response_then_cancelled_fails_and_hands_the_input_back(
    runtime: tuple[Runtime, Scripted],
) -> None:
    rt, _model = runtime
    target = await start(rt, "server")
    await tool_running()

    await rt.steer(target, says("never mind"), tenant="t")
    await cancel_while_the_tool_runs(rt, target)
    [outcome] = await asyncio.wait_for(rt.steer_outcomes(target, tenant="t"), 10)

    assert (await final(rt, target))["status"] == "cancelled"
    assert (outcome.state, outcome.code) == ("failed", "successor_creation_failed")
    assert [text_of(i) for i in outcome.input] == ["never mind"]


async def test_steers_are_refused_with_the_sdk_codes(runtime: tuple[Runtime, Scripted]) -> None:
    rt, _model = runtime

    async def refused(target: str, tenant: str = "t") -> str:
        with pytest.raises(SteerRefused) as error:
            await rt.steer(target, says("x"), tenant=tenant)
        return error.value.code

    done = await start(rt, "hello")
    await final(rt, done)
    running = await start(rt, "server")
    await tool_running()
    for _ in range(3):
        await rt.steer(running, says("x"), tenant="t")

    assert await refused("resp_nope") == "response_not_found"
    assert await refused(running, tenant="another tenant") == "response_not_found"
    assert await refused(done) == "response_already_completed"
    assert await refused(running) == "too_many_pending_steers"
    await cancel_while_the_tool_runs(rt, running)
    await final(rt, running)
    assert await refused(running) == "response_not_active"


async def test_a_steer_deleted_with_its_response_reads_as_failed(
    runtime: tuple[Runtime, Scripted],
) -> None:
    rt, _model = runtime
    done = await start(rt, "hello")
    await final(rt, done)
    await rt.delete(done, "t")

    [outcome] = await rt.steer_outcomes(done, tenant="t", steer_ids=["steer_gone"])

    assert (outcome.state, outcome.code) == ("failed", "response_not_found")


def test_the_strongest_stop_request_decides_and_a_steer_is_remembered() -> None:
    steered_then_rolled_back = Stop()
    steered_then_rolled_back.request("steer")
    steered_then_rolled_back.request("rollback")
    cancelled_then_steered = Stop()
    cancelled_then_steered.request("cancelled")
    cancelled_then_steered.request("steer")

    assert (steered_then_rolled_back.reason, steered_then_rolled_back.steered) == (
        "rollback",
        True,
    )
    assert (cancelled_then_steered.reason, cancelled_then_steered.steered) == ("cancelled", True)
