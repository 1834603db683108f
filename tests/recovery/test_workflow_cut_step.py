"""A turn is not handed over while a step's thread still runs (G3, G8).

The event loop's closing (asyncio cancelling every task, as it did when Hypercorn gave up
on a shutdown) cancels the task that waits for a plain step's thread, but not the thread.
The bug: the turn ended as "cut off after its bodies were recorded" and the drain
released its lease, so another process took the turn at once while the thread still
acted: it failed closed a step about to finish, or ran an idempotent one a second time
beside it. Now such a turn keeps its lease, to expire, since its thread may still act.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from recovery import (
    Runtime,
    RuntimeSettings,
    WorkflowContext,
    normalize_input,
    open_store,
    workflow,
)
from tests.recovery.test_workflow_store_errors import Unused

SETTINGS = RuntimeSettings(
    scan_interval=0.1, heartbeat_interval=0.05, lease_ttl=60, shutdown_grace=0.1
)


async def _cut_when_draining(runtime: Runtime) -> None:
    """As the event loop's closing would: cancel the task that waits for the step's
    thread, once the drain has begun."""
    for _ in range(500):
        if runtime.draining:
            break
        await asyncio.sleep(0.01)
    assert runtime.draining
    waiting = [
        t for t in asyncio.all_tasks() if getattr(t.get_coro(), "__name__", "") == "_awaited"
    ]
    assert len(waiting) == 1
    waiting[0].cancel()


async def test_a_turn_whose_step_thread_outlives_its_waiting_task_keeps_its_lease(
    tmp_path: Path,
) -> None:
    started, release = threading.Event(), threading.Event()

    def post() -> str:
        started.set()
        release.wait(30)
        return "posted"

    @workflow
    async def paying(ctx: WorkflowContext) -> str:
        return await ctx.step("post", post, idempotent=True)

    try:
        async with open_store(tmp_path / "cut.db") as store:
            async with Runtime(store, paying, Unused(), SETTINGS).running() as runtime:
                body = {"model": "m", "input": normalize_input("go"), "background": True}
                record, _ = await runtime.create(body, tenant="t")
                assert await asyncio.to_thread(started.wait, 10), "the step did not start"
                cutting = asyncio.ensure_future(_cut_when_draining(runtime))
            await cutting  # the block's end drained the runtime, the thread still running

            orphans = {response_id for response_id, _ in await store.orphans()}
            assert record.id not in orphans, "its lease was released while the thread ran"
    finally:
        release.set()
