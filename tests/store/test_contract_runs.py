"""The store contract on both backends (see test_contract.py): fenced writes and the
event log, stop requests, steps and the journal."""

from __future__ import annotations

import asyncio
import time

import pytest

from store import (
    Admission,
    Conflict,
    ConversationRecord,
    Fence,
    ItemRow,
    LeaseLost,
    StopRequested,
    StoreError,
)
from tests.store.test_contract import Store, claimed, end, in_lane, status
from tests.store.test_sqlite import new_response, rows

# -- fenced writes and the event log -------------------------------------------------------


async def test_appends_land_in_order_and_joined_appends_share_one_write(store: Store) -> None:
    fence = await claimed(store, "resp_a")
    appends = [store.append_events("resp_a", fence, rows(i)) for i in range(100)]
    # A sink's emits join the append still queued: one future for all of them.
    joined = [store.append_events("resp_a", fence, rows(i), join=True) for i in range(100, 110)]
    await asyncio.gather(*appends, *joined)

    assert [e.seq for e in await store.read_events("resp_a", -1)] == list(range(110))
    assert len(set(joined)) == 1


async def test_a_joined_append_that_fails_fails_every_emit_it_carries(store: Store) -> None:
    fence = await claimed(store, "resp_j")
    await store.append_events("resp_j", fence, rows(0))
    gap = store.append_events("resp_j", fence, rows(2), join=True)
    after = store.append_events("resp_j", fence, rows(3), join=True)
    assert gap is after
    with pytest.raises(StoreError):
        await gap
    assert [e.seq for e in await store.read_events("resp_j", -1)] == [0]


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


async def test_no_body_starts_under_an_expired_lease_that_nobody_took_yet(store: Store) -> None:
    """A host that stalled past its lease may wake before another host recovers the
    response: its writes still land (its fence holds), but it claims no call to run, so
    the host that recovers it never finds a body started behind its back (G3, G8)."""
    fence = await claimed(store, "resp_a", ttl=-1)
    call = {"tool": "t", "arguments": "{}", "idempotency_key": "k"}
    fresh = await claimed(store, "resp_b")
    await store.claim_call("resp_b", fresh, call_id="c1", **call)

    with pytest.raises(LeaseLost):
        await store.claim_call("resp_a", fence, call_id="c1", **call)
    assert await store.journal("resp_a") == []
    expire = await claimed(store, "resp_c", ttl=0.2)
    await store.claim_call("resp_c", expire, call_id="c1", **call)
    await asyncio.sleep(0.3)
    with pytest.raises(LeaseLost):
        await store.reclaim_call("resp_c", expire, "c1")
    await store.finish_call("resp_c", expire, "c1", state="completed", output="done")
    assert [e.state for e in await store.journal("resp_c")] == ["completed"]


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
