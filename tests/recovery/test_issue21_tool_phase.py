"""Issue 21, in process and in milliseconds: the tool phase never abandons a body that
may still act, and records what happened (the subprocess tests are in
tests/crash/test_issue21_shutdown_tool_bodies.py and
tests/integration/test_issue21_tool_outcomes.py).

- A turn cancelled while a plain tool's thread runs waits for the thread, records its
  outcome, and only then lets the cancellation through (the lease stays held).
- A CancelledError a body raises by itself is its failure, recorded `errored`.
- A thread past its timeout has an unknown outcome, not a failure (G4).
- A turn cancelled while a call's claim is being written still runs that body (the claim
  commits anyway), so no claim is left that no body answers.
- A call not yet started when the turn was asked to stop is answered without running (G9).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from recovery import Agent, Observer, RuntimeSettings, ToolContext, tool
from recovery._errors import ToolOutcomeUnknown
from recovery._tool_phase import ToolPhase
from recovery._turn import Stop, Turn
from store import Admission, Fence, SQLiteStore, open_store
from tests.store.test_sqlite import new_response

FENCE = Fence("me", 1)
effects: list[str] = []
released = threading.Event()


@tool
def send(ctx: ToolContext, to: str) -> str:
    """A blocking client in a thread, held until the test releases it."""
    released.wait(5)
    effects.append(to)
    return f"sent to {to}"


@tool(timeout=0.05)
def slow(ctx: ToolContext) -> str:
    released.wait(5)
    effects.append("slow")
    return "done"


@tool
async def hang_up(ctx: ToolContext) -> str:
    reply: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(reply.cancel)
    return await reply


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    effects.clear()
    released.clear()
    async with open_store(tmp_path / "r.db") as opened:
        await opened.create_response(new_response("resp_1", owner="me"), [], [], Admission())
        yield opened
    released.set()


def _phase(store: SQLiteStore, *, stopping: bool = False) -> ToolPhase:
    stop = Stop()
    if stopping:
        stop.request("cancelled")
    turn = Turn("resp_1", FENCE, store, RuntimeSettings(), Observer(), stop)
    return ToolPhase(turn, Agent(tools=[send, slow, hang_up]))


def _call(name: str, arguments: str = "{}") -> dict[str, Any]:
    return {"type": "function_call", "call_id": "call_0", "name": name, "arguments": arguments}


async def test_a_cancelled_turn_waits_for_its_thread_and_records_what_it_did(
    store: SQLiteStore,
) -> None:
    run = asyncio.ensure_future(_phase(store).run([_call("send", '{"to": "ops"}')], 8, step=3))
    await asyncio.sleep(0.05)
    run.cancel()
    await asyncio.sleep(0.05)
    assert not run.done(), "the turn ended while its tool's thread could still act"

    released.set()
    with pytest.raises(asyncio.CancelledError):
        await run

    assert effects == ["ops"]
    [entry] = await store.journal("resp_1", 3)
    assert (entry.state, entry.output) == ("completed", "sent to ops")


async def test_a_body_s_own_cancelled_error_is_its_failure(store: SQLiteStore) -> None:
    [output] = await _phase(store).run([_call("hang_up")], 8, step=0)

    assert output["output"].startswith("Error: tool 'hang_up' failed: CancelledError")
    [entry] = await store.journal("resp_1", 0)
    assert (entry.state, entry.output) == ("errored", output["output"])


async def test_a_plain_thread_past_its_timeout_fails_the_turn_closed_not_the_call(
    store: SQLiteStore,
) -> None:
    started = time.monotonic()
    with pytest.raises(ToolOutcomeUnknown, match="may still take effect"):
        await _phase(store).run([_call("slow")], 8, step=0)

    assert time.monotonic() - started < 2, "the turn stopped waiting at the timeout"
    [entry] = await store.journal("resp_1", 0)
    assert entry.state == "claimed", "left as a crash leaves it: never recorded as failed"
    released.set()


async def test_a_turn_cancelled_while_its_claim_commits_still_runs_that_body(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    claiming = asyncio.Event()
    claim_call = store.claim_call

    async def noticed_claim(*args: Any, **kwargs: Any) -> None:
        claiming.set()  # the claim is on its way to the writer, not yet committed
        await claim_call(*args, **kwargs)

    monkeypatch.setattr(store, "claim_call", noticed_claim)
    run = asyncio.ensure_future(_phase(store).run([_call("send", '{"to": "ops"}')], 8, step=1))
    await claiming.wait()
    run.cancel()
    released.set()
    with pytest.raises(asyncio.CancelledError):
        await run

    assert effects == ["ops"], "a committed claim is answered by its body"
    [entry] = await store.journal("resp_1", 1)
    assert (entry.state, entry.output) == ("completed", "sent to ops")


async def test_a_call_not_started_when_the_turn_was_stopped_does_not_run(
    store: SQLiteStore,
) -> None:
    released.set()
    [output] = await _phase(store, stopping=True).run([_call("send", '{"to": "ops"}')], 8, step=0)

    assert effects == []
    assert output["output"].startswith("Error: not run; the turn was stopped")
    [entry] = await store.journal("resp_1", 0)
    assert entry.state == "errored"
