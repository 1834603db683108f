"""A running response: leases, fenced writes, checkpoints, stop requests.

Every transition is one guarded UPDATE decided by what it RETURNS. Two points differ
from SQLite, where one writer made them hold by itself:

- **The terminal write checks for a stop request inside its UPDATE's WHERE**, so a
  cancel or steer committed first makes it match nothing (and the stop wins, G9), and
  one committed after finds the response terminal. Only when it matched nothing is the
  row read, to say why (StopRequested or LeaseLost).
- **Recovery skips a row another host has locked** (`FOR UPDATE SKIP LOCKED`): hosts that
  found the same orphan do not queue behind each other, the first takes it, and the
  others' scans see it held.

Times are the database's: a lease expires at `statement_timestamp()` plus its TTL and is
expired when `statement_timestamp()` has passed it, whatever the hosts' clocks say.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._appends import QueuedAppend
from .._errors import Conflict, LeaseLost, StoreError
from .._records import EventRow, Fence, ItemRow, ResponseRecord
from ._base import follows, insert_events, notify_events, notify_signal
from ._database import Tx
from ._items import INDEX_OUTPUTS, output_ids
from ._lanes import LaneStore

if TYPE_CHECKING:
    from ._sql import Conn
from ._sql import (
    EXPIRES,
    LANE_HEAD,
    RESPONSE_COLUMNS,
    STEERED_BY_INPUT,
    UNFINISHED,
    columns,
    response,
)

# A stop request recorded first wins over the turn's end (G9): a cancel or a rollback
# over anything but `cancelled`, an interrupt over `completed`. $4 is the new status.
_STOP_CHECK = (
    " AND ($4 = 'cancelled' OR (NOT cancel_requested AND steer IS DISTINCT FROM 'rollback'"
    " AND ($4 <> 'completed' OR steer IS DISTINCT FROM 'interrupt')))"
    # An accepted response.steer wins over a stop of the process's own (a foreground
    # client gone, G12): its input is the server's to apply.
    f" AND NOT ($4 = 'cancelled' AND coalesce({STEERED_BY_INPUT}, false))"
)

_RECOVER = (
    "UPDATE responses SET status = 'in_progress', owner = $1, epoch = epoch + 1,"
    f" lease_expires_at = {EXPIRES.format('$2')}, updated_at = statement_timestamp(),"
    # A lease released (a graceful shutdown's hand-over) is not a crash. Every other
    # recovery counts, one of this process's own too: a live process renews what it
    # drives, so an expired lease of its own is a turn whose runner ended without an
    # end, and must not loop uncounted.
    " recoveries = recoveries + (CASE WHEN owner IS NULL THEN 0 ELSE 1 END),"
    " snapshot = durable_set_status(snapshot, 'in_progress')"
    " WHERE id = (SELECT id FROM responses WHERE id = $3 AND status = 'in_progress'"
    "  AND (owner IS NULL OR lease_expires_at < statement_timestamp())"
    "  FOR UPDATE SKIP LOCKED)"
    f" RETURNING {RESPONSE_COLUMNS}"
)

_ORPHANS = (
    f"SELECT id, status FROM responses WHERE {UNFINISHED} AND ("
    f" (status = 'queued' AND owner IS NULL{LANE_HEAD})"
    " OR (status = 'in_progress'"
    "  AND (owner IS NULL OR lease_expires_at < statement_timestamp())))"
    " ORDER BY ord LIMIT $1"
)

_RELEASE = (
    "WITH u AS (UPDATE responses AS r SET owner = NULL, lease_expires_at = NULL"
    " FROM unnest($1::text[], $2::text[], $3::bigint[]) AS l (id, owner, epoch)"
    " WHERE r.id = l.id AND r.owner = l.owner AND r.epoch = l.epoch"
    " AND r.status = 'in_progress' RETURNING r.id)"
    f" SELECT count(*) FROM (SELECT {notify_signal(4, 'u.id')} FROM u) AS s"
)

_CANCEL_QUEUED = (
    "WITH u AS (UPDATE responses SET status = 'cancelled', cancel_requested = true,"
    " snapshot = $2, last_seq = $3, updated_at = statement_timestamp()"
    " WHERE id = $1 AND status = 'queued' AND owner IS NULL RETURNING lane),"
    " log AS (SELECT coalesce(max(seq), -1) AS last FROM events WHERE response_id = $1),"
    f" ok AS (SELECT 1 FROM u, log WHERE {follows('log.last', 4)}),"
    f" {insert_events('ok', 1, 4)}"
    " SELECT (SELECT lane FROM u) AS lane, (SELECT last FROM log) AS last,"
    f" (SELECT count(*) FROM ok) AS ok, {notify_events(7)},"
    f" (SELECT count(*) FROM (SELECT {notify_signal(8, 'u.lane')} FROM u) AS s) AS signalled"
)

_REQUEST_CANCEL = (
    "WITH u AS (UPDATE responses SET cancel_requested = true, updated_at = statement_timestamp()"
    f" WHERE id = $1 AND {UNFINISHED} RETURNING owner)"
    " SELECT (SELECT count(*) FROM u) AS n, (SELECT count(*) FROM"
    f" (SELECT {notify_signal(2, '$1')} FROM u WHERE owner IS NOT NULL) AS s) AS signalled"
)


def _save_sql(terminal: bool) -> str:
    """The checkpoint's one statement: the log's end; the fenced UPDATE (with `terminal`,
    its stop check, the lease's release and the output items' ids, store/postgres/_items.py)
    only if the events follow that end and, with $12 (`logged`), the log then ends at
    `last_seq`; the events only if the UPDATE was made. So a refused save writes nothing,
    and the statement can be its own transaction."""
    release = ", owner = NULL, lease_expires_at = NULL" if terminal else ""
    stop = _STOP_CHECK if terminal else ""
    outputs = f", {INDEX_OUTPUTS}" if terminal else ""
    signal = (
        f", (SELECT count(*) FROM (SELECT {notify_signal(13, 'u.lane')} FROM u) AS s) AS signalled"
        if terminal
        else ""
    )
    return (
        "WITH log AS (SELECT coalesce(max(seq), -1) AS last FROM events WHERE response_id = $1),"
        f" ok AS (SELECT 1 FROM log WHERE {follows('log.last', 8)} AND (NOT $12::bool"
        "  OR coalesce(($8::int[])[cardinality($8::int[])], log.last) = $6)),"
        " u AS (UPDATE responses SET status = $4, snapshot = $5, last_seq = $6,"
        f" step = coalesce($7, step), updated_at = statement_timestamp(){release}"
        f" WHERE id = $1 AND owner = $2 AND epoch = $3 AND {UNFINISHED}{stop}"
        " AND EXISTS (SELECT 1 FROM ok) RETURNING lane),"
        f" {insert_events('u', 1, 8)}{outputs}"
        " SELECT $1 AS id, (SELECT lane FROM u) AS lane, (SELECT last FROM log) AS last,"
        " (SELECT count(*) FROM ok) AS ok, EXISTS (SELECT 1 FROM responses WHERE id = $1"
        f" AND owner = $2 AND epoch = $3 AND {UNFINISHED}) AS held, {notify_events(11)}{signal}"
    )


_SAVE = {terminal: _save_sql(terminal) for terminal in (False, True)}


# The history's end as a position (items are numbered max + 1, and a deleted item leaves
# a gap), so that later items are left out and none before; a claim records it too.
_FIX_UPTO = (
    "UPDATE responses SET conversation_upto = CASE WHEN conversation_id IS NULL THEN NULL"
    "  ELSE coalesce(conversation_upto, (SELECT coalesce(max(position) + 1, 0)"
    "   FROM conversation_items WHERE conversation_id = responses.conversation_id)) END"
    f" WHERE id = $1 AND owner = $2 AND epoch = $3 AND {UNFINISHED}"
    " RETURNING conversation_upto"
)


class RunStore(LaneStore):
    # -- leases -----------------------------------------------------------------------

    async def recover(
        self, response_id: str, owner: str, lease_ttl: float
    ) -> ResponseRecord | None:
        """Take over a response whose lease is free or expired, counting one recovery
        unless its lease was released; None if it is terminal or another process (or a
        live runner of this one) holds it now, or is taking it at this moment."""

        async def op(tx: Tx) -> ResponseRecord | None:
            row = await tx.conn.fetchrow(_RECOVER, owner, float(lease_ttl), response_id)
            return response(row) if row else None

        return await self._write("recover response", op, atomic=False)

    async def fix_conversation_upto(self, response_id: str, fence: Fence) -> int | None:
        """Where the conversation history of a turn `fence` holds ends: the position
        recorded at its claim, or else (a foreground turn, never claimed) the end of its
        conversation now, recorded; None outside a conversation. LeaseLost if the fence
        no longer holds."""

        async def op(tx: Tx) -> int | None:
            row = await tx.conn.fetchrow(_FIX_UPTO, response_id, fence.owner, fence.epoch)
            if row is None:
                raise LeaseLost(f"response {response_id} is no longer held by {fence}")
            return None if row[0] is None else int(row[0])

        return await self._write("record conversation end", op, after=(response_id,))

    async def orphans(self, limit: int = 5000) -> list[tuple[str, str]]:
        """(id, status) of unfinished responses nobody holds: queued ones at the head of
        their lane, and running ones whose lease expired. Oldest first."""
        rows = await self._db.fetch("scan orphans", _ORPHANS, limit)
        return [(r[0], r[1]) for r in rows]

    def renew_leases(
        self, leases: Sequence[tuple[str, Fence]], lease_ttl: float
    ) -> concurrent.futures.Future[list[str]]:
        """Extend each lease of `leases` (response id, fence) that its fence still holds;
        the future gives the ids renewed. Only the turns a process drives are renewed,
        never every lease of its owner: a lease left behind by a runner that ended without
        an end must expire, so that a recovery scan takes the turn and counts it (G1).

        Callable from any thread, and meant for one that is not the event loop's: a
        thread of the store's own, with a connection of its own, runs it and answers it,
        so a blocked event loop cannot stop a live process from keeping its leases (G8)."""
        return self._leases.renew(leases, lease_ttl)

    async def release_leases(self, leases: Sequence[tuple[str, Fence]]) -> None:
        """Give up these leases now (each only if its fence still holds), so another
        process resumes without waiting; a released lease's recovery is not counted.
        Each waits for the writes submitted before it for its response."""
        if not leases:
            return
        ids = [response_id for response_id, _ in leases]
        owners = [fence.owner for _, fence in leases]
        epochs = [fence.epoch for _, fence in leases]

        async def op(tx: Tx) -> None:
            await tx.conn.fetchval(_RELEASE, ids, owners, epochs, self._signal("free"))

        await self._write("release leases", op, after=ids, atomic=False)

    async def release_lease(self, response_id: str, fence: Fence) -> None:
        """Give up one response's lease now, so that the recovery scan resumes it."""
        await self.release_leases([(response_id, fence)])

    async def stop_requests(self, owner: str) -> list[tuple[str, str]]:
        """(id, kind) of the responses `owner` drives that were asked to stop: kind is
        `cancelled`, `rollback` or `interrupt`."""
        rows = await self._db.fetch(
            "read stop requests",
            "SELECT id, cancel_requested, steer FROM responses WHERE owner = $1"
            " AND status = 'in_progress' AND (cancel_requested OR steer IS NOT NULL)",
            owner,
        )
        return [(r[0], "cancelled" if r[1] else r[2]) for r in rows]

    # -- fenced writes ----------------------------------------------------------------

    def append_events(
        self,
        response_id: str,
        fence: Fence,
        events: Sequence[EventRow],
        *,
        join: bool = False,
    ) -> asyncio.Future[None]:
        """Queue events behind the response's earlier writes; the future resolves once
        they are committed. With `join`, the events join this response's append that is
        queued and has not started yet, if there is one, and share its outcome
        (store/_appends.py). Appends of many responses share commits
        (store/postgres/_batches.py)."""

        def submit(append: QueuedAppend) -> asyncio.Future[None]:
            def take() -> list[EventRow]:
                return self._appends.take(response_id, append)

            async def run() -> None:
                if not append.carried:  # else a save behind it writes its rows
                    await self._batches.append(response_id, fence, take)

            # What the emitters await: this append's commit, or the save's that carries it.
            outcome = asyncio.get_running_loop().create_future()

            def settle(slot: asyncio.Future[None]) -> None:
                if not append.carried:
                    _copy(slot, outcome)

            self._db.chain("append events", run, after=(response_id,)).add_done_callback(settle)
            return outcome

        return self._appends.append(response_id, fence, events, join, submit)

    async def save_snapshot(
        self,
        response_id: str,
        fence: Fence,
        *,
        snapshot: str,
        last_seq: int,
        events: Sequence[EventRow] = (),
        terminal: bool = False,
        status: str,
        step: int | None = None,
        conversation_items: Sequence[ItemRow] = (),
        logged: bool = False,
        discard: bool = False,
    ) -> None:
        """Commit a checkpoint (or, with `terminal`, the final state and release the lease).

        `events` are committed in the same transaction. With `logged` (a response with an
        event log), the log must then end exactly at `last_seq`: a snapshot never gets
        ahead of the events it covers, even if an append queued before it failed. With
        `terminal` and `discard` (a `store: false` response), the end is checked as any
        other, its conversation items are added, and then the response is deleted in the
        same transaction, with everything of it.
        """
        args: list[Any] = [response_id, fence.owner, fence.epoch, status, snapshot, last_seq]
        args += [step, *columns(events, "seq", "type", "data")]
        args += [self._events_payload(response_id, events), logged]
        if terminal:
            args += [self._signal("lane"), [] if discard else output_ids(snapshot)]

        # A save of one statement needs no BEGIN and COMMIT: two round trips fewer on the
        # hottest write (each checkpoint and each end). Such a save also carries the rows
        # of the response's append queued before it that has not started: one commit
        # where there were two in a row.
        alone = not conversation_items and not (terminal and discard)
        carried = self._appends.carry(response_id, fence) if alone else None
        appended: list[BaseException | None] = []  # the carried rows' outcome, once known

        async def op(tx: Tx) -> None:
            rows = [*carried.rows, *events] if carried and not appended else events
            row = await tx.conn.fetchrow(_SAVE[terminal], *self._save_args(args, rows))
            assert row is not None
            if row["lane"] is None:
                refusal = await self._refused(tx.conn, row, fence, status, rows, last_seq)
                if carried and not appended:
                    # Asked before this save, the carried events do not share its refusal.
                    appended.append(await self._append_alone(tx, response_id, fence, carried))
                raise refusal
            if carried and not appended:
                appended.append(None)
            self._notify_after(tx, response_id, rows)
            if conversation_items:
                await self._append_conversation_items(tx.conn, response_id, conversation_items)
            if terminal and discard:
                await tx.conn.execute(
                    "WITH k AS (DELETE FROM idempotency_keys WHERE response_id = $1)"
                    " DELETE FROM responses WHERE id = $1",
                    response_id,
                )

        try:
            await self._write("save snapshot", op, after=(response_id,), atomic=not alone)
        except BaseException as exc:
            if carried:
                _fail(carried.future, appended[0] if appended else exc)
            raise
        if carried:
            _fail(carried.future, None)

    def _save_args(self, args: list[Any], rows: Sequence[EventRow]) -> list[Any]:
        """`args` with the events arrays and the notification payload for `rows`."""
        response_id = args[0]
        return [
            *args[:7],
            *columns(rows, "seq", "type", "data"),
            self._events_payload(response_id, rows),
            *args[11:],
        ]

    async def _append_alone(
        self, tx: Tx, response_id: str, fence: Fence, carried: QueuedAppend
    ) -> BaseException | None:
        """Commit the carried rows without the save that was refused; what that gave."""
        try:
            await self._append_fenced(tx, response_id, fence, carried.rows)
        except (LeaseLost, Conflict) as exc:
            return exc
        return None

    async def _refused(
        self,
        conn: Conn,
        row: Any,
        fence: Fence,
        status: str,
        events: Sequence[EventRow],
        last_seq: int,
    ) -> Exception:
        """Why a save wrote nothing: a lost lease, events that do not continue the log or
        leave it short of the snapshot's last event, or (a terminal save) a stop request."""
        response_id = row["id"]
        if not row["held"]:
            return LeaseLost(f"response {response_id} is no longer held by {fence}")
        last = row["last"]
        if events and events[0].seq != last + 1:
            return Conflict(
                f"response {response_id}: event {events[0].seq} does not follow event {last}"
            )
        if not row["ok"]:
            end = events[-1].seq if events else last
            return Conflict(f"response {response_id}: the log ends at event {end}, not {last_seq}")
        return await self._stop_or_lost(conn, response_id, fence, status)

    # -- stopping ---------------------------------------------------------------------

    async def cancel_queued(
        self, response_id: str, *, snapshot: str, last_seq: int, events: Sequence[EventRow]
    ) -> bool:
        """Cancel a response no runner holds; False if it is held or already terminal."""
        args = [response_id, snapshot, last_seq, *columns(events, "seq", "type", "data")]
        args += [self._events_payload(response_id, events), self._signal("lane")]

        async def op(tx: Tx) -> bool:
            row = await tx.conn.fetchrow(_CANCEL_QUEUED, *args)
            assert row is not None
            if row["lane"] is None:
                return False
            if not row["ok"]:
                raise Conflict(
                    f"response {response_id}: event {events[0].seq} does not follow"
                    f" event {row['last']}"
                )
            self._notify_after(tx, response_id, events)
            return True

        return await self._write("cancel response", op)

    async def request_cancel(self, response_id: str) -> bool:
        """Record durably that the response must stop; False if it is already terminal."""

        async def op(tx: Tx) -> bool:
            row = await tx.conn.fetchrow(_REQUEST_CANCEL, response_id, self._signal("stop"))
            return row is not None and row["n"] == 1

        return await self._write("request cancel", op, atomic=False)


def _copy(source: asyncio.Future[None], target: asyncio.Future[None]) -> None:
    if target.done():
        return
    if source.cancelled():
        target.set_exception(StoreError("the store closed before the write ended"))
        return
    _fail(target, source.exception())


def _fail(target: asyncio.Future[None], exc: BaseException | None) -> None:
    """Settle `target` with `exc`, or as committed when None."""
    if target.done():
        return
    if exc is None:
        target.set_result(None)
    else:
        target.set_exception(exc)
