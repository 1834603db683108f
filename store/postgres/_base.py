"""What every part of the PostgreSQL store shares: the database, the commit listeners,
fenced event appends, conversation item appends and paging."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .._appends import JoinableAppends
from .._errors import Conflict, LeaseLost, StopRequested
from .._records import EventRow, Fence, ItemRow
from ._batches import AppendBatches
from ._database import Database, Operation, Tx
from ._leases import LeaseConnection
from ._listen import EVENTS, SIGNALS, Listener, events_payload, events_prefix, signal_payload
from ._sql import STEERED_BY_INPUT, UNFINISHED, columns

if TYPE_CHECKING:
    from ._sql import Conn

Order = Literal["asc", "desc"]
T = TypeVar("T")
CommitListener = Callable[[str, Sequence[EventRow]], None]  # (response id, rows)
SignalListener = Callable[[str, str], None]  # (kind, key): store/postgres/_listen.py


def insert_events(source: str, rid: int, arrays: int) -> str:
    """The CTE `ins`: the events of response $rid given as arrays $arrays, +1, +2 (seq,
    type, data), inserted once for each row of the CTE `source` (none or one)."""
    a, b, c = arrays, arrays + 1, arrays + 2
    return (
        "ins AS (INSERT INTO events (response_id, seq, type, data)"
        f" SELECT ${rid}, e.seq, e.type, e.data FROM {source},"
        f" unnest(${a}::int[], ${b}::text[], ${c}::text[]) AS e (seq, type, data) RETURNING 1)"
    )


def follows(last: str, arrays: int) -> str:
    """SQL: the events given as arrays $arrays... follow event `last` (or there are none)."""
    return f"(cardinality(${arrays}::int[]) = 0 OR {last} + 1 = (${arrays}::int[])[1])"


def notify_events(payload: int) -> str:
    """A result column sending the payload $payload on the events channel if the CTE
    `ins` inserted events (delivered at commit, and only then)."""
    return (
        f"(SELECT count(*) FROM (SELECT pg_notify('{EVENTS}', ${payload})"
        " WHERE EXISTS (SELECT 1 FROM ins)) AS n) AS notified"
    )


def notify_signal(prefix: int, key: str) -> str:
    """SQL sending a signal: $prefix is the payload's start, `key` (SQL) its key."""
    return f"pg_notify('{SIGNALS}', ${prefix} || {key})"


# Append events to a response's log if `fence` still holds it, gap-free (G7): the log's
# last event and the fence are read in one statement that locks the response's row
# FOR SHARE, so a takeover (an UPDATE of the row) waits for the append to commit, and an
# append that waited for a takeover sees the new owner and writes nothing.
_FENCED_APPEND = (
    "WITH f AS (SELECT coalesce((SELECT max(seq) FROM events WHERE response_id = $1), -1)"
    f" AS last FROM responses WHERE id = $1 AND owner = $2 AND epoch = $3 AND {UNFINISHED}"
    " FOR SHARE),"
    f" ok AS (SELECT last FROM f WHERE {follows('last', 4)}),"
    f" {insert_events('ok', 1, 4)}{{step}}"
    f" SELECT (SELECT last FROM f) AS last, (SELECT count(*) FROM ok) AS ok, {notify_events(7)}"
)
_STEP = ", st AS (INSERT INTO steps (response_id, step, items) SELECT $1, $8, $9 FROM ok)"

_INSERT_ITEMS = (
    "WITH s AS (SELECT coalesce(max(position) + 1, 0) AS start FROM conversation_items"
    " WHERE conversation_id = $1),"
    " fresh AS (SELECT u.item_id, u.item, row_number() OVER (ORDER BY u.n) AS n"
    "  FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS u (item_id, item, n){new}),"
    " ins AS (INSERT INTO conversation_items (conversation_id, position, item_id, item)"
    "  SELECT $1, s.start + f.n - 1, f.item_id, f.item FROM s, fresh AS f){upto}"
    " SELECT start FROM s"
)
# A turn's end leaves out the items its conversation holds already (a client added one of
# its input items while it ran); the others follow each other without a gap.
_NEW = (
    " WHERE NOT EXISTS (SELECT 1 FROM conversation_items AS c"
    "  WHERE c.conversation_id = $1 AND c.item_id = u.item_id)"
)
# A turn never claimed through the scan (a foreground one) records here where its
# history ended, so a chain continuing from it does not read its own items twice: before
# its first item, or one of them the client added while it ran (LEAST skips a NULL).
_UPTO = (
    ", upto AS (UPDATE responses SET conversation_upto = LEAST((SELECT start FROM s),"
    " (SELECT min(c.position) FROM conversation_items AS c"
    "  WHERE c.conversation_id = $1 AND c.item_id = ANY($2::text[])))"
    " WHERE id = $4 AND conversation_upto IS NULL)"
)


class PostgresBase:
    """The database, listeners and helpers; the operations live in the subclasses."""

    def __init__(self, db: Database, leases: LeaseConnection, instance: str, url: str) -> None:
        self.url = url  # without its password
        self._db = db
        self._leases = leases
        self._instance = instance  # names this store's notifications
        self._listeners: list[CommitListener] = []
        self._signal_listeners: list[SignalListener] = []
        self._appends = JoinableAppends()
        self._batches = AppendBatches(db, events_prefix(instance), self._deliver)
        self._listener: Listener | None = None  # set by open_postgres_store
        # The host's clock is read in one place only, to turn `purge(before)` into an
        # age (every absolute time is the database's). Tests offset it.
        self.host_clock: Callable[[], float] = time.time

    def on_events_committed(self, listener: CommitListener) -> None:
        """Call `listener(response id, rows)` after every commit that added events: this
        process's at once, other processes' when their notification arrives."""
        self._listeners.append(listener)

    def on_commit(self, listener: Callable[[float, int], None]) -> None:
        """Call `listener(seconds, writes)` after every write transaction of this process."""
        self._db.commit_listeners.append(listener)

    def on_signal(self, listener: SignalListener) -> None:
        """PostgreSQL only: call `listener(kind, key)` when another process recorded a
        stop request (`stop`, response id), ended a turn of a lane (`lane`, lane) or
        released a lease (`free`, response id). See store/postgres/_listen.py."""
        self._signal_listeners.append(listener)

    @property
    def listening(self) -> bool:
        """Whether other processes' notifications reach this store now."""
        return self._listener is not None and self._listener.listening

    def _deliver(self, response_id: str, rows: Sequence[EventRow]) -> None:
        for listener in self._listeners:
            listener(response_id, rows)

    def _deliver_signal(self, kind: str, key: str) -> None:
        for listener in self._signal_listeners:
            listener(kind, key)

    def _notify_after(self, tx: Tx, response_id: str, events: Sequence[EventRow]) -> None:
        if events and self._listeners:
            tx.after_commit(lambda: self._deliver(response_id, events))

    def _events_payload(self, response_id: str, events: Sequence[EventRow]) -> str | None:
        return events_payload(self._instance, response_id, events) if events else None

    def _signal(self, kind: str) -> str:
        return signal_payload(self._instance, kind)

    # -- helpers ----------------------------------------------------------------------

    async def _write(
        self, what: str, op: Operation[T], *, after: Sequence[str] = (), atomic: bool = True
    ) -> T:
        return await self._db.write(what, op, after=after, atomic=atomic)

    async def _append_fenced(
        self,
        tx: Tx,
        response_id: str,
        fence: Fence,
        events: Sequence[EventRow],
        step: tuple[int, str] | None = None,
    ) -> None:
        """Append `events` (and with `step`, the step record (step, items)) if `fence`
        holds the response and the events follow the log's last one; else LeaseLost or
        Conflict, and nothing is written. One statement."""
        seqs, types, datas = columns(events, "seq", "type", "data")
        args: list[Any] = [response_id, fence.owner, fence.epoch, seqs, types, datas]
        args.append(self._events_payload(response_id, events))
        if step is not None:
            args += list(step)
        sql = _FENCED_APPEND.format(step=_STEP if step is not None else "")
        row = await tx.conn.fetchrow(sql, *args)
        assert row is not None
        if row["last"] is None:
            raise LeaseLost(f"response {response_id} is no longer held by {fence}")
        if not row["ok"]:
            raise Conflict(
                f"response {response_id}: event {events[0].seq} does not follow event {row['last']}"
            )
        self._notify_after(tx, response_id, events)

    async def _stop_or_lost(
        self, conn: Conn, response_id: str, fence: Fence, status: str
    ) -> Exception:
        """Why a fenced terminal write matched no row: a stop request (G9) that wins over
        `status` while the fence still holds, or else a lost lease."""
        row = await conn.fetchrow(
            "SELECT owner, epoch, status, cancel_requested, steer,"
            f" {STEERED_BY_INPUT} AS steered FROM responses WHERE id = $1",
            response_id,
        )
        held = (
            row is not None
            and (row["owner"], row["epoch"]) == (fence.owner, fence.epoch)
            and row["status"] in ("queued", "in_progress")
        )
        if held and row is not None and status == "cancelled" and row["steered"]:
            return StopRequested("steer")
        if held and row is not None and status != "cancelled":
            if row["cancel_requested"]:
                return StopRequested("cancelled")
            if row["steer"] == "rollback":
                return StopRequested("rollback")
            if row["steer"] == "interrupt" and status == "completed":
                return StopRequested("interrupt")
        return LeaseLost(f"response {response_id} is no longer held by {fence}")

    async def _insert_conversation_items(
        self,
        conn: Conn,
        conversation_id: str,
        items: Sequence[ItemRow],
        upto_of: str | None = None,
    ) -> int:
        """Append `items` to a conversation whose row the transaction has locked; return
        the position of the first. With `upto_of` (a response id: the end of that turn),
        leave out the items the conversation holds already, and record the position as
        where that turn's history ends, unless the turn has recorded it already. Without
        it, an item the conversation holds is a Conflict (its unique index)."""
        item_ids, texts = columns(items, "item_id", "item")
        if upto_of is None:
            start = await conn.fetchval(
                _INSERT_ITEMS.format(new="", upto=""), conversation_id, item_ids, texts
            )
        else:
            sql = _INSERT_ITEMS.format(new=_NEW, upto=_UPTO)
            start = await conn.fetchval(sql, conversation_id, item_ids, texts, upto_of)
        return int(start)

    async def _append_conversation_items(
        self, conn: Conn, response_id: str, items: Sequence[ItemRow]
    ) -> None:
        """Add a finished turn's items to its conversation, if it still exists, except those
        it holds already (a client may have added one of the turn's input items while it
        ran: the item stays where the client put it). The conversation's row is locked
        first: positions are max + 1, and two turns (or a client) adding to one
        conversation at once must not draw the same."""
        conversation_id = await conn.fetchval(
            "SELECT c.id FROM responses AS r JOIN conversations AS c ON c.id = r.conversation_id"
            " WHERE r.id = $1 FOR NO KEY UPDATE OF c",
            response_id,
        )
        if conversation_id is not None:
            await self._insert_conversation_items(conn, conversation_id, items, response_id)

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
        where = f"{owner_column} = $1"
        args: list[Any] = [owner_id]
        if after is not None:
            anchor = await self._db.fetchrow(
                "read items",
                f"SELECT position FROM {table} WHERE {owner_column} = $1 AND item_id = $2",
                owner_id,
                after,
            )
            if anchor is None:
                return None
            where += f" AND position {cmp} $2"
            args.append(anchor[0])
        rows = await self._db.fetch(
            "read items",
            f"SELECT item_id, item FROM {table} WHERE {where}"
            f" ORDER BY position {direction} LIMIT ${len(args) + 1}",
            *args,
            limit + 1,
        )
        page = [ItemRow(r[0], r[1]) for r in rows[:limit]]
        return page, len(rows) > limit
