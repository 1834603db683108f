"""A turn whose end collides with data the store holds (a Conflict) ends `failed` at once.

The bug: the runner took every store error of a terminal write for a passing one, left
the turn to the recovery scan, and recovery ran it again (calling the model each time) to
meet the same collision, until the turn ended `recovery_exhausted`, its lane blocked all
along. Items two turns of a conversation carried did that (tests/integration/
test_duplicate_items.py); a Conflict is permanent whatever its cause, so the runner now
ends the turn `failed` without the rows that collided.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from recovery import (
    Agent,
    Conversations,
    ModelEvent,
    ModelRequest,
    Runtime,
    RuntimeSettings,
    TextDelta,
    normalize_input,
    open_store,
)
from store import Conflict

FAST = RuntimeSettings(scan_interval=0.1, heartbeat_interval=0.05)


class Counted:
    name = "counted"

    def __init__(self) -> None:
        self.calls = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.calls += 1
        yield TextDelta("an answer")


async def test_a_terminal_write_that_collides_ends_the_turn_failed_once(tmp_path: Path) -> None:
    model = Counted()
    async with open_store(tmp_path / "conflict.db") as store:
        save = store.save_snapshot

        async def colliding(*args: Any, **kwargs: Any) -> None:
            if kwargs.get("conversation_items"):
                raise Conflict("conversation item: UNIQUE constraint failed")
            await save(*args, **kwargs)

        store.save_snapshot = colliding  # type: ignore[method-assign]
        async with Runtime(store, Agent(), model, FAST).running() as runtime:
            conversation = await Conversations(runtime).create("t", {}, [])
            body = {
                "model": "m",
                "input": normalize_input("hello"),
                "conversation": conversation.id,
                "background": True,
            }
            record, _ = await runtime.create(body, tenant="t")
            final = await asyncio.wait_for(runtime.wait_final(record.id, "t"), 10)
            await asyncio.sleep(0.5)  # a few recovery scans, were it left to them

    assert final["status"] == "failed"
    assert final["error"]["code"] == "server_error"
    assert model.calls == 1


async def test_a_cancel_recorded_after_a_collision_still_wins(tmp_path: Path) -> None:
    """The end collides, and a cancel is recorded before the failed end that replaces it:
    the cancel wins (G9), as it does over any end. Before, the refused failed end was
    taken for a passing store error, and recovery ran the turn again until it ended
    `recovery_exhausted` instead of `cancelled`."""
    model = Counted()
    async with open_store(tmp_path / "conflict.db") as store:
        save = store.save_snapshot

        async def colliding(response_id: str, *args: Any, **kwargs: Any) -> None:
            if kwargs.get("conversation_items"):
                assert await store.request_cancel(response_id)
                raise Conflict("conversation item: UNIQUE constraint failed")
            await save(response_id, *args, **kwargs)

        store.save_snapshot = colliding  # type: ignore[method-assign]
        async with Runtime(store, Agent(), model, FAST).running() as runtime:
            conversation = await Conversations(runtime).create("t", {}, [])
            body = {
                "model": "m",
                "input": normalize_input("hello"),
                "conversation": conversation.id,
                "background": True,
            }
            record, _ = await runtime.create(body, tenant="t")
            final = await asyncio.wait_for(runtime.wait_final(record.id, "t"), 10)

    assert final["status"] == "cancelled"
    assert model.calls == 1
