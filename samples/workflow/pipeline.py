"""A durable three-stage workflow, hosted with `--agent samples.workflow.pipeline:report`.

    extract    fetch a forecast for each city named in the input
    summarize  turn them into one line of text
    publish    write the report to $WORKFLOW_DIR/reports/<response id>.txt

Each stage is a `ctx.step`: the server journals its result, and when the handler runs
again after a crash, finished stages return their recorded result without running. The
handler must therefore be deterministic: the same input takes the same steps in the same
order. `publish` is marked idempotent (it overwrites one file named by the response), so
a crash in the middle of it is repaired by running it again; the others run at most once.

Every stage appends `<stage> <pid>` to $WORKFLOW_DIR/ledger.log when it does its work.
CRASH_IN_STAGE=<stage> in the server's environment kills the server (SIGKILL) as that
stage starts, to show the handler resume there.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from recovery import WorkflowContext, workflow

FORECASTS = {"paris": "sunny", "london": "rain", "tokyo": "cloudy"}


def _folder() -> Path:
    folder = Path(os.environ.get("WORKFLOW_DIR", "workflow-data"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _stage(name: str) -> None:
    """Die here if asked to, else record in the ledger that this stage ran."""
    if os.environ.get("CRASH_IN_STAGE") == name:
        os.kill(os.getpid(), signal.SIGKILL)
    with (_folder() / "ledger.log").open("a") as ledger:
        ledger.write(f"{name} {os.getpid()}\n")


def extract(cities: list[str]) -> dict[str, str]:
    _stage("extract")
    return {city: FORECASTS.get(city.lower(), "unknown") for city in cities}


def summarize(forecasts: dict[str, str]) -> str:
    _stage("summarize")
    return "; ".join(f"{city}: {sky}" for city, sky in forecasts.items())


def publish(response_id: str, summary: str) -> str:
    _stage("publish")
    path = _folder() / "reports" / f"{response_id}.txt"
    path.parent.mkdir(exist_ok=True)
    path.write_text(summary + "\n")
    return path.name


@workflow
async def report(ctx: WorkflowContext) -> str:
    cities = ctx.text.split() or ["Paris"]
    forecasts = await ctx.step("extract", extract, cities)
    await ctx.say(f"Fetched {len(forecasts)} forecasts.")
    summary = await ctx.step("summarize", summarize, forecasts)
    name = await ctx.step("publish", publish, ctx.response_id, summary, idempotent=True)
    return f"Published {name}: {summary}"
