"""Issue 14: a workflow that catches `Exception` cannot swallow a lost lease or a stop.

The bug: the store's `LeaseLost` is an ordinary exception, and it reached a workflow
handler through `ctx.step` (the step's claim or outcome, a fenced write). A handler that
wrapped its steps in `try: ... except Exception:` swallowed it and went on driving a
response another process now held (every later write was refused, but the handler ran
on). The runner's branch for `TurnStopped("lease_lost")` was dead: nothing raised it.

The fix (recovery/_turn.py `lease_held`): every fenced write of a turn turns `LeaseLost`
into `TurnStopped("lease_lost")`, a BaseException, which the runner answers by ending
the turn without writing. A stop (a cancel) was and stays a TurnStopped as well. (Tools
never see either: their bodies make no writes of the turn, and a stop reaches them only
as `ToolContext.cancelled`.)
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from recovery import (
    ModelEvent,
    ModelRequest,
    Runtime,
    RuntimeSettings,
    WorkflowContext,
    current_response_id,
)
from recovery import workflow as make_workflow
from store import SQLiteStore, open_store

swallowed: list[BaseException] = []
after_it: list[str] = []
on_step: list[Callable[[], None]] = []  # what the first step does besides its work


class NoModel:
    name = "none"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        raise AssertionError("a workflow calls no model")
        yield


async def first_step() -> str:
    for act in on_step:
        act()
    return "one"


async def second_step() -> str:
    after_it.append("second step ran")
    return "two"


@make_workflow
async def careless(ctx: WorkflowContext) -> str:
    """Catches every Exception of its steps, as user code may."""
    for name, fn in (("first", first_step), ("second", second_step)):
        try:
            await ctx.step(name, fn)
        except Exception as exc:
            swallowed.append(exc)
    after_it.append("handler went on")
    return "done"


def background() -> dict[str, Any]:
    message = {"type": "message", "role": "user", "id": "msg_1", "content": "go"}
    return {"model": "m", "input": [message], "background": True}


@contextlib.asynccontextmanager
async def running(db: Path) -> AsyncIterator[tuple[Runtime, SQLiteStore]]:
    swallowed.clear()
    after_it.clear()
    on_step.clear()
    async with open_store(db) as store:
        runtime = Runtime(store, careless, NoModel(), RuntimeSettings(lease_ttl=60))
        async with runtime.running():
            yield runtime, store


async def until_idle(runtime: Runtime) -> None:
    for _ in range(500):
        await asyncio.sleep(0.01)
        if runtime.active_runs == 0:
            return
    raise AssertionError("the turn did not end")


async def test_a_lease_lost_inside_a_step_stops_the_turn_past_except_exception(
    tmp_path: Path,
) -> None:
    db = tmp_path / "lost.db"
    async with running(db) as (runtime, store):

        def steal() -> None:  # another process takes the response over
            with contextlib.closing(sqlite3.connect(db, timeout=5)) as conn:
                conn.execute("UPDATE responses SET owner = 'thief', epoch = epoch + 1")
                conn.commit()

        on_step.append(steal)
        record, _ = await runtime.create(background(), tenant="")
        await until_idle(runtime)

        assert swallowed == [], "the handler caught the lost lease"
        assert after_it == [], "the handler went on after its lease was lost"
        after = await store.get_response(record.id, "")
        assert after is not None
        assert (after.status, after.owner) == ("in_progress", "thief"), "nothing written"
        [entry] = await store.journal(record.id)
        assert entry.state == "claimed", "the outcome was not written over the thief's"


async def test_a_stop_inside_a_workflow_ends_the_turn_past_except_exception(
    tmp_path: Path,
) -> None:
    async with running(tmp_path / "stop.db") as (runtime, store):
        on_step.append(lambda: runtime.stop_local(str(current_response_id.get())))
        record, _ = await runtime.create(background(), tenant="")
        await until_idle(runtime)

        assert swallowed == [], "the handler caught the stop"
        assert after_it == []
        after = await store.get_response(record.id, "")
        assert after is not None and after.status == "cancelled"
