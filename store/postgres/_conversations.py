"""The conversations API's storage. Items are appended under the conversation's row lock
(their positions are max + 1)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from .._records import ConversationRecord, ItemRow
from ._base import Order, PostgresBase
from ._database import Tx
from ._sql import CONVERSATION_COLUMNS, conversation

_TOOL_TYPES = ("function_call", "function_call_output")


def _maybe_tool_item(column: str) -> str:
    """SQL: the item JSON in `column` may be a function call or its output. A cheap
    filter; the JSON is read in Python, because PostgreSQL's json functions refuse a NUL
    character (\\u0000) that a user's item may hold anywhere."""
    return f"strpos({column}, '\"function_call') > 0"


_MAYBE_TOOL_ITEM = _maybe_tool_item("item")
# The tool items of the inputs of a conversation's turns that have not ended: each is
# added to the conversation when its turn ends, after what the client adds meanwhile.
_WAITING_TOOL_ITEMS = (
    "SELECT i.item FROM responses AS r JOIN response_items AS i ON i.response_id = r.id"
    " WHERE r.lane = $1 AND r.conversation_id = $1 AND r.status IN ('queued', 'in_progress')"
    f" AND {_maybe_tool_item('i.item')} ORDER BY r.ord, i.position"
)


def _call_id(text: str) -> str | None:
    """The call id of a function call or its output, None for any other item."""
    item = json.loads(text)
    if item.get("type") in _TOOL_TYPES:
        call_id = item.get("call_id")
        return call_id if isinstance(call_id, str) else None
    return None


class ConversationStore(PostgresBase):
    async def create_conversation(
        self, conversation: ConversationRecord, items: Sequence[ItemRow]
    ) -> None:
        async def op(tx: Tx) -> None:
            await tx.conn.execute(
                "INSERT INTO conversations (id, tenant, created_at, metadata)"
                " VALUES ($1, $2, $3, $4)",
                conversation.id,
                conversation.tenant,
                conversation.created_at,
                conversation.metadata,
            )
            if items:
                await self._insert_conversation_items(tx.conn, conversation.id, items)

        await self._write("create conversation", op)

    async def get_conversation(
        self, conversation_id: str, tenant: str
    ) -> ConversationRecord | None:
        row = await self._db.fetchrow(
            "read conversation",
            f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE id = $1 AND tenant = $2",
            conversation_id,
            tenant,
        )
        return conversation(row) if row else None

    async def update_conversation(
        self, conversation_id: str, tenant: str, metadata: str
    ) -> ConversationRecord | None:
        async def op(tx: Tx) -> ConversationRecord | None:
            row = await tx.conn.fetchrow(
                "UPDATE conversations SET metadata = $1 WHERE id = $2 AND tenant = $3"
                f" RETURNING {CONVERSATION_COLUMNS}",
                metadata,
                conversation_id,
                tenant,
            )
            return conversation(row) if row else None

        return await self._write("update conversation", op, atomic=False)

    async def delete_conversation(self, conversation_id: str, tenant: str) -> bool:
        async def op(tx: Tx) -> bool:
            status = await tx.conn.execute(
                "DELETE FROM conversations WHERE id = $1 AND tenant = $2", conversation_id, tenant
            )
            return status == "DELETE 1"

        return await self._write("delete conversation", op, atomic=False)

    async def add_conversation_items(
        self,
        conversation_id: str,
        tenant: str,
        items: Sequence[ItemRow],
        *,
        check: Callable[[list[str], list[str]], None] | None = None,
    ) -> bool:
        """Append items; False if the conversation does not exist.

        `check`, if given, is called in the append's transaction with the conversation's
        tool items (the JSON texts of its `function_call` and `function_call_output`
        items, oldest first) and those of the inputs of its turns that have not ended
        (in lane order: they join the conversation after these items, as their turns
        end); what it raises refuses the append and reaches the caller. So two appends
        cannot both pass a check against the history that the other one changes (two
        outputs for one call, G5): the conversation's row is locked before the items are
        read, as a turn's end locks it before it adds its items. It runs on the event
        loop: it must be quick, and must not touch the store."""

        async def op(tx: Tx) -> bool:
            found = await tx.conn.fetchval(
                "SELECT 1 FROM conversations WHERE id = $1 AND tenant = $2 FOR NO KEY UPDATE",
                conversation_id,
                tenant,
            )
            if found is None:
                return False
            if check is not None:
                stored = await self._tool_items(tx, conversation_id)
                check(stored, await _waiting(tx, conversation_id))
            await self._insert_conversation_items(tx.conn, conversation_id, items)
            return True

        return await self._write("add conversation items", op)

    async def _tool_items(self, tx: Tx, conversation_id: str) -> list[str]:
        rows = await tx.conn.fetch(
            "SELECT item FROM conversation_items WHERE conversation_id = $1"
            f" AND {_MAYBE_TOOL_ITEM} ORDER BY position",
            conversation_id,
        )
        return [r[0] for r in rows if json.loads(r[0]).get("type") in _TOOL_TYPES]

    async def list_conversation_items(
        self, conversation_id: str, *, after: str | None, order: Order, limit: int
    ) -> tuple[list[ItemRow], bool] | None:
        return await self._page(
            "conversation_items",
            "conversation_id",
            conversation_id,
            after=after,
            order=order,
            limit=limit,
        )

    async def get_conversation_item(self, conversation_id: str, item_id: str) -> ItemRow | None:
        row = await self._db.fetchrow(
            "read conversation item",
            "SELECT item_id, item FROM conversation_items"
            " WHERE conversation_id = $1 AND item_id = $2",
            conversation_id,
            item_id,
        )
        return ItemRow(row[0], row[1]) if row else None

    async def delete_conversation_item(
        self,
        conversation_id: str,
        item_id: str,
        *,
        check: Callable[[list[str], list[str]], None] | None = None,
    ) -> bool:
        """Delete an item; False if there is no such item. A `function_call` goes with
        its `function_call_output` and the other way round: a conversation never holds
        half of a pair, which every later history would carry to the model (G5).
        `check`, if given, is called in the transaction with the JSON texts of the items
        about to go and the tool items of the inputs of the conversation's turns that
        have not ended (as for `add_conversation_items`, under the conversation's row
        lock); what it raises keeps them."""

        async def op(tx: Tx) -> bool:
            conn = tx.conn
            if check is not None:  # a turn's end adds its items under this lock
                await conn.execute(
                    "SELECT 1 FROM conversations WHERE id = $1 FOR NO KEY UPDATE",
                    conversation_id,
                )
            row = await conn.fetchrow(
                "SELECT item FROM conversation_items WHERE conversation_id = $1"
                " AND item_id = $2 FOR UPDATE",
                conversation_id,
                item_id,
            )
            if row is None:
                return False
            doomed = [(item_id, row[0])]
            call_id = _call_id(row[0])
            if call_id is not None:
                pairs = await conn.fetch(
                    "SELECT item_id, item FROM conversation_items WHERE conversation_id = $1"
                    f" AND {_MAYBE_TOOL_ITEM} FOR UPDATE",
                    conversation_id,
                )
                doomed += [
                    (r[0], r[1]) for r in pairs if r[0] != item_id and _call_id(r[1]) == call_id
                ]
            if check is not None:
                check([text for _, text in doomed], await _waiting(tx, conversation_id))
            await conn.execute(
                "DELETE FROM conversation_items WHERE conversation_id = $1"
                " AND item_id = ANY($2::text[])",
                conversation_id,
                [doomed_id for doomed_id, _ in doomed],
            )
            return True

        return await self._write("delete conversation item", op)

    async def conversation_history(self, conversation_id: str, upto: int | None) -> list[str]:
        """Item JSON texts of a conversation, oldest first; with `upto`, only the items
        that were in it when a turn started (position < upto: a position, not a count,
        since deleted items leave gaps)."""
        rows = await self._db.fetch(
            "read conversation history",
            "SELECT item FROM conversation_items WHERE conversation_id = $1 AND position < $2"
            " ORDER BY position",
            conversation_id,
            upto if upto is not None else 2**31 - 1,
        )
        return [r[0] for r in rows]

    async def taken_call_ids(
        self, lane: str, conversation_id: str | None, upto: int | None
    ) -> set[str]:
        rows = await self._db.fetch(
            "read the call ids a new call may not take",
            "SELECT i.item FROM responses AS r JOIN response_items AS i ON i.response_id = r.id"
            " WHERE r.lane = $1 AND r.status IN ('queued', 'in_progress')"
            f" AND {_maybe_tool_item('i.item')}"
            " UNION ALL SELECT item FROM conversation_items"
            f" WHERE conversation_id = $2 AND position >= $3 AND {_MAYBE_TOOL_ITEM}",
            lane,
            conversation_id,
            upto or 0,
        )
        return {call_id for r in rows if (call_id := _call_id(r[0])) is not None}


async def _waiting(tx: Tx, conversation_id: str) -> list[str]:
    rows = await tx.conn.fetch(_WAITING_TOOL_ITEMS, conversation_id)
    return [r[0] for r in rows if json.loads(r[0]).get("type") in _TOOL_TYPES]
