"""The journal-call protocol of the tool phase (G3, G4), in process on a temporary store,
in milliseconds (the subprocess tests that kill a server at each failpoint are in
tests/crash/test_failpoints.py):

- a new call is claimed, its body runs once, and its outcome is recorded; a second run
  of the step reuses the recorded output without running the body (G3);
- a call found `claimed` (its process died while it ran) of a tool that is neither
  idempotent nor reconcilable is never run again: by default the turn fails closed
  (ToolOutcomeUnknown naming the key, the entry left `claimed`); with
  `ambiguous_calls="report"` it is recorded `errored`, the outcome unknown (G4);
- an idempotent tool's `claimed` call runs again, with the same key, as attempt 2;
- a reconcilable tool's hook settles the call without running the body.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from recovery import Agent, Observer, RuntimeSettings, ToolContext, tool
from recovery._calls import idempotency_key
from recovery._errors import ToolOutcomeUnknown
from recovery._tool_phase import ToolPhase
from recovery._turn import Stop, Turn
from store import Admission, Fence, SQLiteStore, open_store
from tests.store.test_sqlite import new_response

FENCE = Fence("me", 1)
RID = "resp_1"
STEP = 2
runs: list[tuple[str, str, int]] = []  # (tool, idempotency key, attempt) per body run


@tool
async def charge(ctx: ToolContext, amount: int) -> str:
    """Not safe to repeat: neither idempotent nor reconcilable."""
    runs.append(("charge", ctx.idempotency_key, ctx.attempt))
    return f"charged {amount}"


@tool(idempotent=True)
async def put(ctx: ToolContext, key: str) -> str:
    runs.append(("put", ctx.idempotency_key, ctx.attempt))
    return f"put {key}"


async def find_sent(ctx: ToolContext, to: str) -> str | None:
    return f"already sent to {to}"


@tool(reconcile=find_sent)
async def send(ctx: ToolContext, to: str) -> str:
    runs.append(("send", ctx.idempotency_key, ctx.attempt))
    return f"sent to {to}"


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    runs.clear()
    async with open_store(tmp_path / "j.db") as opened:
        await opened.create_response(new_response(RID, owner="me"), [], [], Admission())
        yield opened


def phase(store: SQLiteStore, **settings: Any) -> ToolPhase:
    turn = Turn(RID, FENCE, store, RuntimeSettings(**settings), Observer(), Stop())
    return ToolPhase(turn, Agent(tools=[charge, put, send]))


def call(name: str, arguments: str, call_id: str = "call_0") -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


async def claimed_before(store: SQLiteStore, name: str, arguments: str) -> str:
    """Journal `call_0` as `claimed` with no output, as a process that died leaves it."""
    key = idempotency_key(RID, "call_0", STEP)
    await store.claim_call(
        RID, FENCE, call_id="call_0", tool=name, arguments=arguments, idempotency_key=key, step=STEP
    )
    return key


async def test_a_new_call_is_claimed_run_once_and_recorded_then_reused(
    store: SQLiteStore,
) -> None:
    [first] = await phase(store).run([call("charge", '{"amount": 5}')], 8, step=STEP)
    [again] = await phase(store).run([call("charge", '{"amount": 5}')], 8, step=STEP)

    assert first["output"] == again["output"] == "charged 5"
    assert runs == [("charge", idempotency_key(RID, "call_0", STEP), 1)]
    [entry] = await store.journal(RID, STEP)
    assert (entry.state, entry.output, entry.attempts) == ("completed", "charged 5", 1)


async def test_an_unsafe_call_found_claimed_fails_closed_and_is_not_run(
    store: SQLiteStore,
) -> None:
    key = await claimed_before(store, "charge", '{"amount": 5}')

    with pytest.raises(ToolOutcomeUnknown, match=key):
        await phase(store).run([call("charge", '{"amount": 5}')], 8, step=STEP)

    assert runs == []
    [entry] = await store.journal(RID, STEP)
    assert entry.state == "claimed", "left for an operator, as the crash left it"


async def test_an_unsafe_call_found_claimed_is_reported_unknown_when_so_configured(
    store: SQLiteStore,
) -> None:
    key = await claimed_before(store, "charge", '{"amount": 5}')

    [output] = await phase(store, ambiguous_calls="report").run(
        [call("charge", '{"amount": 5}')], 8, step=STEP
    )

    assert runs == []
    assert output["output"].startswith("Error: the outcome of this call of 'charge' is unknown")
    assert key in output["output"]
    [entry] = await store.journal(RID, STEP)
    assert (entry.state, entry.output) == ("errored", output["output"])


async def test_an_idempotent_call_found_claimed_runs_again_with_the_same_key(
    store: SQLiteStore,
) -> None:
    key = await claimed_before(store, "put", '{"key": "k"}')

    [output] = await phase(store).run([call("put", '{"key": "k"}')], 8, step=STEP)

    assert output["output"] == "put k"
    assert runs == [("put", key, 2)]
    [entry] = await store.journal(RID, STEP)
    assert (entry.state, entry.attempts, entry.idempotency_key) == ("completed", 2, key)


async def test_a_reconcilable_call_found_claimed_is_settled_by_its_hook(
    store: SQLiteStore,
) -> None:
    await claimed_before(store, "send", '{"to": "ops"}')

    [output] = await phase(store).run([call("send", '{"to": "ops"}')], 8, step=STEP)

    assert output["output"] == "already sent to ops"
    assert runs == []
    [entry] = await store.journal(RID, STEP)
    assert (entry.state, entry.output) == ("completed", "already sent to ops")
