"""A workflow whose steps outlive a short shutdown grace: a plain (`def`) step that blocks
in its thread and an async one, each logging when it starts and when its effect lands
(files under SIDE_EFFECTS_DIR, as in tests/agents/thread_tool_agent.py)."""

from __future__ import annotations

import asyncio
import time

from recovery import WorkflowContext, workflow
from tests.support.side_effects import record_effect as _append


def post(ctx: WorkflowContext, amount: int) -> str:
    """Post a payment through a slow blocking client; neither idempotent nor reconcilable."""
    key = ctx.idempotency_key
    _append("post.started", key, str(amount))
    time.sleep(2)
    _append("post", key, str(amount))
    return f"posted {amount}"


async def notify(ctx: WorkflowContext, to: str) -> str:
    key = ctx.idempotency_key
    _append("notify.started", key, to)
    await asyncio.sleep(2)
    _append("notify", key, to)
    return f"notified {to}"


@workflow
async def plain(ctx: WorkflowContext) -> str:
    return await ctx.step("post", post, ctx, 5)


@workflow
async def asynchronous(ctx: WorkflowContext) -> str:
    return await ctx.step("notify", notify, ctx, "ops")


async def hang_up() -> str:
    """A step whose inner awaitable someone else cancels (a library closing its connection)."""
    reply: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(reply.cancel)
    return await reply


@workflow
async def self_cancelling(ctx: WorkflowContext) -> str:
    return await ctx.step("hang_up", hang_up)
