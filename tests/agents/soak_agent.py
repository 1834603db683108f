"""Server tools for the randomized SIGKILL soaks (tests/crash/test_*_soak.py). Each effect
is one line `<idempotency key> <response id>` appended to `<tool>.log` in SIDE_EFFECTS_DIR,
so a test counts runs per call and per response from outside the killed processes.

Each kind of tool body the runtime drives is here, safe to re-run or not:

    note      async, idempotent
    transfer  async, unsafe (neither idempotent nor reconcilable)
    stamp     plain `def` (runs in a thread), idempotent
    tally     plain `def` (runs in a thread), unsafe
    grind     `async def` that blocks its event loop with time.sleep, unsafe

The unsafe ones sleep after their effect, so that a kill lands in the ambiguous window
(effect done, result not recorded) now and then.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from recovery import Agent, ToolContext, tool


def _effect(ctx: ToolContext) -> None:
    folder = Path(os.environ["SIDE_EFFECTS_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"{ctx.tool_name}.log").open("a") as out:
        out.write(f"{ctx.idempotency_key} {ctx.response_id}\n")


@tool(idempotent=True)
async def note(ctx: ToolContext, text: str) -> str:
    """Write a note (safe to repeat with the same idempotency key).

    Args:
        text: What to note.
    """
    await asyncio.sleep(0.02)
    _effect(ctx)
    return f"noted {text}"


@tool
async def transfer(ctx: ToolContext, amount: int) -> str:
    """Move money: must never happen twice.

    Args:
        amount: How much.
    """
    _effect(ctx)
    await asyncio.sleep(0.05)
    return f"transferred {amount}"


@tool(idempotent=True)
def stamp(ctx: ToolContext, label: str) -> str:
    """Stamp a label, in a thread (safe to repeat)."""
    time.sleep(0.01)
    _effect(ctx)
    return f"stamped {label}"


@tool
def tally(ctx: ToolContext, n: int) -> str:
    """Count something, in a thread: must never happen twice."""
    _effect(ctx)
    time.sleep(0.05)
    return f"tallied {n}"


@tool
async def grind(ctx: ToolContext, ms: int) -> str:
    """Block the event loop for `ms` milliseconds around an effect that must never happen
    twice (a careless tool that calls time.sleep inside `async def`)."""
    time.sleep(ms / 2000)  # noqa: ASYNC251 - blocking on purpose
    _effect(ctx)
    time.sleep(ms / 2000)  # noqa: ASYNC251 - blocking on purpose
    return f"ground {ms}"


UNSAFE = ("transfer", "tally", "grind")
IDEMPOTENT = ("note", "stamp")

agent = Agent(tools=[note, transfer, stamp, tally, grind])
