"""Issue 21, in the store: what a later history is rebuilt from survives deletions.

- The claim records the end of a conversation turn's history as a position (items are
  numbered max + 1), not as a count, which a deleted item made too small.
- Deleting one half of a call/output pair of a conversation deletes both.
- The retention purge spares every response that the previous_response_id chain of a
  queued or running response reaches, and purges it once that chain has finished.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from store import ConversationRecord, Fence, ItemRow, SQLiteStore, open_store
from tests.store.test_sqlite import new_response

DAY = 86400.0


def item(item_id: str, **fields: str) -> ItemRow:
    return ItemRow(item_id, json.dumps({"id": item_id, **fields}))


async def conversation(store: SQLiteStore, *items: ItemRow) -> str:
    record = ConversationRecord(id="conv_1", tenant="", created_at=time.time(), metadata="{}")
    await store.create_conversation(record, items)
    return record.id


async def finish(store: SQLiteStore, response_id: str) -> None:
    await store.save_snapshot(
        response_id, Fence("me", 1), snapshot="{}", last_seq=-1, status="completed", terminal=True
    )


async def test_the_claim_ends_a_history_at_a_position_after_a_deletion(tmp_path: Path) -> None:
    async with open_store(tmp_path / "r.db") as store:
        conv = await conversation(store, item("a", type="message"), item("b", type="message"))
        await store.add_conversation_items(conv, "", [item("c", type="message")])
        assert await store.delete_conversation_item(conv, "a")
        queued = dataclasses.replace(new_response("resp_q"), conversation_id=conv)
        await store.create_response(queued, [], [])

        claimed = await store.claim("resp_q", "me", 10.0)

        assert claimed is not None and claimed.conversation_upto == 3
        history = await store.conversation_history(conv, claimed.conversation_upto)
        assert [json.loads(text)["id"] for text in history] == ["b", "c"]
        await store.add_conversation_items(conv, "", [item("d", type="message")])
        assert len(await store.conversation_history(conv, claimed.conversation_upto)) == 2


async def test_deleting_either_half_of_a_pair_deletes_both(tmp_path: Path) -> None:
    async with open_store(tmp_path / "r.db") as store:
        conv = await conversation(
            store,
            item("fc_1", type="function_call", call_id="call_1"),
            item("fco_1", type="function_call_output", call_id="call_1"),
            item("fc_2", type="function_call", call_id="call_2"),
            item("fco_2", type="function_call_output", call_id="call_2"),
            item("msg", type="message", call_id="call_1"),  # not a tool item: stays
        )

        assert await store.delete_conversation_item(conv, "fco_1")
        assert await store.delete_conversation_item(conv, "fc_2")
        assert not await store.delete_conversation_item(conv, "fc_1")  # already gone

        left = await store.conversation_history(conv, None)
        assert [json.loads(text)["id"] for text in left] == ["msg"]


async def test_the_purge_spares_what_a_live_chain_needs(tmp_path: Path) -> None:
    async with open_store(tmp_path / "r.db") as store:
        # resp_0 <- resp_1 <- resp_live (running); resp_0 <- resp_fork (finished);
        # resp_other finished, on a chain of its own.
        for response_id, previous in [
            ("resp_0", None),
            ("resp_1", "resp_0"),
            ("resp_fork", "resp_0"),
            ("resp_other", None),
            ("resp_live", "resp_1"),
        ]:
            new = dataclasses.replace(
                new_response(response_id, owner="me"), previous_response_id=previous
            )
            await store.create_response(new, [], [])
            if response_id != "resp_live":
                await finish(store, response_id)
        later = time.time() + 31 * DAY

        assert await store.purge(before=later) == (2, 0)

        kept = [r for r in ("resp_0", "resp_1", "resp_live") if await store.get_response(r, "")]
        assert kept == ["resp_0", "resp_1", "resp_live"]
        assert await store.get_response("resp_fork", "") is None
        assert await store.get_response("resp_other", "") is None

        await finish(store, "resp_live")
        assert await store.purge(before=later) == (3, 0)  # the chain has finished
