"""The conversations API's storage."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .._contract import Order
from .._records import ConversationRecord, ItemRow
from ._base import UNFINISHED, StoreBase, _conversation, _fetchone
from ._connection import Tx


def _is_tool_item(column: str) -> str:
    """SQL: the item JSON in `column` is a function call or its output."""
    return f"json_extract({column}, '$.type') IN ('function_call', 'function_call_output')"


_TOOL_ITEM = _is_tool_item("item")
_CALL_ID = "json_extract(item, '$.call_id')"
# The tool items of the inputs of a conversation's turns that have not ended: each is
# added to the conversation when its turn ends, after what the client adds meanwhile.
_WAITING_TOOL_ITEMS = (
    "SELECT i.item FROM responses r JOIN response_items i ON i.response_id = r.id"
    f" WHERE r.lane = ?1 AND r.conversation_id = ?1 AND {UNFINISHED}"
    f" AND {_is_tool_item('i.item')} ORDER BY r.rowid, i.position"
)


class ConversationStore(StoreBase):
    async def create_conversation(
        self, conversation: ConversationRecord, items: Sequence[ItemRow]
    ) -> None:
        def op(tx: Tx) -> None:
            tx.conn.execute(
                "INSERT INTO conversations (id, tenant, created_at, metadata) VALUES (?, ?, ?, ?)",
                (
                    conversation.id,
                    conversation.tenant,
                    conversation.created_at,
                    conversation.metadata,
                ),
            )
            self._insert_conversation_items(tx, conversation.id, items)

        await self._write("create conversation", op)

    async def get_conversation(
        self, conversation_id: str, tenant: str
    ) -> ConversationRecord | None:
        row = await self._readers.fetchone(
            "SELECT id, tenant, created_at, metadata FROM conversations"
            " WHERE id = ? AND tenant = ?",
            (conversation_id, tenant),
        )
        return _conversation(row) if row else None

    async def update_conversation(
        self, conversation_id: str, tenant: str, metadata: str
    ) -> ConversationRecord | None:
        def op(tx: Tx) -> ConversationRecord | None:
            row = _fetchone(
                tx.conn,
                "UPDATE conversations SET metadata = ? WHERE id = ? AND tenant = ?"
                " RETURNING id, tenant, created_at, metadata",
                (metadata, conversation_id, tenant),
            )
            return _conversation(row) if row else None

        return await self._write("update conversation", op)

    async def delete_conversation(self, conversation_id: str, tenant: str) -> bool:
        def op(tx: Tx) -> bool:
            cur = tx.conn.execute(
                "DELETE FROM conversations WHERE id = ? AND tenant = ?", (conversation_id, tenant)
            )
            return cur.rowcount == 1

        return await self._write("delete conversation", op)

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
        outputs for one call, G5). It runs on the writer's thread: it must be quick, and
        must not touch the store."""

        def op(tx: Tx) -> bool:
            row = _fetchone(
                tx.conn,
                "SELECT 1 FROM conversations WHERE id = ? AND tenant = ?",
                (conversation_id, tenant),
            )
            if row is None:
                return False
            if check is not None:
                check(self._tool_items(tx, conversation_id), _waiting(tx, conversation_id))
            self._insert_conversation_items(tx, conversation_id, items)
            return True

        return await self._write("add conversation items", op)

    def _tool_items(self, tx: Tx, conversation_id: str) -> list[str]:
        rows = tx.conn.execute(
            f"SELECT item FROM conversation_items WHERE conversation_id = ? AND {_TOOL_ITEM}"
            " ORDER BY position",
            (conversation_id,),
        ).fetchall()
        return [r[0] for r in rows]

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
        row = await self._readers.fetchone(
            "SELECT item_id, item FROM conversation_items"
            " WHERE conversation_id = ? AND item_id = ?",
            (conversation_id, item_id),
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
        have not ended (as for `add_conversation_items`); what it raises keeps them."""
        pair = (
            f"item_id = ?2 OR ({_TOOL_ITEM} AND {_CALL_ID} = (SELECT {_CALL_ID}"
            f" FROM conversation_items WHERE conversation_id = ?1 AND item_id = ?2"
            f" AND {_TOOL_ITEM}))"
        )

        def op(tx: Tx) -> bool:
            if check is not None:
                doomed = tx.conn.execute(
                    f"SELECT item FROM conversation_items WHERE conversation_id = ?1 AND ({pair})",
                    (conversation_id, item_id),
                ).fetchall()
                if doomed:
                    check([r[0] for r in doomed], _waiting(tx, conversation_id))
            cur = tx.conn.execute(
                f"DELETE FROM conversation_items WHERE conversation_id = ?1 AND ({pair})",
                (conversation_id, item_id),
            )
            return cur.rowcount >= 1

        return await self._write("delete conversation item", op)

    async def conversation_history(self, conversation_id: str, upto: int | None) -> list[str]:
        """Item JSON texts of a conversation, oldest first; with `upto`, only the items
        that were in it when a turn started (position < upto: a position, not a count,
        since deleted items leave gaps)."""
        rows = await self._readers.fetchall(
            "SELECT item FROM conversation_items WHERE conversation_id = ? AND position < ?"
            " ORDER BY position",
            (conversation_id, upto if upto is not None else 2**62),
        )
        return [r[0] for r in rows]

    async def taken_call_ids(
        self, lane: str, conversation_id: str | None, upto: int | None
    ) -> set[str]:
        rows = await self._readers.fetchall(
            "SELECT json_extract(i.item, '$.call_id') FROM responses r"
            f" JOIN response_items i ON i.response_id = r.id WHERE r.lane = ? AND {UNFINISHED}"
            f" AND {_is_tool_item('i.item')}",
            (lane,),
        )
        if conversation_id is not None:
            rows += await self._readers.fetchall(
                f"SELECT {_CALL_ID} FROM conversation_items"
                f" WHERE conversation_id = ? AND position >= ? AND {_TOOL_ITEM}",
                (conversation_id, upto or 0),
            )
        return {r[0] for r in rows if isinstance(r[0], str)}


def _waiting(tx: Tx, conversation_id: str) -> list[str]:
    return [r[0] for r in tx.conn.execute(_WAITING_TOOL_ITEMS, (conversation_id,)).fetchall()]
