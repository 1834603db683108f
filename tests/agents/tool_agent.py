"""An agent with server tools whose side effects land in files, so tests can count them
from outside the server process. The folder comes from SIDE_EFFECTS_DIR.

Each effect is one line `<idempotency key> <detail>` appended to `<tool>.log`.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from recovery import Agent, ToolContext, tool
from tests.support.side_effects import find_effect as _find
from tests.support.side_effects import record_effect as _append


@tool(idempotent=True)
async def lookup(ctx: ToolContext, city: str) -> dict[str, Any]:
    """Look up the weather of a city.

    Args:
        city: The city's name.
    """
    _append("lookup", ctx.idempotency_key, city)
    return {"city": city, "forecast": "sunny"}


@tool
async def send_email(ctx: ToolContext, to: str, body: str = "") -> str:
    """Send an email (at most once: neither idempotent nor reconcilable)."""
    _append("send_email", ctx.idempotency_key, to)
    return f"sent to {to}"


async def _charge_done(ctx: ToolContext, amount: int) -> str | None:
    detail = _find("charge", ctx.idempotency_key)
    return f"charged {detail} (found)" if detail is not None else None


@tool(reconcile=_charge_done)
async def charge(ctx: ToolContext, amount: int) -> str:
    """Charge a card; on recovery, the charge log says whether it happened."""
    _append("charge", ctx.idempotency_key, str(amount))
    return f"charged {amount}"


@tool
def shout(text: str) -> str:
    """A synchronous tool."""
    _append("shout", "-", text)
    return text.upper()


@tool
async def explode(reason: str = "boom") -> str:
    """Always fails."""
    raise ValueError(reason)


@tool(timeout=0.2)
async def dawdle() -> str:
    """Takes longer than its timeout."""
    await asyncio.sleep(30)
    return "too late"


@tool
async def wait_a_bit(ctx: ToolContext, seconds: float) -> str:
    """Sleeps, then records that it finished (for cancel tests)."""
    await asyncio.sleep(seconds)
    _append("wait_a_bit", ctx.idempotency_key, json.dumps(seconds))
    return f"waited {seconds}"


@tool(idempotent=True)
async def crash(ctx: ToolContext) -> str:
    """Kills the server process every time it runs (a poison pill; idempotent, so every
    recovery runs it again)."""
    _append("crash", ctx.idempotency_key, "about to die")
    os._exit(1)


TOOLS = [lookup, send_email, charge, shout, explode, dawdle, wait_a_bit, crash]

agent = Agent(tools=TOOLS)
small_budget = Agent(tools=TOOLS, max_steps=2, max_tool_calls=2)
