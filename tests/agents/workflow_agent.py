"""A three-stage durable workflow whose stages write side effects to $SIDE_EFFECTS_DIR.

With CRASH_AFTER_STAGE=<name> in the environment the process dies right after that
stage completed (the first time only), to show the handler resume at its next stage.
"""

from __future__ import annotations

import os
from pathlib import Path

from recovery import WorkflowContext, workflow


def _effect(stage: str, detail: str) -> None:
    folder = Path(os.environ["SIDE_EFFECTS_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"{stage}.log").open("a") as out:
        out.write(f"{detail}\n")


def _maybe_crash(stage: str) -> None:
    marker = Path(os.environ["SIDE_EFFECTS_DIR"]) / "crashed"
    if os.environ.get("CRASH_AFTER_STAGE") == stage and not marker.exists():
        marker.write_text(stage)
        os._exit(1)


async def reserve(item: str) -> dict[str, str]:
    _effect("reserve", item)
    return {"order": f"order-{item}"}


def charge(amount: int) -> str:  # a synchronous step
    _effect("charge", str(amount))
    return f"charged {amount}"


async def ship(order: str) -> str:
    if order == "order-broken":
        raise RuntimeError("no such warehouse")
    _effect("ship", order)
    return "shipped"


@workflow
async def order(ctx: WorkflowContext) -> dict[str, str]:
    reserved = await ctx.step("reserve", reserve, ctx.text)
    await ctx.say(f"Reserved {reserved['order']}.")
    _maybe_crash("reserve")
    charged = await ctx.step("charge", charge, 10)
    _maybe_crash("charge")
    shipped = await ctx.step("ship", ship, reserved["order"])
    return {"order": reserved["order"], "charge": charged, "ship": shipped}
