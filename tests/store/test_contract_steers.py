"""The store contract for steers (`response.steer`), on both backends: a steer commits
only while its target can take it, asks a running target to stop, and is settled or
taken over exactly once, however many processes try at once."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from store import Admission, NewSteer, StaleSteers, SteerNotAdded, StopRequested
from tests.store.test_contract import Store, claimed, end, status
from tests.store.test_sqlite import new_response


def steer(steer_id: str, target: str = "resp_t", state: str = "queued") -> NewSteer:
    item = {"id": f"msg_{steer_id}", "type": "message", "role": "user", "content": steer_id}
    return NewSteer(steer_id, "", target, json.dumps([item]), state)


async def test_a_steer_of_a_running_response_asks_it_to_stop_and_waits_queued(
    store: Store,
) -> None:
    fence = await claimed(store, "resp_t", owner="host")

    await store.add_steer(steer("steer_1"), max_waiting=4)

    [row] = await store.steers_of("resp_t")
    assert (row.id, row.state, row.successor_id) == ("steer_1", "queued", None)
    assert await store.stop_requests("host") == [("resp_t", "steer")]
    # The steer stop does not refuse a completed end: a target with nothing left to do
    # completes, and its successor still runs.
    await end(store, "resp_t", fence, "completed")
    assert await status(store, "resp_t") == "completed"


async def test_a_steer_of_an_ended_or_unknown_response_writes_nothing(store: Store) -> None:
    fence = await claimed(store, "resp_t")
    await end(store, "resp_t", fence, "completed")

    with pytest.raises(SteerNotAdded) as ended:
        await store.add_steer(steer("steer_1"), max_waiting=4)
    with pytest.raises(SteerNotAdded) as unknown:
        await store.add_steer(steer("steer_2", target="resp_nobody"), max_waiting=4)
    other_tenant = dataclasses.replace(steer("steer_3"), tenant="someone else")
    with pytest.raises(SteerNotAdded) as foreign:
        await store.add_steer(other_tenant, max_waiting=4)

    assert (ended.value.reason, ended.value.status) == ("ended", "completed")
    assert unknown.value.reason == foreign.value.reason == "not_found"
    assert await store.steers_of("resp_t") == []


async def test_steers_past_the_limit_are_refused(store: Store) -> None:
    await claimed(store, "resp_t")
    for n in range(2):
        await store.add_steer(steer(f"steer_{n}"), max_waiting=2)

    with pytest.raises(SteerNotAdded) as refused:
        await store.add_steer(steer("steer_x"), max_waiting=2)

    assert refused.value.reason == "too_many"
    assert [s.id for s in await store.steers_of("resp_t")] == ["steer_0", "steer_1"]


async def test_many_steers_at_once_keep_the_limit(store: Store) -> None:
    await claimed(store, "resp_t")

    results = await asyncio.gather(
        *(store.add_steer(steer(f"steer_{n:02}"), max_waiting=5) for n in range(20)),
        return_exceptions=True,
    )

    assert sum(r is None for r in results) == 5
    assert all(isinstance(r, SteerNotAdded) for r in results if r is not None)
    assert len(await store.steers_of("resp_t")) == 5


async def test_a_pending_steer_needs_an_ended_target_not_continued_yet(store: Store) -> None:
    fence = await claimed(store, "resp_t")
    with pytest.raises(SteerNotAdded) as running:
        await store.add_steer(steer("steer_0", state="pending"), max_waiting=4)
    await end(store, "resp_t", fence, "completed")

    await store.add_steer(steer("steer_1", state="pending"), max_waiting=4)
    continuation = dataclasses.replace(new_response("resp_next"), previous_response_id="resp_t")
    taking = Admission(steers=("steer_1",), steers_state="pending")
    await store.create_response(continuation, [], [], taking)
    with pytest.raises(SteerNotAdded) as continued:
        await store.add_steer(steer("steer_2", state="pending"), max_waiting=4)

    assert running.value.reason == "running"
    assert continued.value.reason == "continued"
    assert [(s.id, s.state) for s in await store.steers_of("resp_t")] == [("steer_1", "applied")]


async def test_a_successor_takes_its_steers_in_its_create_transaction_once(store: Store) -> None:
    fence = await claimed(store, "resp_t")
    for n in range(2):
        await store.add_steer(steer(f"steer_{n}"), max_waiting=4)
    await end(store, "resp_t", fence, "incomplete")
    taking = Admission(steers=("steer_0", "steer_1"), steers_state="queued")

    created = await asyncio.gather(
        store.create_response(new_response("resp_s1"), [], [], taking),
        store.create_response(new_response("resp_s2"), [], [], taking),
        return_exceptions=True,
    )

    stale = [r for r in created if isinstance(r, StaleSteers)]
    assert len(stale) == 1, created
    winner = "resp_s1" if not isinstance(created[0], StaleSteers) else "resp_s2"
    loser = "resp_s2" if winner == "resp_s1" else "resp_s1"
    assert [(s.state, s.successor_id) for s in await store.steers_of("resp_t")] == [
        ("applied", winner),
        ("applied", winner),
    ]
    assert await status(store, loser) is None  # the refused create wrote nothing


async def test_settling_is_all_or_nothing_and_only_once(store: Store) -> None:
    fence = await claimed(store, "resp_t")
    for n in range(2):
        await store.add_steer(steer(f"steer_{n}"), max_waiting=4)
    assert await store.unsettled_steers() == []  # still running: nothing to settle
    await end(store, "resp_t", fence, "failed")
    assert await store.unsettled_steers() == [("resp_t", "")]

    first, second = await asyncio.gather(
        store.settle_steers("resp_t", ["steer_0", "steer_1"], state="failed", error="why"),
        store.settle_steers("resp_t", ["steer_0", "steer_1"], state="pending"),
    )

    assert sorted([first, second]) == [False, True]
    states = {s.state for s in await store.steers_of("resp_t")}
    assert states in ({"failed"}, {"pending"})
    assert await store.unsettled_steers() == []


async def test_a_deleted_target_takes_its_steers_with_it(store: Store) -> None:
    fence = await claimed(store, "resp_t")
    await store.add_steer(steer("steer_1"), max_waiting=4)
    await end(store, "resp_t", fence, "incomplete")

    assert await store.delete_response("resp_t", "")
    assert await store.steers_of("resp_t") == []


async def test_an_accepted_steer_wins_over_a_stop_of_the_drivers_own(store: Store) -> None:
    """A `cancelled` end that no cancel request asked for (a foreground client gone) is
    refused while a steer waits: the steer's input is the server's to apply (G12). A
    recorded cancel still wins over the steer."""
    fence = await claimed(store, "resp_t")
    await store.add_steer(steer("steer_1"), max_waiting=4)

    with pytest.raises(StopRequested) as refused:
        await end(store, "resp_t", fence, "cancelled")
    assert refused.value.kind == "steer"
    assert await status(store, "resp_t") == "in_progress"
    assert await store.request_cancel("resp_t")
    await end(store, "resp_t", fence, "cancelled")
    assert await status(store, "resp_t") == "cancelled"


async def test_a_continuation_must_take_every_pending_steer(store: Store) -> None:
    fence = await claimed(store, "resp_t")
    await end(store, "resp_t", fence, "completed")
    await store.add_steer(steer("steer_1", state="pending"), max_waiting=4)
    continuation = dataclasses.replace(new_response("resp_next"), previous_response_id="resp_t")

    with pytest.raises(StaleSteers):
        await store.create_response(continuation, [], [])  # it left the steer behind
    assert await status(store, "resp_next") is None
    taking = Admission(steers=("steer_1",), steers_state="pending")
    await store.create_response(continuation, [], [], taking)

    [row] = await store.steers_of("resp_t")
    assert (row.state, row.successor_id) == ("applied", "resp_next")


async def test_a_pending_steer_racing_a_continuation_is_never_left_behind(store: Store) -> None:
    """Either the steer commits first and the continuation (which did not take it) is
    refused, or the continuation commits first and the steer is refused: never both."""
    for n in range(10):
        target = f"resp_t{n}"
        fence = await claimed(store, target)
        await end(store, target, fence, "completed")
        continuation = dataclasses.replace(new_response(f"resp_c{n}"), previous_response_id=target)

        added, created = await asyncio.gather(
            store.add_steer(steer(f"steer_{n}", target=target, state="pending"), max_waiting=4),
            store.create_response(continuation, [], []),
            return_exceptions=True,
        )

        if added is None:
            assert isinstance(created, StaleSteers), created
        else:
            assert isinstance(added, SteerNotAdded) and added.reason == "continued", added
            assert not isinstance(created, BaseException), created


async def test_steers_that_would_wait_for_a_continued_response_fail_instead(
    store: Store,
) -> None:
    """A turn continued the target while it still ran (it answered the target's tool calls
    then); steers settled `pending` afterwards would never be taken: they fail, and say
    why, so the socket hands their input back."""
    fence = await claimed(store, "resp_t")
    await store.add_steer(steer("steer_1"), max_waiting=4)
    continuation = dataclasses.replace(
        new_response("resp_next"), previous_response_id="resp_t", lane="resp_t"
    )
    await store.create_response(continuation, [], [])
    await end(store, "resp_t", fence, "completed")

    assert await store.settle_steers("resp_t", ["steer_1"], state="pending")

    [row] = await store.steers_of("resp_t")
    assert row.state == "failed"
    assert row.error is not None and "continued" in row.error
