"""Tools whose bodies outlive what waits for them (issue 21): plain (`def`) tools run in
threads that neither a timeout nor a cancelled turn can stop, and an async tool whose
inner awaitable is cancelled by someone else. Effects land in files under
SIDE_EFFECTS_DIR, one line `<idempotency key> <detail>` per effect in `<name>.log`, as
in tests/agents/tool_agent.py; `<name>.started.log` says a body began.
"""

from __future__ import annotations

import asyncio
import time

from recovery import Agent, ToolContext, tool
from tests.agents.tool_agent import lookup
from tests.support.side_effects import find_effect as _find
from tests.support.side_effects import record_effect as _append


async def _sent(ctx: ToolContext, to: str, seconds: float) -> str | None:
    detail = _find("slow_send", ctx.idempotency_key)
    return f"sent to {detail} (found)" if detail is not None else None


@tool(reconcile=_sent)
def slow_send(ctx: ToolContext, to: str, seconds: float) -> str:
    """Send a message after `seconds` (a blocking client, in a thread); reconcilable:
    its log says whether it was sent."""
    _append("slow_send.started", ctx.idempotency_key, to)
    time.sleep(seconds)
    _append("slow_send", ctx.idempotency_key, to)
    return f"sent to {to}"


@tool
async def slow_notify(ctx: ToolContext, to: str, seconds: float) -> str:
    """Notify someone after `seconds` (async; neither idempotent nor reconcilable)."""
    _append("slow_notify.started", ctx.idempotency_key, to)
    await asyncio.sleep(seconds)
    _append("slow_notify", ctx.idempotency_key, to)
    return f"notified {to}"


@tool(timeout=0.3)
def slow_charge(ctx: ToolContext, amount: int, seconds: float = 1.5) -> str:
    """Charge a card through a slow blocking client; neither idempotent nor reconcilable."""
    time.sleep(seconds)
    _append("slow_charge", ctx.idempotency_key, str(amount))
    return f"charged {amount}"


@tool(timeout=0.3, idempotent=True)
def slow_fetch(ctx: ToolContext, url: str, seconds: float = 1.5) -> str:
    """Fetch a page through a slow blocking client; idempotent."""
    time.sleep(seconds)
    _append("slow_fetch", ctx.idempotency_key, url)
    return f"fetched {url}"


async def _posted(ctx: ToolContext, amount: int) -> str | None:
    detail = _find("ledger", ctx.idempotency_key)
    return f"posted {detail} (found)" if detail is not None else None


@tool(timeout=0.3, reconcile=_posted)
def post_ledger(ctx: ToolContext, amount: int) -> str:
    """Post to a ledger at once, then wait long for the client to close (reconcilable)."""
    _append("ledger", ctx.idempotency_key, str(amount))
    time.sleep(1.5)
    return f"posted {amount}"


@tool
async def hang_up(ctx: ToolContext) -> str:
    """Waits for a reply that someone else cancels, as a client library does when it
    closes a shared connection: the body raises CancelledError by itself."""
    _append("hang_up", ctx.idempotency_key, "asked")
    loop = asyncio.get_running_loop()
    reply: asyncio.Future[str] = loop.create_future()
    loop.call_later(0.05, reply.cancel)
    return await reply


agent = Agent(tools=[slow_send, slow_notify, slow_charge, slow_fetch, post_ledger, hang_up, lookup])
