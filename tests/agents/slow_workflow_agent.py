"""A workflow whose steps outlive a short shutdown grace: a plain (`def`) step that blocks
in its thread and an async one, each logging when it starts and when its effect lands
(files under SIDE_EFFECTS_DIR, as in tests/agents/thread_tool_agent.py), and steps that
outlive the shutdown limit Hypercorn once had; and handlers that catch a step's errors to
retry it, or run a slow step beside a chain of quick ones."""

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


@workflow
async def retrying(ctx: WorkflowContext) -> str:
    """A handler with an ordinary retry loop around a step, as users write: any failure,
    the step's unknown outcome after a crash included, is caught and the step tried again."""
    for _attempt in range(3):
        try:
            return await ctx.step("post", post, ctx, 5)
        except Exception as exc:  # the point of this handler
            await ctx.say(f"retrying after {type(exc).__name__}")
    return "gave up"


async def quick(n: int) -> int:
    await asyncio.sleep(0.05)
    return n


async def _fan_out(ctx: WorkflowContext, *, idempotent: bool) -> str:
    """A slow step beside a chain of quick ones (asyncio.gather does not cancel the slow
    branch when the chain raises, as a stop makes it)."""

    async def chain() -> None:
        for i in range(40):
            await ctx.step(f"quick_{i}", quick, i)

    await asyncio.gather(ctx.step("notify", notify, ctx, "ops", idempotent=idempotent), chain())
    return "done"


@workflow
async def fan_out(ctx: WorkflowContext) -> str:
    return await _fan_out(ctx, idempotent=False)


@workflow
async def fan_out_idempotent(ctx: WorkflowContext) -> str:
    return await _fan_out(ctx, idempotent=True)


async def boom() -> str:
    await asyncio.sleep(0.3)
    raise ValueError("boom")


async def slow_quick(ctx: WorkflowContext, n: int) -> int:
    key = ctx.idempotency_key
    _append("quick.started", key, str(n))
    await asyncio.sleep(0.4)
    _append("quick", key, str(n))
    return n


@workflow
async def failing_branch(ctx: WorkflowContext) -> str:
    """One branch fails while the other runs a chain of steps."""

    async def chain() -> None:
        for i in range(8):
            await ctx.step(f"q_{i}", slow_quick, ctx, i)

    await asyncio.gather(ctx.step("boom", boom), chain())
    return "done"


@workflow
async def producer_consumer(ctx: WorkflowContext) -> str:
    """A consumer step that waits for what only a producer step that succeeds would send."""
    queue: asyncio.Queue[int | None] = asyncio.Queue()

    async def produce() -> int:
        await queue.put(1)
        await asyncio.sleep(0.2)
        raise ValueError("producer failed")  # never sends the end marker

    async def consume() -> int:
        total = 0
        while (x := await queue.get()) is not None:
            total += x
        return total

    await asyncio.gather(ctx.step("produce", produce), ctx.step("consume", consume))
    return "done"


@workflow
async def fail_during_claim(ctx: WorkflowContext) -> str:
    """One branch fails at once, while the other's consumer step is being claimed: the
    consumer would wait for what the failed branch never sends."""
    queue: asyncio.Queue[int | None] = asyncio.Queue()

    async def produce() -> None:
        raise ValueError("producer failed")  # before sending anything

    async def consume() -> int:
        _append("consume.started", ctx.idempotency_key, "x")
        total = 0
        while (x := await queue.get()) is not None:
            total += x
        return total

    await asyncio.gather(produce(), ctx.step("consume", consume))
    return "done"


@workflow
async def finished_at_the_cut(ctx: WorkflowContext) -> str:
    """A step's body returns in the tick in which the handler, woken by the same event,
    returns too: its result is known, and is what is recorded."""
    go = asyncio.Event()

    async def other() -> str:
        await go.wait()
        return "first"

    async def ship() -> str:
        await go.wait()
        _append("ship", ctx.idempotency_key, "x")
        return "shipped"

    async def trigger() -> None:
        await asyncio.sleep(0.5)
        go.set()

    triggered = asyncio.ensure_future(trigger())
    waiter = asyncio.ensure_future(other())  # waits on `go` before ship's body does
    stepping = asyncio.ensure_future(ctx.step("ship", ship))
    await asyncio.wait({waiter, stepping}, return_when=asyncio.FIRST_COMPLETED)
    await triggered
    return "handler returned"


# Longer than the shutdown grace the tests give (0.3 s) plus the 10 s Hypercorn was once
# given on top of it with a workflow served (server/_cli.py, SHUTDOWN_MARGIN), after which
# every task was cancelled: the step cut, its turn handed over while its thread still ran.
LONG = 13.0


def long_post(ctx: WorkflowContext, amount: int) -> str:
    """`post`, through a client slower than the shutdown's old limit."""
    key = ctx.idempotency_key
    _append("long_post.started", key, str(amount))
    time.sleep(LONG)
    _append("long_post", key, str(amount))
    return f"posted {amount}"


async def long_notify(ctx: WorkflowContext, to: str) -> str:
    key = ctx.idempotency_key
    _append("long_notify.started", key, to)
    await asyncio.sleep(LONG)
    _append("long_notify", key, to)
    return f"notified {to}"


@workflow
async def long_plain(ctx: WorkflowContext) -> str:
    return await ctx.step("long_post", long_post, ctx, 5)


@workflow
async def long_asynchronous(ctx: WorkflowContext) -> str:
    return await ctx.step("long_notify", long_notify, ctx, "ops")


@workflow
async def long_idempotent(ctx: WorkflowContext) -> str:
    return await ctx.step("long_post", long_post, ctx, 5, idempotent=True)
