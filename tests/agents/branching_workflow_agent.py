"""Workflows whose concurrent branches (asyncio.gather) call their steps in one order on
the first run and in another on a replay, without relying on timing: on the first run, a
step of branch x opens a gate for branch y, then waits until y's next step has started;
on a replay that step returns its recorded result at once, and branch x opens the gate
only after it, just before calling its own next step. Effects land in files under
SIDE_EFFECTS_DIR (tests/support/side_effects.py), `<name>.started.log` when a step began.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from recovery import WorkflowContext, workflow
from tests.support.side_effects import effects, record_effect


async def _started(name: str, detail: str) -> str:
    """Wait (up to 30 s) until the step `name` began with `detail`."""
    folder = Path(os.environ["SIDE_EFFECTS_DIR"])
    for _ in range(300):
        if any(found == detail for _, found in effects(folder, f"{name}.started")):
            return f"{name} started"
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{name} did not start")


def act(ctx: WorkflowContext, name: str, detail: str, linger: float) -> str:
    """A plain step: says it began, takes effect, then lingers `linger` seconds (a test
    kills the process meanwhile)."""
    record_effect(f"{name}.started", ctx.idempotency_key, detail)
    record_effect(name, ctx.idempotency_key, detail)
    time.sleep(linger)
    return f"{name} {detail}"


@workflow
async def interleaved(ctx: WorkflowContext) -> str:
    """Two branches of two steps each, all named apart: x_b comes after y_b on the first
    run (y_b lingers, neither idempotent nor reconcilable) and before it on a replay."""
    gate = asyncio.Event()

    async def x_a() -> str:
        gate.set()
        return await _started("y_b", "y")

    async def branch_x() -> None:
        await ctx.step("x_a", x_a)
        gate.set()  # on a replay, x_a's body did not run
        await ctx.step("x_b", act, ctx, "x_b", "x", 0.0)

    async def branch_y() -> None:
        await ctx.step("y_a", act, ctx, "y_a", "y", 0.0)
        await gate.wait()
        await ctx.step("y_b", act, ctx, "y_b", "y", 20.0)

    await asyncio.gather(branch_x(), branch_y())
    return "done"


@workflow
async def same_name(ctx: WorkflowContext) -> str:
    """Two branches call the step `send`, with other arguments: y's call comes first on
    the first run and second on a replay. An idempotent step follows that lingers, for a
    test to kill the process in."""
    gate = asyncio.Event()

    async def x_wait() -> str:
        gate.set()
        return await _started("send", "y")

    async def branch_x() -> str:
        await ctx.step("x_wait", x_wait)
        gate.set()  # on a replay, x_wait's body did not run
        return await ctx.step("send", act, ctx, "send", "x", 0.0)

    async def branch_y() -> str:
        await gate.wait()
        return await ctx.step("send", act, ctx, "send", "y", 0.0)

    x, y = await asyncio.gather(branch_x(), branch_y())
    await ctx.step("linger", act, ctx, "linger", "z", 20.0, idempotent=True)
    return f"x got '{x}', y got '{y}'"


@dataclass
class Order:
    """A step argument JSON cannot hold: written as its str(), whose set prints in the
    process's string-hash order."""

    sku: str
    tags: set[str] = field(default_factory=set)


def charge(ctx: WorkflowContext, order: Order) -> str:
    record_effect("charge", ctx.idempotency_key, order.sku)
    return f"charged {order.sku}"


@workflow
async def tagged(ctx: WorkflowContext) -> str:
    """No branches: a step given an Order, then one that lingers (a test kills the
    process meanwhile)."""
    order = Order("sku-1", {f"tag-{i}" for i in range(12)})
    await ctx.step("charge", charge, ctx, order)
    await ctx.step("linger", act, ctx, "linger", "x", 8.0, idempotent=True)
    return "done"


@workflow
async def said(ctx: WorkflowContext) -> str:
    """Two branches say a message each: y's first on the first run, whose process a test
    kills before x says its own; x's first on the replay. `x_wait` waits for y's message
    (and then for the kill) only the first time it runs."""
    gate = asyncio.Event()
    y_said = asyncio.Event()

    async def x_wait() -> str:
        again = bool(effects(Path(os.environ["SIDE_EFFECTS_DIR"]), "x_wait.started"))
        record_effect("x_wait.started", ctx.idempotency_key, "x")
        if not again:
            gate.set()
            await y_said.wait()
            record_effect("y_said", ctx.idempotency_key, "y")
            await asyncio.sleep(30)
        return "waited"

    async def branch_x() -> None:
        await ctx.step("x_wait", x_wait, idempotent=True)
        await ctx.say("from x")
        gate.set()

    async def branch_y() -> None:
        await gate.wait()
        await ctx.say("from y")
        y_said.set()

    await asyncio.gather(branch_x(), branch_y())
    return "done"
