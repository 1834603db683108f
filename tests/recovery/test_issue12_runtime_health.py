"""Issue 12, items 1 and 6, in the runtime: its chores outlive the store's failures and
back off, the recovery scan notices a vanished database file with no request made, and a
runtime that does stop for good (an exception nothing handles) says so at once and knows
it: `alive` is False, `failure` holds the exception, readiness answers "stopped"."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from recovery import ModelEvent, ModelRequest, Runtime, RuntimeSettings, WorkflowContext
from recovery import workflow as make_workflow
from store import open_store


class NoModel:
    name = "none"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        raise AssertionError("a workflow calls no model")
        yield


class Escaped(BaseException):
    """Stands for a bug: an exception that no part of the runtime handles."""


@make_workflow
async def hello(ctx: WorkflowContext) -> str:
    return "hello"


@make_workflow
async def escapes(ctx: WorkflowContext) -> str:
    raise Escaped("nothing handles this")


def background(text: str) -> dict[str, object]:
    message = {"type": "message", "role": "user", "id": "msg_1", "content": text}
    return {"model": "m", "input": [message], "background": True}


async def test_the_scan_notices_a_vanished_store_unasked_and_backs_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    db = tmp_path / "gone.db"
    settings = RuntimeSettings(scan_interval=0.05, chore_retry_max=0.2)
    async with open_store(db) as store:
        runtime = Runtime(store, hello, NoModel(), settings)
        async with runtime.running():
            await asyncio.wait_for(runtime.ready.wait(), 5)
            assert await runtime.readiness() == ("ready", None)
            db.unlink()
            await asyncio.sleep(1.0)

            assert runtime.alive
            state, reason = await runtime.readiness()
            assert state == "store_unavailable"
            assert reason is not None and "was deleted while the server had it open" in reason

    errors = [r for r in caplog.records if r.levelno == logging.ERROR and r.name == "store"]
    assert len(errors) == 1  # said once, however often it is met
    failed = [r.getMessage() for r in caplog.records if "recovery scan failed" in r.getMessage()]
    in_a_row = [int(m.group(1)) for f in failed if (m := re.search(r"(\d+) in a row", f))]
    assert in_a_row[:3] == [1, 2, 3]
    pauses = [float(m.group(1)) for f in failed if (m := re.search(r"in ([\d.]+)s$", f))]
    assert max(pauses) <= 0.2 and pauses[2] > pauses[0]  # backs off, up to the most


async def test_a_runtime_that_stops_for_good_logs_it_at_once_and_knows_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with open_store(tmp_path / "fatal.db") as store:
        runtime = Runtime(store, escapes, NoModel(), RuntimeSettings(shutdown_grace=0.5))
        with pytest.raises(BaseExceptionGroup) as stopped:
            async with runtime.running():
                assert runtime.alive
                await runtime.create(background("go"), tenant="")
                await asyncio.sleep(10)  # cancelled when the runtime stops

        assert [type(e) for e in stopped.value.exceptions] == [Escaped]
        assert isinstance(runtime.failure, Escaped)
        assert not runtime.alive
        await asyncio.wait_for(runtime.wait_stopped(), 1)
        assert (await runtime.readiness())[0] == "stopped"
    critical = [r for r in caplog.records if r.levelno == logging.CRITICAL]
    assert len(critical) == 1
    assert "the runtime stopped for good: Escaped: nothing handles this" in critical[0].message
    assert critical[0].exc_info is not None
