"""The store contract, run on both backends: SQLite (one file) and PostgreSQL (a
throwaway server, tests/support/postgres.py). Every public operation of the store must
mean the same on both: the records it returns, the errors it raises, what it refuses.

What only one backend has (SQLite's file watch and group commit, PostgreSQL's
notifications, advisory locks and database clock) is tested beside it, in
tests/store/test_sqlite.py and tests/store/test_postgres_store.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from store import (
    Admission,
    Conflict,
    ConversationRecord,
    EventRow,
    Fence,
    IdempotencyMismatch,
    ItemRow,
    LaneBusy,
    LeaseLost,
    ResponseRecord,
    StopRequested,
    StoreError,
    TooManyQueued,
    open_store,
)
from store.postgres import open_postgres_store
from tests.store.test_sqlite import new_response, rows

Store = Any  # SQLiteStore or PostgresStore: the same methods
Opener = Callable[[], AbstractAsyncContextManager[Store]]
DAY = 86400.0


@pytest.fixture(params=["sqlite", "postgres"])
def open_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens a store of the backend under test; every call opens the same database (a
    second call is a second process, or host, on it)."""
    if request.param == "sqlite":
        path = tmp_path / "store.db"
        return lambda: open_store(path)
    url = request.getfixturevalue("postgres_url")
    return lambda: open_postgres_store(url)


@pytest.fixture
async def store(open_backend: Opener) -> AsyncIterator[Store]:
    async with open_backend() as opened:
        yield opened


def in_lane(response_id: str, lane: str, **changes: Any) -> Any:
    return dataclasses.replace(new_response(response_id), lane=lane, **changes)


async def claimed(store: Store, response_id: str, owner: str = "me", ttl: float = 30) -> Fence:
    _, _, record = await store.create_response(
        new_response(response_id), [], [], None, (owner, ttl)
    )
    assert record is not None
    return Fence(owner, record.epoch)


async def status(store: Store, response_id: str) -> str | None:
    record = await store.get_response(response_id, "")
    return None if record is None else record.status


async def end(store: Store, response_id: str, fence: Fence, state: str = "completed") -> None:
    await store.save_snapshot(
        response_id, fence, snapshot="{}", last_seq=-1, status=state, terminal=True
    )


# -- creating and reading -----------------------------------------------------------------


async def test_a_created_response_reads_back_with_its_items_and_events(store: Store) -> None:
    items = [ItemRow(f"item_{i}", json.dumps({"n": i})) for i in range(3)]
    record, created, claim = await store.create_response(new_response("resp_a"), items, rows(0, 1))

    assert created and claim is None
    assert (record.id, record.status, record.epoch, record.owner) == ("resp_a", "queued", 0, None)
    assert await store.get_response("resp_a", "") == record
    assert await store.get_response("resp_a", "another tenant") is None
    assert await store.response_snapshot("resp_a", "") == ('{"status": "queued"}', True)
    assert [e.seq for e in await store.read_events("resp_a", -1)] == [0, 1]
    assert [e.seq for e in await store.read_events("resp_a", 0)] == [1]
    page, more = await store.list_response_items("resp_a", after=None, order="asc", limit=2)
    assert [p.item_id for p in page] == ["item_0", "item_1"] and more
    page, more = await store.list_response_items("resp_a", after="item_1", order="asc", limit=2)
    assert [p.item_id for p in page] == ["item_2"] and not more
    page, _ = await store.list_response_items("resp_a", after=None, order="desc", limit=5)
    assert [p.item_id for p in page] == ["item_2", "item_1", "item_0"]
    assert (await store.list_response_items("resp_a", after="nope", order="asc", limit=2)) is None


async def test_a_reused_id_is_a_conflict(store: Store) -> None:
    await store.create_response(new_response("resp_a"), [], [])

    with pytest.raises(Conflict):
        await store.create_response(new_response("resp_a"), [], [])


async def test_a_foreground_response_is_created_holding_its_lease(store: Store) -> None:
    now = time.time()
    new = dataclasses.replace(
        new_response("resp_f", owner="me"), created_at=now, lease_expires_at=now + 30
    )

    record, _, _ = await store.create_response(new, [], [])

    assert (record.status, record.owner, record.epoch) == ("in_progress", "me", 1)
    assert record.lease_expires_at is not None
    assert now + 20 < record.lease_expires_at < now + 40


async def test_the_chain_is_oldest_first_and_stops_at_a_deleted_response(store: Store) -> None:
    previous = None
    for n in range(3):
        new = dataclasses.replace(new_response(f"resp_{n}"), previous_response_id=previous)
        await store.create_response(new, [ItemRow(f"in_{n}", f'"{n}"')], [])
        previous = f"resp_{n}"

    chain = await store.chain("resp_2", "")
    assert [(r.id, items) for r, items in chain] == [
        ("resp_0", ['"0"']),
        ("resp_1", ['"1"']),
        ("resp_2", ['"2"']),
    ]
    fence = await claimed_existing(store, "resp_0")
    await end(store, "resp_0", fence)
    assert await store.delete_response("resp_0", "")
    assert [r.id for r, _ in await store.chain("resp_2", "")] == ["resp_1", "resp_2"]
    assert await store.chain("resp_2", "another tenant") == []


async def claimed_existing(store: Store, response_id: str, owner: str = "me") -> Fence:
    record = await store.claim(response_id, owner, 30)
    assert record is not None, f"{response_id} could not be claimed"
    return Fence(owner, record.epoch)


async def test_only_a_finished_response_of_the_tenant_can_be_deleted(store: Store) -> None:
    fence = await claimed(store, "resp_a")

    assert not await store.delete_response("resp_a", "")  # running
    await end(store, "resp_a", fence)
    assert not await store.delete_response("resp_a", "another tenant")
    assert await store.delete_response("resp_a", "")
    assert await store.get_response("resp_a", "") is None
    assert not await store.delete_response("resp_a", "")


# -- lanes, admission, idempotency --------------------------------------------------------


async def test_a_lane_runs_first_in_first_out(store: Store) -> None:
    head = await claimed(store, "resp_1", ttl=30)
    for n in (2, 3):
        _, _, claim = await store.create_response(
            in_lane(f"resp_{n}", "resp_1"), [], [], None, ("me", 30)
        )
        assert claim is None  # the lane is busy

    assert await store.lane_busy("resp_1") and not await store.lane_busy("resp_other")
    assert await store.is_lane_head("resp_1") and not await store.is_lane_head("resp_2")
    assert await store.next_in_lane("resp_1") is None  # its head is running
    assert await store.claim("resp_3", "me", 30) is None  # not the head
    assert await store.count_queued() == 2

    await end(store, "resp_1", head)

    assert await store.next_in_lane("resp_1") == "resp_2"
    assert await store.claim("resp_3", "me", 30) is None
    second = await store.claim("resp_2", "me", 30)
    assert second is not None and second.status == "in_progress" and second.epoch == 1
    assert await store.claim("resp_2", "other", 30) is None  # claimed once only
    assert await store.count_queued() == 1


async def test_admission_rules_refuse_without_writing(store: Store) -> None:
    await claimed(store, "resp_1")
    await store.create_response(in_lane("resp_2", "resp_1"), [], [])

    with pytest.raises(LaneBusy):
        await store.create_response(
            in_lane("resp_x", "resp_1"), [], [], Admission(reject_if_busy=True)
        )
    with pytest.raises(TooManyQueued) as lane:
        await store.create_response(in_lane("resp_y", "resp_1"), [], [], Admission(max_queued=1))
    with pytest.raises(TooManyQueued) as tenant:
        await store.create_response(new_response("resp_z"), [], [], Admission(max_queued_tenant=1))

    assert (lane.value.where, lane.value.queued) == ("lane", 1)
    assert (tenant.value.where, tenant.value.queued) == ("tenant", 1)
    for refused in ("resp_x", "resp_y", "resp_z"):
        assert await store.get_response(refused, "") is None
    free, _, _ = await store.create_response(
        new_response("resp_free"), [], [], Admission(reject_if_busy=True, max_queued=0)
    )
    assert free.status == "queued"


@pytest.mark.parametrize("steer", ["interrupt", "rollback"])
async def test_a_steer_marks_only_the_running_head_of_its_lane(store: Store, steer: str) -> None:
    await claimed(store, "resp_1", owner="host")
    await store.create_response(in_lane("resp_2", "resp_1"), [], [])

    await store.create_response(in_lane("resp_3", "resp_1"), [], [], Admission(steer=steer))

    assert await store.stop_requests("host") == [("resp_1", steer)]
    records = [await store.get_response(f"resp_{n}", "") for n in (1, 2, 3)]
    assert [r.steer for r in records] == [steer, None, None]
    assert records[0].stop_request == steer


async def test_a_retried_create_returns_the_first_response(store: Store) -> None:
    key = Admission(idempotency_key="key-1", request_hash="hash-1")
    first, created, _ = await store.create_response(new_response("resp_a"), [], rows(0), key)

    again, created_again, claim = await store.create_response(
        new_response("resp_b"), [], rows(0), key, ("me", 30)
    )

    assert created and not created_again and claim is None
    assert again == first
    assert await store.get_response("resp_b", "") is None
    assert await store.idempotency_key("", "key-1") == ("hash-1", "resp_a")
    assert await store.idempotency_key("other tenant", "key-1") is None
    with pytest.raises(IdempotencyMismatch):
        await store.create_response(
            new_response("resp_c"), [], [], dataclasses.replace(key, request_hash="hash-2")
        )


async def test_a_deleted_response_frees_its_idempotency_key(store: Store) -> None:
    key = Admission(idempotency_key="key-1", request_hash="hash-1")
    await store.create_response(new_response("resp_a", owner="me"), [], [], key)
    await end(store, "resp_a", Fence("me", 1))
    assert await store.delete_response("resp_a", "")

    record, created, _ = await store.create_response(new_response("resp_b"), [], [], key)

    assert created and record.id == "resp_b"
    assert await store.idempotency_key("", "key-1") == ("hash-1", "resp_b")


# -- leases ---------------------------------------------------------------------------------


async def test_a_claim_sets_the_snapshot_status_and_keeps_the_rest(store: Store) -> None:
    snapshot = '{"id":"resp_s","object":"response","created_at":1,"status":"queued","output":[]}'
    new = dataclasses.replace(new_response("resp_s"), snapshot=snapshot)
    _, _, record = await store.create_response(new, [], [], None, ("me", 30))

    assert record is not None
    assert json.loads(record.snapshot) == {**json.loads(snapshot), "status": "in_progress"}
    assert list(json.loads(record.snapshot)) == list(json.loads(snapshot))


async def test_a_renewal_extends_only_leases_its_fences_hold(store: Store) -> None:
    driven = await claimed(store, "resp_driven", ttl=5)
    await claimed(store, "resp_orphan", ttl=5)
    stale = await claimed(store, "resp_stale", ttl=5)
    before = {
        r: (await store.get_response(r, "")).lease_expires_at for r in ("resp_orphan", "resp_stale")
    }

    renewed = await asyncio.wrap_future(
        store.renew_leases(
            [("resp_driven", driven), ("resp_stale", Fence("me", stale.epoch + 1))], 60
        )
    )

    assert renewed == ["resp_driven"]
    assert (await store.get_response("resp_driven", "")).lease_expires_at > time.time() + 50
    assert {r: (await store.get_response(r, "")).lease_expires_at for r in before} == before


async def test_a_renewal_is_answered_while_the_event_loop_is_blocked(store: Store) -> None:
    fence = await claimed(store, "resp_a", ttl=5)

    # Waiting on the loop's own thread: only the store's own thread can answer this.
    renewed = store.renew_leases([("resp_a", fence)], 60).result(timeout=20)

    assert renewed == ["resp_a"]


async def test_recovery_takes_only_dead_leases_and_counts_all_but_a_hand_over(store: Store) -> None:
    await claimed(store, "resp_live", ttl=60)
    await claimed(store, "resp_dead", ttl=-1)

    assert await store.recover("resp_live", "other", 5) is None
    assert [r for r, _ in await store.orphans()] == ["resp_dead"]
    own = await store.recover("resp_dead", "me", -1)  # this process's own turn
    other = await store.recover("resp_dead", "other", 5)  # another process's
    assert other is not None
    await store.release_leases([("resp_dead", Fence("other", other.epoch))])
    assert await store.orphans() == [("resp_dead", "in_progress")]
    handed = await store.recover("resp_dead", "me", 5)

    assert own is not None and handed is not None
    assert (own.recoveries, other.recoveries, handed.recoveries) == (1, 2, 2)
    assert (own.epoch, other.epoch, handed.epoch) == (2, 3, 4)
    assert await store.recover("resp_dead", "third", 5) is None
    assert await store.orphans() == []


async def test_the_orphan_scan_lists_queued_lane_heads_oldest_first(store: Store) -> None:
    for response_id in ("resp_b", "resp_a"):
        await store.create_response(new_response(response_id), [], [])
    await store.create_response(in_lane("resp_a2", "resp_a"), [], [])

    assert await store.orphans() == [("resp_b", "queued"), ("resp_a", "queued")]
    assert await store.orphans(limit=1) == [("resp_b", "queued")]


async def test_a_released_lease_is_free_at_once(store: Store) -> None:
    fence = await claimed(store, "resp_a", ttl=60)

    await store.release_lease("resp_a", Fence("me", fence.epoch + 1))  # stale: no effect
    assert await store.recover("resp_a", "other", 5) is None
    await store.release_lease("resp_a", fence)

    taken = await store.recover("resp_a", "other", 5)
    assert taken is not None and taken.recoveries == 0 and taken.owner == "other"


# -- fenced writes and the event log -------------------------------------------------------


async def test_appends_land_in_order_and_a_callable_is_called_once(store: Store) -> None:
    fence = await claimed(store, "resp_a")
    calls: list[int] = []

    def take() -> Sequence[EventRow]:
        calls.append(1)
        return rows(100, 101)

    appends = [store.append_events("resp_a", fence, rows(i)) for i in range(100)]
    appends.append(store.append_events("resp_a", fence, take))
    await asyncio.gather(*appends)

    assert [e.seq for e in await store.read_events("resp_a", -1)] == list(range(102))
    assert calls == [1]


async def test_the_log_refuses_a_gap_a_repeat_and_a_snapshot_ahead_of_it(store: Store) -> None:
    fence = await claimed(store, "resp_g")
    await store.append_events("resp_g", fence, rows(0, 1))

    results = await asyncio.gather(
        store.append_events("resp_g", fence, rows(3)),
        store.append_events("resp_g", fence, rows(1)),
        store.append_events("resp_g", fence, rows(2)),
        return_exceptions=True,
    )
    assert [type(r) for r in results] == [Conflict, Conflict, type(None)]
    with pytest.raises(Conflict):
        await store.save_snapshot(
            "resp_g", fence, snapshot="{}", last_seq=3, status="in_progress", logged=True
        )
    with pytest.raises(Conflict):
        await store.save_snapshot(
            "resp_g",
            fence,
            snapshot="{}",
            last_seq=5,
            status="in_progress",
            events=rows(4, 5),
            logged=True,
        )
    await store.save_snapshot(
        "resp_g",
        fence,
        snapshot='{"n":4}',
        last_seq=4,
        status="in_progress",
        events=rows(3, 4),
        logged=True,
        step=2,
    )

    assert [e.seq for e in await store.read_events("resp_g", -1)] == [0, 1, 2, 3, 4]
    record = await store.get_response("resp_g", "")
    assert (record.last_seq, record.snapshot, record.step) == (4, '{"n":4}', 2)


async def test_a_stale_fence_writes_nothing(store: Store) -> None:
    fence = await claimed(store, "resp_a", ttl=-1)
    taken = await store.recover("resp_a", "other", 30)
    assert taken is not None

    with pytest.raises(LeaseLost):
        await store.append_events("resp_a", fence, rows(0))
    with pytest.raises(LeaseLost):
        await store.record_step("resp_a", fence, 0, "[]", events=rows(0))
    with pytest.raises(LeaseLost):
        await store.claim_call(
            "resp_a", fence, call_id="c", tool="t", arguments="{}", idempotency_key="k"
        )
    with pytest.raises(LeaseLost):
        await store.save_snapshot("resp_a", fence, snapshot="{}", last_seq=0, status="in_progress")
    with pytest.raises(LeaseLost):
        await end(store, "resp_a", fence)

    assert await store.read_events("resp_a", -1) == []
    assert await store.get_step("resp_a", 0) is None and await store.journal("resp_a") == []
    assert await status(store, "resp_a") == "in_progress"


async def test_the_end_releases_the_lease_and_nothing_writes_after_it(store: Store) -> None:
    fence = await claimed(store, "resp_a")

    await store.save_snapshot(
        "resp_a",
        fence,
        snapshot="{}",
        last_seq=0,
        status="completed",
        events=rows(0),
        terminal=True,
        logged=True,
    )

    record = await store.get_response("resp_a", "")
    assert (record.status, record.owner, record.lease_expires_at) == ("completed", None, None)
    with pytest.raises(LeaseLost):
        await store.append_events("resp_a", fence, rows(1))
    assert not await store.request_cancel("resp_a")


async def test_a_discarded_response_leaves_nothing_but_its_conversation_items(store: Store) -> None:
    await store.create_conversation(ConversationRecord("conv_1", "", time.time(), "{}"), [])
    new = in_lane("resp_a", "conv_1", conversation_id="conv_1")
    key = Admission(idempotency_key="k", request_hash="h")
    _, _, record = await store.create_response(new, [], rows(0), key, ("me", 30))
    fence = Fence("me", record.epoch)

    await store.save_snapshot(
        "resp_a",
        fence,
        snapshot="{}",
        last_seq=1,
        status="completed",
        events=rows(1),
        terminal=True,
        logged=True,
        discard=True,
        conversation_items=[ItemRow("out_1", '{"type":"message"}')],
    )

    assert await store.get_response("resp_a", "") is None
    assert await store.read_events("resp_a", -1) == []
    assert await store.idempotency_key("", "k") is None
    assert await store.conversation_history("conv_1", None) == ['{"type":"message"}']


# -- stop requests --------------------------------------------------------------------------


async def test_a_recorded_cancel_wins_over_the_end_unless_it_is_cancelled(store: Store) -> None:
    fence = await claimed(store, "resp_a", owner="host")

    assert await store.request_cancel("resp_a")
    assert await store.request_cancel("resp_a")  # idempotent
    assert await store.stop_requests("host") == [("resp_a", "cancelled")]
    for state in ("completed", "failed", "incomplete"):
        with pytest.raises(StopRequested) as stop:
            await end(store, "resp_a", fence, state)
        assert stop.value.kind == "cancelled"
    assert await status(store, "resp_a") == "in_progress"

    await end(store, "resp_a", fence, "cancelled")
    assert await status(store, "resp_a") == "cancelled"
    assert not await store.request_cancel("resp_a")


@pytest.mark.parametrize(
    ("steer", "refused", "allowed"),
    [
        pytest.param("interrupt", ["completed"], "incomplete", id="interrupt"),
        pytest.param("rollback", ["completed", "incomplete", "failed"], "cancelled", id="rollback"),
    ],
)
async def test_a_steer_wins_over_the_ends_it_forbids(
    store: Store, steer: str, refused: list[str], allowed: str
) -> None:
    fence = await claimed(store, "resp_1")
    await store.create_response(in_lane("resp_2", "resp_1"), [], [], Admission(steer=steer))

    for state in refused:
        with pytest.raises(StopRequested) as stop:
            await end(store, "resp_1", fence, state)
        assert stop.value.kind == steer
    await end(store, "resp_1", fence, allowed)
    assert await status(store, "resp_1") == allowed


async def test_a_queued_response_is_cancelled_only_while_nobody_holds_it(store: Store) -> None:
    await store.create_response(new_response("resp_q"), [], rows(0))
    await claimed(store, "resp_held")

    assert not await store.cancel_queued("resp_held", snapshot="{}", last_seq=0, events=[])
    with pytest.raises(Conflict):
        await store.cancel_queued("resp_q", snapshot="{}", last_seq=2, events=rows(2))
    assert await store.cancel_queued("resp_q", snapshot='{"c":1}', last_seq=1, events=rows(1))
    assert not await store.cancel_queued("resp_q", snapshot="{}", last_seq=1, events=[])

    record = await store.get_response("resp_q", "")
    assert (record.status, record.cancel_requested, record.snapshot) == (
        "cancelled",
        True,
        '{"c":1}',
    )
    assert [e.seq for e in await store.read_events("resp_q", -1)] == [0, 1]
    assert await store.claim("resp_q", "me", 30) is None


# -- steps and the journal -------------------------------------------------------------------


async def test_steps_and_journal_entries_are_written_once(store: Store) -> None:
    fence = await claimed(store, "resp_a")
    await store.record_step("resp_a", fence, 1, '["calls"]', events=rows(0, 1))
    with pytest.raises(Conflict):
        await store.record_step("resp_a", fence, 1, "[]", events=rows(2))
    with pytest.raises(Conflict):
        await store.record_step("resp_a", fence, 2, "[]", events=rows(5))

    call = {"tool": "t", "arguments": "{}", "idempotency_key": "k1"}
    await store.claim_call("resp_a", fence, call_id="c1", step=1, **call)
    await store.claim_call("resp_a", fence, call_id="c1", step=2, **call)  # another step
    await store.claim_call(
        "resp_a", fence, call_id="c2", step=1, state="errored", output="no", **call
    )
    with pytest.raises(Conflict):
        await store.claim_call("resp_a", fence, call_id="c1", step=1, **call)
    await store.reclaim_call("resp_a", fence, "c1", step=1)
    await store.finish_call("resp_a", fence, "c1", step=1, state="completed", output="yes")
    with pytest.raises(Conflict):
        await store.finish_call("resp_a", fence, "c1", step=1, state="completed", output="again")
    with pytest.raises(Conflict):
        await store.reclaim_call("resp_a", fence, "c2", step=1)

    assert await store.get_step("resp_a", 1) == '["calls"]'
    assert await store.get_step("resp_a", 2) is None
    assert [e.seq for e in await store.read_events("resp_a", -1)] == [0, 1]
    entries = await store.journal("resp_a")
    assert [(e.call_id, e.state, e.output, e.attempts) for e in entries] == [
        ("c1", "completed", "yes", 2),
        ("c1", "claimed", None, 1),
        ("c2", "errored", "no", 1),
    ]
    assert [e.call_id for e in await store.journal("resp_a", step=2)] == ["c1"]


# -- conversations ---------------------------------------------------------------------------


def message(item_id: str, **fields: str) -> ItemRow:
    return ItemRow(item_id, json.dumps({"id": item_id, "type": "message", **fields}))


async def test_conversations_are_created_read_updated_and_deleted(store: Store) -> None:
    record = ConversationRecord("conv_1", "", 1234.5, '{"a":"b"}')
    await store.create_conversation(record, [message("m1"), message("m2")])

    assert await store.get_conversation("conv_1", "") == record
    assert await store.get_conversation("conv_1", "another tenant") is None
    updated = await store.update_conversation("conv_1", "", '{"c":"d"}')
    assert updated == dataclasses.replace(record, metadata='{"c":"d"}')
    assert await store.update_conversation("conv_1", "another tenant", "{}") is None
    assert await store.get_conversation_item("conv_1", "m2") == message("m2")
    assert await store.add_conversation_items("conv_1", "", [message("m3")])
    assert not await store.add_conversation_items("conv_x", "", [message("m4")])
    page, more = await store.list_conversation_items("conv_1", after="m1", order="asc", limit=1)
    assert [p.item_id for p in page] == ["m2"] and more
    page, more = await store.list_conversation_items("conv_1", after="m3", order="desc", limit=5)
    assert [p.item_id for p in page] == ["m2", "m1"] and not more

    assert not await store.delete_conversation("conv_1", "another tenant")
    assert await store.delete_conversation("conv_1", "")
    assert await store.get_conversation("conv_1", "") is None
    assert await store.conversation_history("conv_1", None) == []


async def test_an_append_check_sees_the_tool_items_and_may_refuse(store: Store) -> None:
    call = ItemRow("fc_1", json.dumps({"type": "function_call", "call_id": "call_1"}))
    output = ItemRow("fco_1", json.dumps({"type": "function_call_output", "call_id": "call_1"}))
    await store.create_conversation(
        ConversationRecord("conv_1", "", 0.0, "{}"), [message("m"), call]
    )
    seen: list[list[str]] = []

    def refuse_a_second_output(tool_items: list[str]) -> None:
        seen.append(tool_items)
        if any(json.loads(t)["type"] == "function_call_output" for t in tool_items):
            raise ValueError("call_1 is answered already")

    assert await store.add_conversation_items("conv_1", "", [output], check=refuse_a_second_output)
    with pytest.raises(ValueError, match="answered already"):
        await store.add_conversation_items("conv_1", "", [output], check=refuse_a_second_output)

    # (SQLite may run a refused check twice: alone again after its batch failed.)
    assert seen[0] == [call.item] and seen[-1] == [call.item, output.item]
    assert len(await store.conversation_history("conv_1", None)) == 3


async def test_deleting_either_half_of_a_call_pair_deletes_both(store: Store) -> None:
    items = [
        ItemRow("fc_1", json.dumps({"type": "function_call", "call_id": "call_1"})),
        ItemRow("fco_1", json.dumps({"type": "function_call_output", "call_id": "call_1"})),
        message("msg", call_id="call_1"),
    ]
    await store.create_conversation(ConversationRecord("conv_1", "", 0.0, "{}"), items)

    assert await store.delete_conversation_item("conv_1", "fco_1")
    assert not await store.delete_conversation_item("conv_1", "fc_1")

    assert [json.loads(t)["type"] for t in await store.conversation_history("conv_1", None)] == [
        "message"
    ]


async def test_a_turn_sees_its_conversation_as_it_was_when_claimed(store: Store) -> None:
    await store.create_conversation(
        ConversationRecord("conv_1", "", 0.0, "{}"), [message("a"), message("b")]
    )
    assert await store.delete_conversation_item("conv_1", "a")
    new = in_lane("resp_q", "conv_1", conversation_id="conv_1")
    _, _, turn = await store.create_response(new, [], [], None, ("me", 30))
    assert turn is not None and turn.conversation_upto == 2

    await store.add_conversation_items("conv_1", "", [message("c")])
    history = await store.conversation_history("conv_1", turn.conversation_upto)
    assert [json.loads(t)["id"] for t in history] == ["b"]

    await store.save_snapshot(
        "resp_q",
        Fence("me", turn.epoch),
        snapshot="{}",
        last_seq=-1,
        status="completed",
        terminal=True,
        conversation_items=[message("out")],
    )
    history = await store.conversation_history("conv_1", None)
    assert [json.loads(t)["id"] for t in history] == ["b", "c", "out"]


async def test_a_foreground_turn_records_where_its_history_ends(store: Store) -> None:
    await store.create_conversation(ConversationRecord("conv_1", "", 0.0, "{}"), [message("a")])
    new = dataclasses.replace(
        new_response("resp_f", owner="me"), lane="conv_1", conversation_id="conv_1"
    )
    await store.create_response(new, [], [])

    await store.save_snapshot(
        "resp_f",
        Fence("me", 1),
        snapshot="{}",
        last_seq=-1,
        status="completed",
        terminal=True,
        conversation_items=[message("out")],
    )

    record = await store.get_response("resp_f", "")
    assert record.conversation_upto == 1


# -- retention ---------------------------------------------------------------------------------


async def test_the_purge_follows_retention_and_spares_live_chains(store: Store) -> None:
    for response_id, previous in [("resp_0", None), ("resp_1", "resp_0"), ("resp_other", None)]:
        new = dataclasses.replace(new_response(response_id), previous_response_id=previous)
        key = Admission(idempotency_key=f"k-{response_id}", request_hash="h")
        await store.create_response(new, [], rows(0), key)
        await end(store, response_id, await claimed_existing(store, response_id))
    live = dataclasses.replace(new_response("resp_live"), previous_response_id="resp_1")
    await store.create_response(live, [], [])

    assert await store.purge(before=time.time() - 30 * DAY) == (0, 0)  # not old enough
    assert await store.purge(before=time.time() + 31 * DAY, batch=1) == (1, 1)

    assert await store.get_response("resp_other", "") is None
    assert await store.read_events("resp_other", -1) == []
    assert await store.idempotency_key("", "k-resp_other") is None
    for kept in ("resp_0", "resp_1", "resp_live"):
        assert await store.get_response(kept, "") is not None
    await end(store, "resp_live", await claimed_existing(store, "resp_live"))
    assert await store.purge(before=time.time() + 31 * DAY) == (3, 2)


# -- listeners and health ----------------------------------------------------------------------


async def test_listeners_hear_each_commit_after_it(store: Store) -> None:
    heard: list[tuple[str, list[int]]] = []
    commits: list[int] = []
    store.on_events_committed(lambda rid, events: heard.append((rid, [e.seq for e in events])))
    store.on_commit(lambda seconds, writes: commits.append(writes))

    fence = await claimed(store, "resp_a")
    await store.append_events("resp_a", fence, rows(0, 1))
    await store.record_step("resp_a", fence, 0, "[]", events=rows(2))
    await store.save_snapshot(
        "resp_a",
        fence,
        snapshot="{}",
        last_seq=3,
        status="completed",
        events=rows(3),
        terminal=True,
    )

    assert heard == [("resp_a", [0, 1]), ("resp_a", [2]), ("resp_a", [3])]
    assert commits and all(n >= 1 for n in commits)


async def test_a_healthy_store_answers_its_health_checks(store: Store) -> None:
    store.check_file()
    await store.check_writable()
    await store.ping()


async def test_a_write_after_the_store_closed_fails_instead_of_hanging(
    open_backend: Opener,
) -> None:
    async with open_backend() as store:
        await store.create_response(new_response("resp_z"), [], [])

    with pytest.raises(StoreError, match="closed"):
        await asyncio.wait_for(store.request_cancel("resp_z"), 10)


# -- two processes on one database -----------------------------------------------------------


async def test_two_processes_share_leases_and_lanes(open_backend: Opener) -> None:
    async with open_backend() as one, open_backend() as two:
        fence = await claimed(one, "resp_1", owner="one", ttl=60)
        await two.create_response(in_lane("resp_2", "resp_1"), [], [])

        assert await two.recover("resp_1", "two", 60) is None
        assert await two.claim("resp_2", "two", 60) is None
        await one.append_events("resp_1", fence, rows(0))
        assert [e.seq for e in await two.read_events("resp_1", -1)] == [0]
        assert await two.request_cancel("resp_1")
        assert await one.stop_requests("one") == [("resp_1", "cancelled")]
        await end(one, "resp_1", fence, "cancelled")

        taken: ResponseRecord | None = await two.claim("resp_2", "two", 60)
        assert taken is not None and taken.owner == "two"
