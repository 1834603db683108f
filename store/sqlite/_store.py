"""The SQLite store: responses, their events, leases and lanes; `open_store`. All SQL of
the project lives in this package."""

from __future__ import annotations

import asyncio
import concurrent.futures
import sqlite3
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import aiosqlite

from .._appends import JoinableAppends, QueuedAppend
from .._contract import Order
from .._errors import (
    IdempotencyMismatch,
    LaneBusy,
    LeaseLost,
    StopRequested,
    StoreError,
    StoreOpenError,
    TooManyQueued,
)
from .._records import (
    Admission,
    EventRow,
    Fence,
    ItemRow,
    NewResponse,
    ResponseRecord,
    as_created,
)
from ._base import (
    _LANE_HEAD,
    _RESPONSE_COLUMNS,
    _TERMINAL_SQL,
    UNFINISHED,
    _fetchall,
    _fetchone,
    _response,
)
from ._connection import Readers, Tx, Writer, connect, open_direct_reader, open_writer
from ._conversations import ConversationStore
from ._errors import translate_sqlite_errors
from ._health import FileWatch
from ._items import ItemStore, index_outputs
from ._journal import JournalStore
from ._schema import MIGRATIONS
from ._steers import SteerStore, take_steers

__all__ = ["SQLiteStore", "open_sqlite_store"]

# The responses that the previous_response_id chains of unfinished responses reach (their
# shared parts walked once). The first term repeats UNFINISHED for the partial indexes.
_LIVE_CHAINS = (
    "live_chain (id) AS ("
    f" SELECT previous_response_id FROM responses WHERE {UNFINISHED}"
    "  AND previous_response_id IS NOT NULL"
    " UNION SELECT r.previous_response_id FROM live_chain c JOIN responses r ON r.id = c.id"
    "  WHERE r.previous_response_id IS NOT NULL)"
)


# The insert of a new turn. With :claim (a background turn that heads its lane, created by
# a process that will run it), it is inserted claimed, as `_claim` would leave it: in
# progress, epoch 1, leased, its conversation's end fixed; one statement and one row
# version fewer than an insert, a read back and a claim.
_INSERT_RESPONSE = (
    "INSERT INTO responses (id, tenant, status, background, created_at, updated_at, params,"
    " snapshot, last_seq, lane, conversation_id, conversation_upto, previous_response_id,"
    " owner, epoch, lease_expires_at) VALUES (:id, :tenant, :status, :background,"
    " :created_at, :now, :params,"
    " CASE WHEN :claim THEN json_set(:snapshot, '$.status', 'in_progress') ELSE :snapshot END,"
    " :last_seq, :lane, :conversation_id,"
    " CASE WHEN :claim AND :conversation_id IS NOT NULL THEN coalesce(:conversation_upto,"
    "  (SELECT coalesce(max(position) + 1, 0) FROM conversation_items"
    "   WHERE conversation_id = :conversation_id)) ELSE :conversation_upto END,"
    " :previous_response_id, :owner, :epoch, :lease_expires_at)"
    f" RETURNING {_RESPONSE_COLUMNS}"
)


# The history's end as a position (items are numbered max + 1, and a deleted item leaves
# a gap), so that later items are left out and none before; a claim records it too.
_FIX_UPTO = (
    "UPDATE responses SET conversation_upto = coalesce(conversation_upto,"
    " (SELECT coalesce(max(position) + 1, 0) FROM conversation_items"
    "  WHERE conversation_id = responses.conversation_id))"
    " WHERE id = ? AND conversation_id IS NOT NULL RETURNING conversation_upto"
)

_NEXT_IN_LANE = (
    "SELECT id FROM responses WHERE lane = ? AND status = 'queued' AND owner IS NULL"
    f"{_LANE_HEAD} ORDER BY rowid LIMIT 1"
)
HEIRS_KEPT = 4096  # lanes whose next turn is remembered, at most
HEIR_SECONDS = 5.0  # how long a terminal write's finding stands in for a read


class SQLiteStore(ConversationStore, ItemStore, JournalStore, SteerStore):
    """Durable state of responses, events and conversations in one SQLite file (WAL).

    Writes go through one writer connection with group commit; reads use separate
    connections. `on_events_committed` listeners are given (response id, rows) after
    each commit that added events, so live streams in this process get them at once.
    """

    def __init__(self, path: Path, writer: Writer, readers: Readers, watch: FileWatch) -> None:
        super().__init__(path, writer, readers, watch)
        self._appends = JoinableAppends()
        # lane -> (the turn that may start next in it, or None; when): what a terminal
        # write found in its own transaction, for the `next_in_lane` that follows it.
        self._heirs: dict[str, tuple[str | None, float]] = {}

    # -- responses: writes ------------------------------------------------------------

    async def create_response(
        self,
        new: NewResponse,
        items: Sequence[ItemRow],
        events: Sequence[EventRow],
        admission: Admission | None = None,
        claim_for: tuple[str, float] | None = None,
    ) -> tuple[ResponseRecord, bool, ResponseRecord | None]:
        """Commit a new response, its input items and first events in one transaction,
        after its lane admits it: (record, True, None). With `claim_for` (owner, lease
        TTL), a queued response at the head of its lane is also claimed in the same
        transaction, saving a commit: (record as created, True, claimed record). With an
        idempotency key already used for the same request: (the first response, False,
        None), and nothing is written."""
        rules = admission or Admission()

        def op(tx: Tx) -> tuple[ResponseRecord, bool, ResponseRecord | None]:
            now = time.time()
            if rules.idempotency_key is not None:
                existing = self._idempotent_replay(tx, new.tenant, rules)
                if existing is not None:
                    return existing, False, None
            heads_lane = self._admit(tx, new, rules)
            claim = claim_for if new.status == "queued" and heads_lane else None
            row = tx.conn.execute(
                _INSERT_RESPONSE,
                {
                    "id": new.id,
                    "tenant": new.tenant,
                    "status": "in_progress" if claim else new.status,
                    "background": int(new.background),
                    "created_at": new.created_at,
                    "now": now,
                    "params": new.params,
                    "snapshot": new.snapshot,
                    "last_seq": new.last_seq,
                    "lane": new.lane,
                    "conversation_id": new.conversation_id,
                    "conversation_upto": new.conversation_upto,
                    "previous_response_id": new.previous_response_id,
                    "owner": claim[0] if claim else new.owner,
                    "epoch": 1 if claim or new.owner else 0,
                    "lease_expires_at": now + claim[1] if claim else new.lease_expires_at,
                    "claim": claim is not None,
                },
            ).fetchone()
            tx.conn.executemany(
                "INSERT INTO response_items (response_id, position, item_id, item)"
                " VALUES (?, ?, ?, ?)",
                [(new.id, i, it.item_id, it.item) for i, it in enumerate(items)],
            )
            self._insert_events(tx, new.id, events, -1)  # a new response's log is empty
            if rules.idempotency_key is not None:
                tx.conn.execute(
                    "INSERT INTO idempotency_keys (tenant, key, request_hash, response_id,"
                    " created_at) VALUES (?, ?, ?, ?, ?)",
                    (new.tenant, rules.idempotency_key, rules.request_hash, new.id, now),
                )
            take_steers(tx, new.id, rules.steers, rules.steers_state, new.previous_response_id)
            inserted = _response(row)
            if claim is None:
                return inserted, True, None
            return as_created(inserted, new), True, inserted

        return await self._write("create response", op)

    def _idempotent_replay(self, tx: Tx, tenant: str, rules: Admission) -> ResponseRecord | None:
        row = _fetchone(
            tx.conn,
            "SELECT k.request_hash, r.* FROM idempotency_keys k"
            " LEFT JOIN responses r ON r.id = k.response_id"
            " WHERE k.tenant = ? AND k.key = ?",
            (tenant, rules.idempotency_key),
        )
        if row is None:
            return None
        if row["request_hash"] != rules.request_hash:
            raise IdempotencyMismatch(f"key {rules.idempotency_key!r} was used for another request")
        if row["id"] is None:  # the response was deleted: the key is free again
            tx.conn.execute(
                "DELETE FROM idempotency_keys WHERE tenant = ? AND key = ?",
                (tenant, rules.idempotency_key),
            )
            return None
        return _response(row)

    def _admit(self, tx: Tx, new: NewResponse, rules: Admission) -> bool:
        """Apply the tenant's and the lane's rules for a new turn (docs/guarantees.md,
        Steering); True when its lane has no unfinished turn, so that it heads its lane."""
        if rules.max_queued_tenant is not None and new.status == "queued":
            row = _fetchone(
                tx.conn,
                "SELECT count(*) FROM responses WHERE tenant = ? AND status = 'queued'",
                (new.tenant,),
            )
            if row is not None and row[0] >= rules.max_queued_tenant:
                raise TooManyQueued(row[0], "tenant")
        lane = new.lane
        rows = _fetchall(
            tx.conn,
            f"SELECT id, status FROM responses WHERE lane = ? AND {UNFINISHED}",
            (lane,),
        )
        if not rows:
            return True
        if rules.reject_if_busy:
            raise LaneBusy(f"lane {lane} has an unfinished turn")
        queued = sum(1 for row in rows if row[1] == "queued")
        if rules.max_queued is not None and queued >= rules.max_queued:
            raise TooManyQueued(queued, "lane")
        if rules.steer is not None:
            # Only the lane's running turn: a foreground turn waiting in place is not it.
            tx.conn.execute(
                "UPDATE responses SET steer = ?, updated_at = ?"
                # A response.steer's stop (`steer`) gives way to an interrupt or rollback.
                f" WHERE lane = ? AND status = 'in_progress'"
                f" AND (steer IS NULL OR steer = 'steer'){_LANE_HEAD}",
                (rules.steer, time.time(), lane),
            )
        return False

    async def claim(self, response_id: str, owner: str, lease_ttl: float) -> ResponseRecord | None:
        """Take a queued response for `owner`; None if it is not queued any more."""

        def op(tx: Tx) -> ResponseRecord | None:
            return self._claim(tx, response_id, owner, lease_ttl)

        return await self._write("claim response", op)

    def _claim(
        self, tx: Tx, response_id: str, owner: str, lease_ttl: float
    ) -> ResponseRecord | None:
        """The claim of a queued response at the head of its lane (G10), guarded."""
        now = time.time()
        row = _fetchone(
            tx.conn,
            "UPDATE responses SET status = 'in_progress', owner = ?, epoch = epoch + 1,"
            " snapshot = json_set(snapshot, '$.status', 'in_progress'),"
            " lease_expires_at = ?, updated_at = ?,"
            # The history's end as a position (items are numbered max + 1, and a deleted
            # item leaves a gap), so that later items are left out and none before.
            " conversation_upto = CASE WHEN conversation_id IS NULL THEN NULL"
            "  ELSE coalesce(conversation_upto, (SELECT coalesce(max(position) + 1, 0)"
            "   FROM conversation_items WHERE conversation_id = responses.conversation_id)) END"
            f" WHERE id = ? AND status = 'queued' AND owner IS NULL{_LANE_HEAD}"
            f" RETURNING {_RESPONSE_COLUMNS}",
            (owner, now + lease_ttl, now, response_id),
        )
        return _response(row) if row else None

    async def fix_conversation_upto(self, response_id: str, fence: Fence) -> int | None:
        """Where the conversation history of a turn `fence` holds ends: the position
        recorded at its claim, or else (a foreground turn, never claimed) the end of its
        conversation now, recorded; None outside a conversation. LeaseLost if the fence
        no longer holds."""

        def op(tx: Tx) -> int | None:
            self._check_fence(tx, response_id, fence)
            row = _fetchone(tx.conn, _FIX_UPTO, (response_id,))
            return None if row is None or row[0] is None else int(row[0])

        return await self._write("record conversation end", op)

    async def recover(
        self, response_id: str, owner: str, lease_ttl: float
    ) -> ResponseRecord | None:
        """Take over a response whose lease is free or expired, counting one recovery
        unless its lease was released; None if it is terminal or another process (or a
        live runner of this one) holds it now."""

        def op(tx: Tx) -> ResponseRecord | None:
            now = time.time()
            row = _fetchone(
                tx.conn,
                "UPDATE responses SET status = 'in_progress', owner = ?, epoch = epoch + 1,"
                " lease_expires_at = ?, updated_at = ?,"
                # A lease released (a graceful shutdown's hand-over) is not a crash.
                # Every other recovery counts, one of this process's own too: a live
                # process renews what it drives, so an expired lease of its own is a
                # turn whose runner ended without an end, and must not loop uncounted.
                " recoveries = recoveries + (CASE WHEN owner IS NULL THEN 0 ELSE 1 END),"
                " snapshot = json_set(snapshot, '$.status', 'in_progress')"
                " WHERE id = ? AND status = 'in_progress'"
                " AND (owner IS NULL OR lease_expires_at < ?)"
                f" RETURNING {_RESPONSE_COLUMNS}",
                (owner, now + lease_ttl, now, response_id, now),
            )
            return _response(row) if row else None

        return await self._write("recover response", op)

    async def orphans(self, limit: int = 5000) -> list[tuple[str, str]]:
        """(id, status) of unfinished responses nobody holds: queued ones at the head of
        their lane, and running ones whose lease expired. Oldest first."""
        # INDEXED BY: for ORDER BY rowid the planner would rather scan the whole table.
        rows = await self._readers.fetchall(
            "SELECT id, status FROM responses INDEXED BY responses_unfinished_owner"
            f" WHERE {UNFINISHED} AND ("
            f" (status = 'queued' AND owner IS NULL{_LANE_HEAD})"
            " OR (status = 'in_progress' AND (owner IS NULL OR lease_expires_at < ?)))"
            " ORDER BY rowid LIMIT ?",
            (time.time(), limit),
        )
        return [(r[0], r[1]) for r in rows]

    async def purge(self, before: float, batch: int = 500) -> tuple[int, int]:
        """Delete finished responses last changed before `before` (their items, events,
        steps and journal go with them) and their idempotency keys, `batch` responses per
        transaction so that other writes are not held up behind a large backlog. Running
        and queued responses are never touched, nor any response that the
        previous_response_id chain of one of them reaches: a turn that has yet to run or
        to be recovered rebuilds its history from that chain (G5). Returns (responses,
        keys) deleted."""
        expired = (
            f"WITH RECURSIVE {_LIVE_CHAINS} SELECT id FROM responses"
            f" WHERE status IN {_TERMINAL_SQL} AND updated_at < ?"
            " AND id NOT IN (SELECT id FROM live_chain) LIMIT ?"
        )

        def op(tx: Tx) -> tuple[int, int]:
            ids = [row[0] for row in tx.conn.execute(expired, (before, batch))]
            if not ids:
                return 0, 0
            marks = ", ".join("?" * len(ids))
            # A key lives as long as its response (G11: keys expire with its retention).
            keys = tx.conn.execute(
                f"DELETE FROM idempotency_keys WHERE response_id IN ({marks})", ids
            )
            gone = tx.conn.execute(f"DELETE FROM responses WHERE id IN ({marks})", ids)
            return gone.rowcount, keys.rowcount

        responses = keys = 0
        while True:
            gone, keys_gone = await self._write("purge", op)
            responses, keys = responses + gone, keys + keys_gone
            if gone < batch:
                return responses, keys

    async def count_queued(self) -> int:
        row = await self._readers.fetchone("SELECT count(*) FROM responses WHERE status = 'queued'")
        return int(row[0]) if row else 0

    async def lane_busy(self, lane: str) -> bool:
        row = await self._readers.fetchone(
            f"SELECT 1 FROM responses WHERE lane = ? AND {UNFINISHED} LIMIT 1",
            (lane,),
        )
        return row is not None

    async def running_turn(self, lane: str) -> ResponseRecord | None:
        """The turn of `lane` that runs now, if any (a lane runs one at a time, G10)."""
        row = await self._readers.fetchone(
            # The lane's head: foreground turns waiting behind it are in progress too.
            f"SELECT {_RESPONSE_COLUMNS} FROM responses WHERE lane = ?"
            " AND status = 'in_progress' ORDER BY rowid LIMIT 1",
            (lane,),
        )
        return _response(row) if row is not None else None

    async def idempotency_key(self, tenant: str, key: str) -> tuple[str, str] | None:
        """(request hash, response id) recorded for the key, if its response still exists."""
        row = await self._readers.fetchone(
            "SELECT k.request_hash, k.response_id FROM idempotency_keys k"
            " JOIN responses r ON r.id = k.response_id WHERE k.tenant = ? AND k.key = ?",
            (tenant, key),
        )
        return (row[0], row[1]) if row else None

    async def is_lane_head(self, response_id: str) -> bool:
        """True when no earlier unfinished response shares this response's lane."""
        rows = self._readers.point(
            f"SELECT 1 FROM responses WHERE id = ?{_LANE_HEAD}", (response_id,)
        )
        return bool(rows)

    async def next_in_lane(self, lane: str) -> str | None:
        """The queued response that runs next in `lane`, if it may start now: as the
        terminal write of this lane's turn found it a moment ago (no read), else read."""
        heir = self._heirs.pop(lane, None)
        if heir is not None and time.monotonic() - heir[1] < HEIR_SECONDS:
            return heir[0]
        rows = await self._readers.fetchall(_NEXT_IN_LANE, (lane,))
        return str(rows[0][0]) if rows else None

    def _next_in_lane(self, conn: sqlite3.Connection, lane: str) -> str | None:
        row = _fetchone(conn, _NEXT_IN_LANE, (lane,))
        return str(row[0]) if row else None

    def renew_leases(
        self, leases: Sequence[tuple[str, Fence]], lease_ttl: float
    ) -> concurrent.futures.Future[list[str]]:
        """Extend each lease of `leases` (response id, fence) that its fence still holds;
        the future gives the ids renewed. Only the turns a process drives are renewed,
        never every lease of its owner: a lease left behind by a runner that ended without
        an end must expire, so that a recovery scan takes the turn and counts it (G1).

        Callable from any thread, and meant for one that is not the event loop's: the
        writer thread commits it in a transaction of its own and answers it itself, so a
        blocked event loop cannot stop a live process from keeping its leases (G8)."""

        def op(tx: Tx) -> list[str]:
            with translate_sqlite_errors("renew leases"):
                expires = time.time() + lease_ttl
                renewed = []
                for response_id, fence in leases:
                    row = tx.conn.execute(
                        "UPDATE responses SET lease_expires_at = ? WHERE id = ? AND owner = ?"
                        " AND epoch = ? AND status = 'in_progress' RETURNING id",
                        (expires, response_id, fence.owner, fence.epoch),
                    ).fetchone()
                    if row is not None:
                        renewed.append(response_id)
                return renewed

        return self._writer.submit_threadsafe(op)

    async def release_leases(self, leases: Sequence[tuple[str, Fence]]) -> None:
        """Give up these leases now (each only if its fence still holds), so another
        process resumes without waiting; a released lease's recovery is not counted."""

        def op(tx: Tx) -> None:
            tx.conn.executemany(
                "UPDATE responses SET owner = NULL, lease_expires_at = NULL"
                " WHERE id = ? AND owner = ? AND epoch = ? AND status = 'in_progress'",
                [(response_id, fence.owner, fence.epoch) for response_id, fence in leases],
            )

        if leases:
            await self._write("release leases", op)

    async def release_lease(self, response_id: str, fence: Fence) -> None:
        """Give up one response's lease now, so that the recovery scan resumes it."""

        def op(tx: Tx) -> None:
            tx.conn.execute(
                "UPDATE responses SET owner = NULL, lease_expires_at = NULL"
                " WHERE id = ? AND owner = ? AND epoch = ? AND status = 'in_progress'",
                (response_id, fence.owner, fence.epoch),
            )

        await self._write("release lease", op)

    async def stop_requests(self, owner: str) -> list[tuple[str, str]]:
        """(id, kind) of the responses `owner` drives that were asked to stop: kind is
        `cancelled`, `rollback` or `interrupt`."""
        rows = await self._readers.fetchall(
            "SELECT id, cancel_requested, steer FROM responses WHERE owner = ?"
            " AND status = 'in_progress' AND (cancel_requested = 1 OR steer IS NOT NULL)",
            (owner,),
        )
        return [(r[0], "cancelled" if r[1] else r[2]) for r in rows]

    def append_events(
        self,
        response_id: str,
        fence: Fence,
        events: Sequence[EventRow],
        *,
        join: bool = False,
    ) -> asyncio.Future[None]:
        """Queue events for the next group commit; the future resolves once committed.
        With `join`, the events join this response's append that is queued and has not
        started yet, if there is one, and share its outcome (store/_appends.py)."""

        def submit(append: QueuedAppend) -> asyncio.Future[None]:
            def op(tx: Tx) -> None:
                rows = self._appends.take(response_id, append)
                last = self._fenced_log_end(tx, response_id, fence)
                self._insert_events(tx, response_id, rows, last)

            return self._writer.submit(op)

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
        same transaction, with everything of it (`_discard`).
        """

        def op(tx: Tx) -> tuple[str, str | None] | None:
            release = ", owner = NULL, lease_expires_at = NULL" if terminal else ""
            cur = tx.conn.execute(
                "UPDATE responses SET status = ?, snapshot = ?, last_seq = ?,"
                f" step = coalesce(?, step), updated_at = ?{release}"
                f" WHERE id = ? AND owner = ? AND epoch = ? AND status NOT IN {_TERMINAL_SQL}",
                (
                    status,
                    snapshot,
                    last_seq,
                    step,
                    time.time(),
                    response_id,
                    fence.owner,
                    fence.epoch,
                ),
            )
            if cur.rowcount != 1:
                raise LeaseLost(f"response {response_id} is no longer held by {fence}")
            if terminal:
                self._check_stop_request(tx, response_id, status)
                if not discard:
                    index_outputs(tx, response_id, snapshot)
            self._insert_events(tx, response_id, events)
            if logged:
                self._check_log_ends_at(tx, response_id, last_seq, events)
            if conversation_items:
                self._append_conversation_items(tx, response_id, conversation_items)
            heir = self._lane_heir(tx, response_id) if terminal else None
            if terminal and discard:
                self._discard(tx, response_id)
            return heir

        heir = await self._write("save snapshot", op)
        if heir is not None:
            if len(self._heirs) > HEIRS_KEPT:  # ends whose lane nobody asked about
                self._heirs.clear()
            self._heirs[heir[0]] = (heir[1], time.monotonic())

    def _lane_heir(self, tx: Tx, response_id: str) -> tuple[str, str | None] | None:
        """(lane, the queued turn that may start next in it) as this transaction leaves
        them. One writer orders every admission before or after it, so this is what a read
        right after the commit would find; a turn admitted later heads its lane itself or
        queues behind the one found here."""
        row = _fetchone(tx.conn, "SELECT lane FROM responses WHERE id = ?", (response_id,))
        if row is None:
            return None
        return str(row[0]), self._next_in_lane(tx.conn, str(row[0]))

    def _discard(self, tx: Tx, response_id: str) -> None:
        """Delete a finished response and all that is kept for it: its input items,
        events, steps and journal go with its row (ON DELETE CASCADE)."""
        tx.conn.execute("DELETE FROM idempotency_keys WHERE response_id = ?", (response_id,))
        tx.conn.execute("DELETE FROM responses WHERE id = ?", (response_id,))

    def _check_stop_request(self, tx: Tx, response_id: str, status: str) -> None:
        """A cancel or steer recorded before this end wins over it (G9), and an accepted
        `response.steer` over a stop of this process's own (a foreground client gone,
        G12): its input is the server's to apply."""
        row = _fetchone(
            tx.conn, "SELECT cancel_requested, steer FROM responses WHERE id = ?", (response_id,)
        )
        if row is None:
            return
        if status == "cancelled" and not row[0] and row[1] in ("steer", "interrupt"):
            raise StopRequested("steer")  # an interrupt after a steer overwrites `steer`
        if row[0] and status != "cancelled":
            raise StopRequested("cancelled")
        if row[1] == "rollback" and status != "cancelled":
            raise StopRequested("rollback")
        if row[1] == "interrupt" and status == "completed":
            raise StopRequested("interrupt")

    async def cancel_queued(
        self, response_id: str, *, snapshot: str, last_seq: int, events: Sequence[EventRow]
    ) -> bool:
        """Cancel a response no runner holds; False if it is held or already terminal."""

        def op(tx: Tx) -> bool:
            cur = tx.conn.execute(
                "UPDATE responses SET status = 'cancelled', cancel_requested = 1, snapshot = ?,"
                " last_seq = ?, updated_at = ?"
                " WHERE id = ? AND status = 'queued' AND owner IS NULL",
                (snapshot, last_seq, time.time(), response_id),
            )
            if cur.rowcount != 1:
                return False
            self._insert_events(tx, response_id, events)
            return True

        return await self._write("cancel response", op)

    async def request_cancel(self, response_id: str) -> bool:
        """Record durably that the response must stop; False if it is already terminal."""

        def op(tx: Tx) -> bool:
            cur = tx.conn.execute(
                "UPDATE responses SET cancel_requested = 1, updated_at = ?"
                f" WHERE id = ? AND status NOT IN {_TERMINAL_SQL}",
                (time.time(), response_id),
            )
            return cur.rowcount == 1

        return await self._write("request cancel", op)

    async def delete_response(self, response_id: str, tenant: str) -> bool:
        def op(tx: Tx) -> bool:
            cur = tx.conn.execute(
                f"DELETE FROM responses WHERE id = ? AND tenant = ? AND status IN {_TERMINAL_SQL}",
                (response_id, tenant),
            )
            if cur.rowcount != 1:
                return False
            tx.conn.execute("DELETE FROM idempotency_keys WHERE response_id = ?", (response_id,))
            return True

        return await self._write("delete response", op)

    # -- responses: reads -------------------------------------------------------------

    async def get_response(self, response_id: str, tenant: str) -> ResponseRecord | None:
        rows = self._readers.point(
            f"SELECT {_RESPONSE_COLUMNS} FROM responses WHERE id = ? AND tenant = ?",
            (response_id, tenant),
        )
        return _response(rows[0]) if rows else None

    async def response_snapshot(self, response_id: str, tenant: str) -> tuple[str, bool] | None:
        """(snapshot, background) of a response: what a GET needs, without the rest."""
        rows = self._readers.point(
            "SELECT snapshot, background FROM responses WHERE id = ? AND tenant = ?",
            (response_id, tenant),
        )
        return (rows[0][0], bool(rows[0][1])) if rows else None

    async def ping(self) -> None:
        """Raise StoreError unless the database answers a read."""
        with translate_sqlite_errors("ping"):
            await self._readers.fetchone("SELECT 1")

    # -- health (store/sqlite/_health.py) ----------------------------------------------------

    def check_file(self) -> None:
        """Raise StoreVanished if the database file was deleted or replaced since the
        store opened it (a stat; from then on, always)."""
        self._watch.check()

    async def check_writable(self) -> None:
        """Raise StoreUnavailable unless the store can be written now: its file is the
        one it opened, and when the last transaction failed for want of disk (or none
        committed for PROBE_AFTER seconds), a probe write commits now. So a full disk
        shows here, and so does its end, with no request having to fail first."""
        self.check_file()
        idle = time.monotonic() - self._writer.committed_at >= PROBE_AFTER
        if self._writer.unavailable is None and not idle:
            return

        def op(tx: Tx) -> None:
            tx.conn.execute(
                "INSERT INTO write_probe (id, written_at) VALUES (1, ?)"
                " ON CONFLICT (id) DO UPDATE SET written_at = excluded.written_at",
                (time.time(),),
            )

        await self._write("write probe", op, urgent=True)

    async def read_events(self, response_id: str, after: int, limit: int = 1000) -> list[EventRow]:
        sql = (
            "SELECT seq, type, data FROM events WHERE response_id = ? AND seq > ?"
            " ORDER BY seq LIMIT ?"
        )
        params = (response_id, after, limit)
        # A live stream reads the few rows of one commit: cheaper here than on a thread.
        rows = (
            self._readers.point(sql, params)
            if limit <= 64
            else await self._readers.fetchall(sql, params)
        )
        return [EventRow(r[0], r[1], r[2]) for r in rows]

    async def list_response_items(
        self, response_id: str, *, after: str | None, order: Order, limit: int
    ) -> tuple[list[ItemRow], bool] | None:
        """A page of a response's input items; None if `after` is not one of them."""
        return await self._page(
            "response_items", "response_id", response_id, after=after, order=order, limit=limit
        )

    async def chain(self, response_id: str, tenant: str) -> list[tuple[ResponseRecord, list[str]]]:
        """The previous_response_id chain ending at `response_id`, oldest first, each with
        its input items (JSON texts). It stops short at a response that was deleted: the
        oldest record's `previous_response_id` then names the missing one."""
        rows = await self._readers.fetchall(
            "WITH RECURSIVE chain (id, depth) AS ("
            " SELECT id, 0 FROM responses WHERE id = ? AND tenant = ?"
            " UNION ALL SELECT r.previous_response_id, c.depth + 1"
            "  FROM chain c JOIN responses r ON r.id = c.id"
            "  WHERE r.previous_response_id IS NOT NULL)"
            f" SELECT {', '.join('r.' + c.strip() for c in _RESPONSE_COLUMNS.split(','))}, c.depth"
            " FROM chain c JOIN responses r ON r.id = c.id AND r.tenant = ?"
            " ORDER BY c.depth DESC",
            (response_id, tenant, tenant),
        )
        records = [_response(r) for r in rows]
        if not records:
            return []
        marks = ", ".join("?" for _ in records)
        item_rows = await self._readers.fetchall(
            f"SELECT response_id, item FROM response_items WHERE response_id IN ({marks})"
            " ORDER BY response_id, position",
            [r.id for r in records],
        )
        items: dict[str, list[str]] = {r.id: [] for r in records}
        for row in item_rows:
            items[row[0]].append(row[1])
        return [(r, items[r.id]) for r in records]


READERS = 2
PROBE_AFTER = 5.0  # seconds without a commit after which readiness writes to find out


@asynccontextmanager
async def open_sqlite_store(path: str | Path) -> AsyncIterator[SQLiteStore]:
    """Open (creating and migrating as needed) the store at `path` for the duration of
    the block. Raises StoreOpenError with a clear message if the file cannot be used."""
    db_path = Path(path)
    readers: list[aiosqlite.Connection] = []
    writer_conn: sqlite3.Connection | None = None
    try:
        await asyncio.to_thread(db_path.parent.mkdir, parents=True, exist_ok=True)
        if await asyncio.to_thread(db_path.is_dir):
            # Checked first: a failed aiosqlite.connect leaves a stop future nobody awaits.
            raise StoreOpenError(f"{db_path} is a directory, not a database file")
        writer_conn = await asyncio.to_thread(open_writer, db_path, MIGRATIONS)
        for _ in range(READERS):
            readers.append(await connect(db_path, readonly=True))
        watch = FileWatch(db_path)  # the file the writer opened: checked before each write
        direct = open_direct_reader(db_path)
    except (sqlite3.Error, OSError, StoreError) as exc:
        for conn in readers:
            await conn.close()
        if writer_conn is not None:
            writer_conn.close()
        if isinstance(exc, StoreOpenError):
            raise
        raise StoreOpenError(f"cannot open the store at {db_path}: {exc}") from exc
    writer = Writer(writer_conn, guard=watch.check)
    store = SQLiteStore(db_path, writer, Readers(readers, direct), watch)
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(writer.serve())
            try:
                yield store
            finally:
                writer.stop()
    finally:
        await writer.close()
        store._readers.close_direct()
        for conn in readers:
            await conn.close()
