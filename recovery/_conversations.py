"""The conversations API: conversations and their items, kept tool-consistent (G5).

The server's conversation routes use this, never the store: it builds the stored rows
(normalized items, compact JSON), checks tool pairing with `check_tool_pairing`, and says
`NotFound` with the API's messages. Items appended to an existing conversation are checked
against its stored items in the append's own transaction, so two concurrent appends (two
outputs for one call) cannot both pass a check against a history the other one changes.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Literal

from store import Conflict, ConversationRecord, ItemRow

from ._compaction import check_no_split_call
from ._errors import InvalidRequest, LaneLocked, NotFound
from ._history import check_tool_pairing, check_unpublished, drop_orphaned_outputs, loads_all
from ._ids import new_id
from ._items import normalize_item
from ._json import dumps
from ._references import check_new_ids, duplicate_item, resolve_references

if TYPE_CHECKING:
    from ._runtime import Runtime

Item = dict[str, Any]


class Conversations:
    """The conversations of a runtime's store. Items passed in are validated client items
    (`items` of the request: `param` of a pairing error)."""

    def __init__(self, runtime: Runtime) -> None:
        self._store = runtime.store

    async def create(
        self, tenant: str, metadata: dict[str, str], items: list[Item]
    ) -> ConversationRecord:
        """A new conversation holding `items`. Its items are checked as those of any
        conversation: an output must answer an earlier call, once; a call may wait for
        its output (the client may send it later, in a turn's input)."""
        record = ConversationRecord(
            id=new_id("conv"), tenant=tenant, created_at=time.time(), metadata=dumps(metadata)
        )
        items = await resolve_references(self._store, items, tenant=tenant, param="items")
        rows = _rows(items)
        check_tool_pairing([], items, allow_pending=True, param="items")
        await self._store.create_conversation(record, rows)
        return record

    async def get(self, conversation_id: str, tenant: str) -> ConversationRecord:
        record = await self._store.get_conversation(conversation_id, tenant)
        if record is None:
            raise _not_found(conversation_id)
        return record

    async def update(
        self, conversation_id: str, tenant: str, metadata: dict[str, str]
    ) -> ConversationRecord:
        record = await self._store.update_conversation(conversation_id, tenant, dumps(metadata))
        if record is None:
            raise _not_found(conversation_id)
        return record

    async def delete(self, conversation_id: str, tenant: str) -> None:
        if not await self._store.delete_conversation(conversation_id, tenant):
            raise _not_found(conversation_id)

    async def add_items(
        self, conversation_id: str, tenant: str, items: list[Item]
    ) -> list[ItemRow]:
        """Append `items`; the rows appended. NotFound without such a conversation;
        InvalidRequest, naming the call, if an output answers no call of the conversation
        or one already answered, by its items or by the input of a turn that has not
        ended (it joins the conversation when it ends, after these items), or if a
        compaction item would come between a call and its output (checked in the
        append's transaction, see above)."""

        def check(stored: list[str], waiting: list[str]) -> None:
            history, _ = drop_orphaned_outputs(loads_all(stored))
            # An item a waiting turn carries that is added here stays where it is added:
            # the turn leaves it out when it ends.
            added = {item.get("id") for item in items}
            ahead = [item for item in loads_all(waiting) if item.get("id") not in added]
            check_tool_pairing([*history, *ahead], items, allow_pending=True, param="items")
            check_no_split_call([*history, *items, *ahead], param="items")

        items = await resolve_references(self._store, items, tenant=tenant, param="items")
        await check_unpublished(self._store, conversation_id, tenant, items)
        rows = _rows(items)
        try:
            added = await self._store.add_conversation_items(
                conversation_id, tenant, rows, check=check
            )
        except Conflict:  # an item id the conversation holds: its unique index refused it
            raise await self._duplicate(conversation_id, rows) from None
        if not added:
            raise _not_found(conversation_id)
        return rows

    async def _duplicate(self, conversation_id: str, rows: list[ItemRow]) -> InvalidRequest:
        """The refusal of an append whose items the conversation already holds, naming
        the first of them."""
        for index, row in enumerate(rows):
            if await self._store.get_conversation_item(conversation_id, row.item_id):
                return duplicate_item(row.item_id, f"items[{index}].id")
        return duplicate_item(None, "items")

    async def list_items(
        self,
        conversation: ConversationRecord,
        *,
        after: str | None,
        order: Literal["asc", "desc"],
        limit: int,
    ) -> tuple[list[ItemRow], bool] | None:
        """A page of a conversation's items; None if `after` names none of them."""
        return await self._store.list_conversation_items(
            conversation.id, after=after, order=order, limit=limit
        )

    async def get_item(self, conversation: ConversationRecord, item_id: str) -> ItemRow:
        row = await self._store.get_conversation_item(conversation.id, item_id)
        if row is None:
            raise _item_not_found(item_id)
        return row

    async def delete_item(self, conversation: ConversationRecord, item_id: str) -> None:
        """Delete an item, and the other half of its tool call pair if it has one.
        LaneLocked for a call whose output is the input of a turn that has not ended: that
        output would join the conversation without its call when the turn ends (G5)."""

        def check(doomed: list[str], waiting: list[str]) -> None:
            calls = {i["call_id"] for i in loads_all(doomed) if i.get("type") == "function_call"}
            for item in loads_all(waiting):
                if item.get("type") == "function_call_output" and item["call_id"] in calls:
                    raise LaneLocked(
                        f"Function call '{item['call_id']}' is answered by the input of a"
                        " turn of this conversation that has not ended yet; delete it once"
                        " that turn has ended.",
                        param="item_id",
                    )

        if not await self._store.delete_conversation_item(conversation.id, item_id, check=check):
            raise _item_not_found(item_id)


def _rows(items: list[Item]) -> list[ItemRow]:
    """The stored rows of `items`; InvalidRequest `duplicate_item` if two share an id."""
    normalized = [normalize_item(item) for item in items]
    check_new_ids([], normalized, param="items")
    return [ItemRow(item["id"], dumps(item)) for item in normalized]


def _not_found(conversation_id: str) -> NotFound:
    return NotFound(f"Conversation with id '{conversation_id}' not found.")


def _item_not_found(item_id: str) -> NotFound:
    return NotFound(f"Item with id '{item_id}' not found.")
