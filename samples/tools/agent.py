"""An agent with two server-side tools, hosted with `--agent samples.tools.agent:agent`.

- `lookup` reads a fixed table: it has no side effect, so it is declared idempotent and
  the server may run it again after a crash.
- `send_email` "sends" an email by writing it to the outbox folder ($OUTBOX_DIR, default
  ./outbox), in a file named by the call's idempotency key, then waits for the mail
  relay's acknowledgement ($EMAIL_ACK_SECONDS, default 0). Its `reconcile` hook looks
  for that file, so after a crash the server asks the outbox instead of sending twice.

`unsafe_agent` hosts the same email tool without the hook: a crash while it runs leaves
the server unable to tell whether the email went out, so the response fails closed with
`tool_outcome_unknown` rather than risk a second email.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from recovery import Agent, ToolContext, tool

FORECASTS = {"paris": "sunny, 24C", "london": "light rain, 17C", "tokyo": "cloudy, 21C"}


def outbox() -> Path:
    folder = Path(os.environ.get("OUTBOX_DIR", "outbox"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@tool(idempotent=True)
async def lookup(city: str) -> dict[str, str]:
    """Look up today's forecast for a city.

    Args:
        city: The city's name, e.g. Paris.
    """
    return {"city": city, "forecast": FORECASTS.get(city.lower(), "unknown")}


async def _deliver(ctx: ToolContext, to: str, subject: str, body: str) -> str:
    message = outbox() / f"{ctx.idempotency_key}.json"
    draft = message.with_suffix(".tmp")
    draft.write_text(json.dumps({"to": to, "subject": subject, "body": body}))
    draft.replace(message)  # atomic: the outbox never holds half an email
    await asyncio.sleep(float(os.environ.get("EMAIL_ACK_SECONDS", "0")))  # the relay's ack
    return f"sent to {to}"


async def _already_sent(ctx: ToolContext, to: str, subject: str, body: str) -> str | None:
    """Asked after a crash: the result if this call's email is in the outbox, else None."""
    if (outbox() / f"{ctx.idempotency_key}.json").exists():
        return f"sent to {to} (found in the outbox after a restart)"
    return None


@tool(reconcile=_already_sent)
async def send_email(ctx: ToolContext, to: str, subject: str, body: str = "") -> str:
    """Send an email.

    Args:
        to: The recipient's address.
        subject: The subject line.
        body: The message.
    """
    return await _deliver(ctx, to, subject, body)


@tool(name="send_email")
async def send_email_unsafe(ctx: ToolContext, to: str, subject: str, body: str = "") -> str:
    """Send an email (no way to check afterwards whether it went out)."""
    return await _deliver(ctx, to, subject, body)


agent = Agent(instructions="You are a helpful assistant.", tools=[lookup, send_email])
unsafe_agent = Agent(instructions="You are a helpful assistant.", tools=[lookup, send_email_unsafe])
