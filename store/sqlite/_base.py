"""What every part of the SQLite store shares: the connections, the column lists, row
mappers, and the guarded-write helpers."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .._contract import CommitListener, Order, SignalListener
from .._errors import Conflict, LeaseLost
from .._records import (
    ConversationRecord,
    EventRow,
    Fence,
    ItemRow,
    JournalEntry,
    ResponseRecord,
    response_record,
)
from ._connection import Readers, Tx, Writer
from ._errors import translate_sqlite_errors
from ._health import FileWatch

T = TypeVar("T")
_TERMINAL_SQL = "('completed', 'failed', 'cancelled', 'incomplete')"

_RESPONSE_COLUMNS = (
    "id, tenant, status, background, created_at, params, snapshot, last_seq, lane, "
    "conversation_id, conversation_upto, previous_response_id, owner, epoch, "
    "lease_expires_at, cancel_requested, recoveries, step, steer"
)
_JOURNAL_COLUMNS = "call_id, tool, arguments, idempotency_key, state, output, attempts"


# Unfinished, spelled exactly as the partial indexes of migration 4 declare it: SQLite
# uses those indexes only for a query that repeats the condition (or one OR term of it).
UNFINISHED = "(status = 'queued' OR status = 'in_progress')"

# A response may start only when no earlier unfinished response shares its lane (G10).
_LANE_HEAD = (
    " AND NOT EXISTS (SELECT 1 FROM responses AS earlier WHERE earlier.lane = responses.lane"
    " AND earlier.rowid < responses.rowid"
    " AND (earlier.status = 'queued' OR earlier.status = 'in_progress'))"
)


def _response(row: sqlite3.Row) -> ResponseRecord:
    return response_record(row)


def _entry(row: sqlite3.Row) -> JournalEntry:
    return JournalEntry(
        call_id=row["call_id"],
        tool=row["tool"],
        arguments=row["arguments"],
        idempotency_key=row["idempotency_key"],
        state=row["state"],
        output=row["output"],
        attempts=row["attempts"],
    )


def _conversation(row: sqlite3.Row) -> ConversationRecord:
    return ConversationRecord(
        id=row["id"], tenant=row["tenant"], created_at=row["created_at"], metadata=row["metadata"]
    )


class StoreBase:
    """Connections, listeners and helpers; the operations live in the subclasses."""

    def __init__(self, path: Path, writer: Writer, readers: Readers, watch: FileWatch) -> None:
        self.path = path
        self._writer = writer
        self._readers = readers
        self._watch = watch
        self._listeners: list[CommitListener] = []

    def on_events_committed(self, listener: CommitListener) -> None:
        self._listeners.append(listener)

    def on_signal(self, listener: SignalListener) -> None:
        """Other processes' signals: SQLite cannot tell, so the runtime's polls hear them."""

    def on_commit(self, listener: Callable[[float, int], None]) -> None:
        """Call `listener(seconds, operations)` after every group commit."""
        self._writer.commit_listeners.append(listener)

    def _notify_after(self, tx: Tx, response_id: str, events: Sequence[EventRow]) -> None:
        if events and self._listeners:

            def notify() -> None:
                for listener in self._listeners:
                    listener(response_id, events)

            tx.after_commit(notify)

    # -- helpers ----------------------------------------------------------------------

    async def _write(self, what: str, op: Callable[[Tx], T], *, urgent: bool = False) -> T:
        def guarded(tx: Tx) -> T:
            with translate_sqlite_errors(what):
                return op(tx)

        return await self._writer.run(guarded, urgent=urgent)

    def _check_fence(self, tx: Tx, response_id: str, fence: Fence) -> None:
        self._fenced(tx, response_id, fence, "1")

    def _check_live_fence(self, tx: Tx, response_id: str, fence: Fence) -> None:
        """`_check_fence`, and the lease not expired: a tool body starts only under a lease
        no other process may take yet (a host that stalled past it must not start one)."""
        expires = self._fenced(tx, response_id, fence, "lease_expires_at")[0]
        if expires is not None and expires <= time.time():
            raise LeaseLost(f"the lease of {fence} on response {response_id} has expired")

    def _fenced(self, tx: Tx, response_id: str, fence: Fence, select: str) -> sqlite3.Row:
        """`SELECT select` from the response if `fence` still holds it; else LeaseLost."""
        row = _fetchone(
            tx.conn,
            f"SELECT {select} FROM responses WHERE id = ? AND owner = ? AND epoch = ?"
            f" AND status NOT IN {_TERMINAL_SQL}",
            (response_id, fence.owner, fence.epoch),
        )
        if row is None:
            raise LeaseLost(f"response {response_id} is no longer held by {fence}")
        return row

    def _last_logged(self, tx: Tx, response_id: str) -> int:
        row = _fetchone(
            tx.conn, "SELECT max(seq) FROM events WHERE response_id = ?", (response_id,)
        )
        return -1 if row is None or row[0] is None else int(row[0])

    def _fenced_log_end(self, tx: Tx, response_id: str, fence: Fence) -> int:
        """The fence check and the log's last event, in one statement."""
        last = "coalesce((SELECT max(seq) FROM events WHERE response_id = responses.id), -1)"
        return int(self._fenced(tx, response_id, fence, last)[0])

    def _check_log_ends_at(
        self, tx: Tx, response_id: str, seq: int, appended: Sequence[EventRow]
    ) -> None:
        # Rows just appended follow the log's last event, so the log ends with them.
        last = appended[-1].seq if appended else self._last_logged(tx, response_id)
        if last != seq:
            raise Conflict(f"response {response_id}: the log ends at event {last}, not {seq}")

    def _insert_events(
        self,
        tx: Tx,
        response_id: str,
        events: Sequence[EventRow],
        last: int | None = None,
    ) -> None:
        """Append to the response's log, which must stay gapless (G7): writes queued
        behind one another commit in order, and if an earlier one failed, a later one
        that does not follow the log's last event (`last`, read here if not given)
        fails too."""
        if not events:
            return
        if last is None:
            last = self._last_logged(tx, response_id)
        if events[0].seq != last + 1:
            raise Conflict(
                f"response {response_id}: event {events[0].seq} does not follow event {last}"
            )
        with translate_sqlite_errors("append events"):
            tx.conn.executemany(
                "INSERT INTO events (response_id, seq, type, data) VALUES (?, ?, ?, ?)",
                [(response_id, e.seq, e.type, e.data) for e in events],
            )
        self._notify_after(tx, response_id, events)

    def _insert_conversation_items(
        self, tx: Tx, conversation_id: str, items: Sequence[ItemRow]
    ) -> int:
        """Append `items`; return the position of the first."""
        row = _fetchone(
            tx.conn,
            "SELECT coalesce(max(position) + 1, 0) FROM conversation_items"
            " WHERE conversation_id = ?",
            (conversation_id,),
        )
        start = int(row[0]) if row else 0
        tx.conn.executemany(
            "INSERT INTO conversation_items (conversation_id, position, item_id, item)"
            " VALUES (?, ?, ?, ?)",
            [(conversation_id, start + i, it.item_id, it.item) for i, it in enumerate(items)],
        )
        return start

    def _append_conversation_items(
        self, tx: Tx, response_id: str, items: Sequence[ItemRow]
    ) -> None:
        """Add a finished turn's items to its conversation, if it still exists, except those
        the conversation holds already: a client may have added one of its input items
        (`POST /v1/conversations/{id}/items`) while it ran. The item stays where the
        client put it; a turn's end is never refused for it (it could never be saved)."""
        row = _fetchone(
            tx.conn,
            "SELECT c.id FROM responses r JOIN conversations c ON c.id = r.conversation_id"
            " WHERE r.id = ?",
            (response_id,),
        )
        if row is not None:
            held = dict(
                tx.conn.execute(
                    "SELECT item_id, position FROM conversation_items WHERE conversation_id = ?"
                    " AND item_id IN (SELECT value FROM json_each(?))",
                    (row[0], json.dumps([item.item_id for item in items])),
                ).fetchall()
            )
            items = [item for item in items if item.item_id not in held]
            start = self._insert_conversation_items(tx, row[0], items)
            # A turn never claimed through the scan (a foreground one) records here where
            # its history ended, so a chain continuing from it does not read its own
            # items twice (once from the conversation, once as its input and output):
            # before its first item, or one of them the client added while it ran.
            tx.conn.execute(
                "UPDATE responses SET conversation_upto = ?"
                " WHERE id = ? AND conversation_upto IS NULL",
                (min([start, *held.values()]), response_id),
            )

    async def _page(
        self,
        table: str,
        owner_column: str,
        owner_id: str,
        *,
        after: str | None,
        order: Order,
        limit: int,
    ) -> tuple[list[ItemRow], bool] | None:
        direction, cmp = ("ASC", ">") if order == "asc" else ("DESC", "<")
        params: list[Any] = [owner_id]
        where = f"{owner_column} = ?"
        if after is not None:
            anchor = await self._readers.fetchone(
                f"SELECT position FROM {table} WHERE {owner_column} = ? AND item_id = ?",
                (owner_id, after),
            )
            if anchor is None:
                return None
            where += f" AND position {cmp} ?"
            params.append(anchor[0])
        rows = await self._readers.fetchall(
            f"SELECT item_id, item FROM {table} WHERE {where}"
            f" ORDER BY position {direction} LIMIT ?",
            [*params, limit + 1],
        )
        page = [ItemRow(r[0], r[1]) for r in rows[:limit]]
        return page, len(rows) > limit


def _fetchall(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
    """For operations, on the writer thread."""
    return conn.execute(sql, tuple(params)).fetchall()


def _fetchone(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(sql, tuple(params)).fetchone()
    return row
