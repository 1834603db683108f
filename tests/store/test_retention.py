"""Retention: the purge deletes finished responses older than the cut-off with all their
data, and idempotency keys, and never touches an unfinished response."""

from __future__ import annotations

import time
from pathlib import Path

from store import Admission, EventRow, Fence, SQLiteStore, open_store
from tests.store.test_sqlite import new_response

DAY = 86400.0


async def make(store: SQLiteStore, response_id: str, *, finish: bool, key: str) -> None:
    await store.create_response(
        new_response(response_id, owner="me"),
        [],
        [],
        Admission(idempotency_key=key, request_hash="h"),
    )
    fence = Fence("me", 1)
    await store.append_events(response_id, fence, [EventRow(0, "response.created", "{}")])
    await store.claim_call(
        response_id, fence, call_id="c1", tool="t", arguments="{}", idempotency_key="k"
    )
    await store.record_step(response_id, fence, 0, "[]")
    if finish:
        await store.save_snapshot(
            response_id, fence, snapshot="{}", last_seq=0, status="completed", terminal=True
        )


async def counts(store: SQLiteStore, response_id: str) -> tuple[bool, int, int]:
    return (
        await store.get_response(response_id, "") is not None,
        len(await store.read_events(response_id, -1)),
        len(await store.journal(response_id)),
    )


async def test_the_purge_follows_the_clock_and_spares_running_responses(tmp_path: Path) -> None:
    async with open_store(tmp_path / "r.db") as store:
        await make(store, "resp_done", finish=True, key="k-done")
        await make(store, "resp_running", finish=False, key="k-running")
        now = time.time()

        assert await store.purge(before=now - 30 * DAY) == (0, 0)  # not old enough yet
        assert await counts(store, "resp_done") == (True, 1, 1)

        purged = await store.purge(before=now + 31 * DAY)  # the clock moved past retention

        assert purged == (1, 1)
        assert await counts(store, "resp_done") == (False, 0, 0)
        assert await store.get_step("resp_done", 0) is None
        assert await store.idempotency_key("", "k-done") is None
        assert await counts(store, "resp_running") == (True, 1, 1)
        assert await store.idempotency_key("", "k-running") is not None


async def test_a_large_backlog_is_purged_in_several_transactions(tmp_path: Path) -> None:
    async with open_store(tmp_path / "r.db") as store:
        for n in range(5):
            await make(store, f"resp_{n}", finish=True, key=f"k-{n}")
        commits: list[int] = []
        store.on_commit(lambda _seconds, operations: commits.append(operations))

        purged = await store.purge(before=time.time() + 31 * DAY, batch=2)

        assert purged == (5, 5)
        assert len(commits) == 3  # 2 + 2 + 1
        assert [await store.get_response(f"resp_{n}", "") for n in range(5)] == [None] * 5
