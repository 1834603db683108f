"""Turns that block their process's event loop, or whose runner ends without an end, for
the regression tests of issue 21. Side effects land in $SIDE_EFFECTS_DIR as in
tool_agent.py: one line `<idempotency key> <detail>` per effect in `<name>.log`.

    agent   a reconcilable async tool, `charge_blocking`, that blocks with time.sleep
    flow    a workflow steered by its input text:
              "block S"  a plain (synchronous) step that sleeps S seconds
              "wait S"   an async step that awaits S seconds
              "cancel"   the handler itself raises CancelledError (outside any step), as
                         a buggy library can: its runner exits with no end recorded (a
                         step that does so is the step's failure, recorded like any)
"""

from __future__ import annotations

import asyncio
import time

from recovery import Agent, ToolContext, WorkflowContext, tool, workflow
from tests.support.side_effects import find_effect as _find
from tests.support.side_effects import record_effect as _append


async def _charged(ctx: ToolContext, amount: int, seconds: float) -> str | None:
    detail = _find("charge_blocking", ctx.idempotency_key)
    return f"charged {detail} (found)" if detail is not None else None


@tool(reconcile=_charged)
async def charge_blocking(ctx: ToolContext, amount: int, seconds: float) -> str:
    """Charge a card through a blocking client library: the event loop stalls meanwhile."""
    time.sleep(seconds)  # noqa: ASYNC251 - blocking on purpose, as a careless tool does
    _append("charge_blocking", ctx.idempotency_key, str(amount))
    return f"charged {amount}"


agent = Agent(tools=[charge_blocking])


def _block(seconds: float) -> str:
    time.sleep(seconds)
    _append("block", "-", str(seconds))
    return f"blocked {seconds}"


async def _wait(seconds: float) -> str:
    await asyncio.sleep(seconds)
    _append("wait", "-", str(seconds))
    return f"waited {seconds}"


async def _cancel() -> str:
    _append("cancel", "-", "raising CancelledError")
    raise asyncio.CancelledError


@workflow
async def flow(ctx: WorkflowContext) -> str:
    verb, _, argument = ctx.text.partition(" ")
    if verb == "block":
        return await ctx.step("block", _block, float(argument))
    if verb == "wait":
        return await ctx.step("wait", _wait, float(argument))
    await _cancel()
    return "not reached"
