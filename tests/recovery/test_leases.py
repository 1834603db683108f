"""The lease keeper and the runtime's claim path (issue 21), in-process on a temporary
store: the keeper renews what runners hold from its own thread while the event loop is
blocked, and says the loop is blocked; a create that commits after shutdown began hands
the turn it claimed over at once instead of holding it unrun until its lease expires."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from recovery import ModelEvent, ModelRequest, Runtime, RuntimeSettings, WorkflowContext
from recovery import workflow as make_workflow
from recovery._leases import LeaseKeeper
from store import Fence, SQLiteStore, open_store
from tests.store.test_sqlite import new_response


class NoModel:
    name = "none"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        raise AssertionError("a workflow calls no model")
        yield


@make_workflow
async def hello(ctx: WorkflowContext) -> str:
    return "hello"


async def claim(store: SQLiteStore, response_id: str, ttl: float) -> Fence:
    new = new_response(response_id)
    _, _, record = await store.create_response(new, [], [], None, ("me", ttl))
    assert record is not None
    return Fence("me", record.epoch)


async def expires_in(store: SQLiteStore, response_id: str) -> float:
    record = await store.get_response(response_id, "")
    assert record is not None and record.lease_expires_at is not None
    return record.lease_expires_at - time.time()


async def test_the_keeper_renews_what_is_held_while_the_event_loop_is_blocked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "recovery.leases")
    async with open_store(tmp_path / "k.db") as store:
        held = await claim(store, "resp_held", 0.6)
        await claim(store, "resp_dropped", 0.6)
        keeper = LeaseKeeper(store, 0.6, blocked_after=0.3)
        keeper.hold("resp_held", held)
        keeper.hold("resp_dropped", Fence("me", 1))
        keeper.drop("resp_dropped", Fence("me", 1))
        keeper.start()
        try:
            time.sleep(1.5)  # noqa: ASYNC251 - blocks the loop for over twice the TTL
        finally:
            await keeper.stop()

        assert await expires_in(store, "resp_held") > 0  # renewed during the block
        assert await expires_in(store, "resp_dropped") < 0
    warnings = [r.getMessage() for r in caplog.records]
    assert any("event loop has been blocked" in m and "test_the_keeper" in m for m in warnings)


async def test_a_create_committed_after_shutdown_began_hands_its_turn_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_store(tmp_path / "d.db") as store:
        runtime = Runtime(store, hello, NoModel(), RuntimeSettings(lease_ttl=60))
        commit = store.create_response

        async def commit_then_shut_down(*args: Any, **kwargs: Any) -> Any:
            result = await commit(*args, **kwargs)
            runtime.draining = True  # SIGTERM arrived while this create committed
            return result

        monkeypatch.setattr(store, "create_response", commit_then_shut_down)
        async with runtime.running():
            message = {"type": "message", "role": "user", "id": "msg_1", "content": "hi"}
            params = {"model": "m", "input": [message], "background": True}
            record, created = await runtime.create(params, tenant="")

            after = await store.get_response(record.id, "")
            assert created and after is not None
            assert (after.status, after.owner) == ("in_progress", None)  # another may take it
            assert runtime.active_runs == 0
