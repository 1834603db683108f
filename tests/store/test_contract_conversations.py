"""The store contract on both backends (see test_contract.py): conversations,
retention, listeners and health, and two processes on one database."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time

import pytest

from store import (
    Admission,
    ConversationRecord,
    Fence,
    ItemRow,
    LeaseLost,
    ResponseRecord,
    StoreError,
)
from tests.store.conftest import Opener
from tests.store.test_contract import (
    DAY,
    Store,
    claimed,
    claimed_existing,
    end,
    in_lane,
    message,
    status,
)
from tests.store.test_sqlite import new_response, rows

# -- conversations ---------------------------------------------------------------------------


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

    def refuse_a_second_output(tool_items: list[str], waiting: list[str]) -> None:
        assert waiting == []  # no turn of the conversation is running or queued
        seen.append(tool_items)
        if any(json.loads(t)["type"] == "function_call_output" for t in tool_items):
            raise ValueError("call_1 is answered already")

    assert await store.add_conversation_items("conv_1", "", [output], check=refuse_a_second_output)
    with pytest.raises(ValueError, match="answered already"):
        await store.add_conversation_items("conv_1", "", [output], check=refuse_a_second_output)

    # (SQLite may run a refused check twice: alone again after its batch failed.)
    assert seen[0] == [call.item] and seen[-1] == [call.item, output.item]
    assert len(await store.conversation_history("conv_1", None)) == 3


async def test_the_checks_see_the_tool_items_of_turns_not_ended(store: Store) -> None:
    call = ItemRow("fc_1", json.dumps({"type": "function_call", "call_id": "call_1"}))
    output = ItemRow("fco_1", json.dumps({"type": "function_call_output", "call_id": "call_1"}))
    await store.create_conversation(ConversationRecord("conv_1", "", 0.0, "{}"), [call])
    turn = in_lane("resp_t", "conv_1", conversation_id="conv_1")
    _, _, claim = await store.create_response(turn, [message("m"), output], [], None, ("me", 30))
    queued = in_lane("resp_q", "conv_1", conversation_id="conv_1")
    await store.create_response(queued, [message("q")], [])
    seen: list[tuple[list[str], list[str]]] = []

    def keep(first: list[str], waiting: list[str]) -> None:
        seen.append((first, waiting))
        raise ValueError("kept")

    with pytest.raises(ValueError, match="kept"):
        await store.add_conversation_items("conv_1", "", [message("x")], check=keep)
    with pytest.raises(ValueError, match="kept"):
        await store.delete_conversation_item("conv_1", "fc_1", check=keep)
    assert seen[0] == ([call.item], [output.item])
    assert seen[-1] == ([call.item], [output.item])  # what would go, what waits
    assert len(await store.conversation_history("conv_1", None)) == 1

    assert claim is not None
    await end(store, "resp_t", Fence("me", claim.epoch), conversation_items=[output])
    await store.add_conversation_items("conv_1", "", [message("y")], check=keep_nothing)
    assert await store.delete_conversation_item("conv_1", "fc_1", check=keep_nothing)
    assert [json.loads(t)["id"] for t in await store.conversation_history("conv_1", None)] == ["y"]


def keep_nothing(first: list[str], waiting: list[str]) -> None:
    assert waiting == []  # the turn has ended; the queued one's input holds no tool item


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


def tool_item(item_id: str, kind: str, call_id: str) -> ItemRow:
    return ItemRow(item_id, json.dumps({"id": item_id, "type": kind, "call_id": call_id}))


async def test_the_call_ids_taken_are_those_of_the_lanes_waiting_inputs_and_new_items(
    store: Store,
) -> None:
    await store.create_conversation(
        ConversationRecord("conv_1", "", 0.0, "{}"),
        [message("m"), tool_item("c", "function_call", "call_a")],  # positions 0 and 1
    )
    await store.add_conversation_items(
        "conv_1",
        "",
        [tool_item("o", "function_call_output", "call_a")],  # position 2
    )
    running = in_lane("resp_r", "conv_1", conversation_id="conv_1")
    _, _, turn = await store.create_response(running, [message("r")], [], None, ("me", 30))
    assert turn is not None
    queued = in_lane("resp_q", "conv_1", conversation_id="conv_1")
    await store.create_response(
        queued, [tool_item("qc", "function_call", "call_q"), message("q")], [], None
    )
    chained = in_lane("resp_c", "resp_0")  # a chain's lane: no conversation
    await store.create_response(
        chained, [tool_item("x", "function_call_output", "call_x")], [], None
    )

    assert await store.taken_call_ids("conv_1", "conv_1", None) == {"call_a", "call_q"}
    assert await store.taken_call_ids("conv_1", "conv_1", 2) == {"call_a", "call_q"}
    assert await store.taken_call_ids("conv_1", "conv_1", 3) == {"call_q"}
    assert await store.taken_call_ids("resp_0", None, None) == {"call_x"}
    assert await store.taken_call_ids("conv_none", "conv_none", None) == set()

    await end(store, "resp_r", Fence("me", turn.epoch), conversation_items=[message("r")])
    assert await store.taken_call_ids("conv_1", "conv_1", 3) == {"call_q"}  # still queued


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

    await end(store, "resp_q", Fence("me", turn.epoch), conversation_items=[message("out")])
    history = await store.conversation_history("conv_1", None)
    assert [json.loads(t)["id"] for t in history] == ["b", "c", "out"]


async def test_a_foreground_turn_records_where_its_history_ends(store: Store) -> None:
    await store.create_conversation(ConversationRecord("conv_1", "", 0.0, "{}"), [message("a")])
    new = dataclasses.replace(
        new_response("resp_f", owner="me"), lane="conv_1", conversation_id="conv_1"
    )
    await store.create_response(new, [], [])

    await end(store, "resp_f", Fence("me", 1), conversation_items=[message("out")])

    record = await store.get_response("resp_f", "")
    assert record.conversation_upto == 1


async def test_a_foreground_turn_fixes_its_history_end_when_it_reads_it(store: Store) -> None:
    await store.create_conversation(ConversationRecord("conv_1", "", 0.0, "{}"), [message("a")])
    new = dataclasses.replace(
        new_response("resp_f", owner="me"), lane="conv_1", conversation_id="conv_1"
    )
    await store.create_response(new, [], [])
    with pytest.raises(LeaseLost):
        await store.fix_conversation_upto("resp_f", Fence("another", 1))

    assert await store.fix_conversation_upto("resp_f", Fence("me", 1)) == 1
    await store.add_conversation_items("conv_1", "", [message("b")])
    assert await store.fix_conversation_upto("resp_f", Fence("me", 1)) == 1  # fixed once
    # "a" is skipped: held already
    await end(store, "resp_f", Fence("me", 1), conversation_items=[message("a"), message("out")])
    record = await store.get_response("resp_f", "")
    assert record is not None and record.conversation_upto == 1
    history = await store.conversation_history("conv_1", None)
    assert [json.loads(t)["id"] for t in history] == ["a", "b", "out"]

    fence = await claimed(store, "resp_x")  # no conversation: nothing to fix
    assert await store.fix_conversation_upto("resp_x", fence) is None


# -- items by id (item_reference) ---------------------------------------------------------------


async def test_items_are_found_by_id_among_a_tenants_inputs_outputs_and_conversations(
    store: Store,
) -> None:
    """find_items reads a response's input items, a finished response's output items (in
    its snapshot) and a conversation's items; never another tenant's, nor the output of a
    response still running, nor the input of a `store: false` one."""
    fence = await claimed(store, "resp_1")
    await store.append_events("resp_1", fence, rows(0))
    output = [{"id": "msg_out", "type": "message", "role": "assistant", "content": []}]
    snapshot = json.dumps({"status": "completed", "output": output})
    await store.save_snapshot(
        "resp_1", fence, snapshot=snapshot, last_seq=0, status="completed", terminal=True
    )
    await store.create_response(new_response("resp_2"), [message("msg_in")], [])
    running = await claimed(store, "resp_3")
    await store.save_snapshot(
        "resp_3",
        running,
        snapshot=json.dumps({"output": [{"id": "msg_running"}]}),
        last_seq=-1,
        status="in_progress",
    )
    await store.create_conversation(ConversationRecord("conv_1", "", 1.0, "{}"), [message("m1")])
    other = dataclasses.replace(new_response("resp_x"), tenant="another tenant")
    await store.create_response(other, [message("msg_theirs")], [])
    unstored = dataclasses.replace(new_response("resp_u"), params='{"store":false}')
    await store.create_response(unstored, [message("msg_unstored")], [])

    ids = ["msg_out", "msg_in", "m1", "msg_theirs", "msg_running", "msg_unstored", "nope"]
    found = {k: json.loads(v) for k, v in (await store.find_items("", ids)).items()}

    assert found == {
        "msg_out": output[0],
        "msg_in": {"id": "msg_in", "type": "message"},
        "m1": {"id": "m1", "type": "message"},
    }
    assert await store.find_items("", []) == {}
    assert list(await store.find_items("another tenant", ids)) == ["msg_theirs"]
    await store.delete_response("resp_1", "")
    assert await store.find_items("", ["msg_out"]) == {}
    odd = await claimed(store, "resp_4")  # an output that is no list has no items to find
    await store.save_snapshot(
        "resp_4", odd, snapshot='{"output":null}', last_seq=-1, status="failed", terminal=True
    )
    assert await status(store, "resp_4") == "failed"


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
