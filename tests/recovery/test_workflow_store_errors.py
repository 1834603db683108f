"""A workflow step whose journal write fails is not run again under a new call id.

The bug: a store error while a step's outcome was recorded reached the handler as an
ordinary exception; a handler retrying on any exception (as users write) called the step
again, which was claimed under a new call id and ran its body a second time (G3), and
the turn could end `completed` with the first call left `claimed` and without its output
(G5). Like an unknown outcome, such an error is now raised again by every later step and
by the handler's end.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from recovery import (
    ModelEvent,
    ModelRequest,
    Runtime,
    RuntimeSettings,
    WorkflowContext,
    normalize_input,
    open_store,
    workflow,
)
from store import StoreUnavailable

FAST = RuntimeSettings(scan_interval=0.1, heartbeat_interval=0.05)


class Unused:
    name = "unused"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        raise AssertionError("a workflow calls no model")
        yield  # pragma: no cover


async def test_a_step_whose_outcome_could_not_be_recorded_is_not_run_again(
    tmp_path: Path,
) -> None:
    runs: list[int] = []

    async def pay(amount: int) -> str:
        runs.append(amount)
        return "paid"

    @workflow
    async def retrying(ctx: WorkflowContext) -> str:
        for _ in range(3):
            try:
                return await ctx.step("pay", pay, 5)
            except Exception:  # the point of this handler
                continue
        return "gave up"

    async with open_store(tmp_path / "flaky.db") as store:
        finish = store.finish_call
        failures = [StoreUnavailable("finish call: the database is unavailable (test)")]

        async def flaky(*args: Any, **kwargs: Any) -> None:
            if failures:
                raise failures.pop()
            await finish(*args, **kwargs)

        store.finish_call = flaky  # type: ignore[method-assign]
        async with Runtime(store, retrying, Unused(), FAST).running() as runtime:
            body = {"model": "m", "input": normalize_input("go"), "background": True}
            record, _ = await runtime.create(body, tenant="t")
            final = await asyncio.wait_for(runtime.wait_final(record.id, "t"), 10)
        journal = await store.journal(record.id)

    assert runs == [5], "the body ran once"
    assert [entry.call_id for entry in journal] == ["step-1-pay"], "no second claim"
    assert final["status"] == "failed", final["status"]
