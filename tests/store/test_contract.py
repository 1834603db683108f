"""The store contract, run on both backends (tests/store/conftest.py): SQLite and
PostgreSQL. Every public operation of the store must mean the same on both: the records it
returns, the errors it raises, what it refuses. This file: creating and reading, lanes,
admission and idempotency, leases; test_contract_runs.py: fenced writes, the event log,
stop requests and the journal; test_contract_conversations.py: conversations, retention,
listeners, health and two processes on one database.

What only one backend has (SQLite's file watch and group commit, PostgreSQL's
notifications, advisory locks and database clock) is tested beside it, in
tests/store/test_sqlite.py and tests/store/test_postgres_store.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Sequence
from typing import Any

import pytest

from store import (
    Admission,
    Conflict,
    Fence,
    IdempotencyMismatch,
    ItemRow,
    LaneBusy,
    TooManyQueued,
)
from tests.store.test_sqlite import new_response, rows

Store = Any  # SQLiteStore or PostgresStore: the same methods
DAY = 86400.0


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


async def end(
    store: Store,
    response_id: str,
    fence: Fence,
    state: str = "completed",
    conversation_items: Sequence[ItemRow] = (),
) -> None:
    await store.save_snapshot(
        response_id,
        fence,
        snapshot="{}",
        last_seq=-1,
        status=state,
        terminal=True,
        conversation_items=conversation_items,
    )


async def claimed_existing(store: Store, response_id: str, owner: str = "me") -> Fence:
    record = await store.claim(response_id, owner, 30)
    assert record is not None, f"{response_id} could not be claimed"
    return Fence(owner, record.epoch)


def message(item_id: str, **fields: str) -> ItemRow:
    return ItemRow(item_id, json.dumps({"id": item_id, "type": "message", **fields}))


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
