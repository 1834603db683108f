"""How a turn enters its lane and starts: admission, idempotent creates, claims.

Three rules held on SQLite only because it has one writer; here each holds under READ
COMMITTED with many hosts writing at once:

- **Admission** reads the lane's unfinished turns (and the tenant's queued ones) and
  decides in the statement that inserts the new turn, which inserts nothing when the
  rules refuse and returns the counts that say why. Every create takes the lane's
  transaction-scoped advisory lock first (and the idempotency key's when a key is given,
  and the tenant's when the tenant is near its limit: below), so that read sees every
  admission before it and none can slip in between. A statement's snapshot is taken when
  it starts, so the locks are taken by a statement of their own, before the insert; always
  in one order (key, tenant, lane), so that two creates never wait for each other's
  locks. A create is thus BEGIN, the locks, the insert, COMMIT (a steering turn reads
  the lane first to ask its running turn to stop). A background turn that finds its
  lane empty is inserted already claimed, as the claim below would leave it.
- **The tenant's limit** (`Admission.max_queued_tenant`, L) is exact near the limit and
  lock-free far from it. Holding the tenant's lock through commit (its WAL flush
  included) would serialize every background create of a tenant, on every host, so the
  lock statement first counts the tenant's queued turns (in its own snapshot, without
  the lock) and takes the tenant's lock only when that count is at least
  L - TENANT_SLACK; then the count is read again under the lock and decides, as for a
  lane. Below that, the create is admitted on the unlocked count.
  The guarantee: the tenant's queued turns exceed L only if some create admitted without
  the lock sees, from the start of its lock statement to its commit, at least
  TENANT_SLACK other creates of the tenant commit (each adds one queued turn; a turn
  that starts or ends meanwhile only lowers the count). A create is a transaction of a
  few statements, so in practice that takes more than TENANT_SLACK creates of one tenant
  in flight at once across all hosts (each host has a pool of 10 connections, so with
  TENANT_SLACK = 64 up to 6 hosts at full concurrency stay exact), or a create stalled
  mid-transaction (its host paused or its connection hung) while TENANT_SLACK others
  commit; the excess is then at most one turn per such create. A limit of
  TENANT_SLACK or less always takes the lock: exact.
- **The lane head** is a NOT EXISTS over earlier rows, which cannot see a row that a
  concurrent transaction inserted and has not committed. Creates and claims take the
  same lane lock, and `ord` is drawn while it is held, so within a lane `ord` follows
  commit order and the claim's NOT EXISTS sees every earlier turn.
- A claim is one guarded UPDATE; two claims of one row are decided by its row lock (the
  second re-reads the row, finds it `in_progress` and matches nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._errors import Conflict, IdempotencyMismatch, LaneBusy, TooManyQueued
from .._records import Admission, EventRow, ItemRow, NewResponse, ResponseRecord, as_created
from ._base import PostgresBase, insert_events, notify_signal
from ._database import Tx
from ._sql import (
    EXPIRES,
    KEY_LOCK,
    LANE_HEAD,
    LANE_LOCK,
    RESPONSE_COLUMNS,
    TENANT_LOCK,
    UNFINISHED,
    columns,
    response,
    response_columns,
)
from ._steers import take_steers

if TYPE_CHECKING:
    from ._sql import Conn

# A tenant's create takes the tenant's lock only when the tenant has at least
# `max_queued_tenant - TENANT_SLACK` queued turns (the module docstring says what that keeps).
TENANT_SLACK = 64

# The insert of a new turn. The lane's lock is held (taken in an earlier statement), so
# this statement's snapshot sees every turn of the lane. With $22 (an owner), a queued
# response that finds its lane empty is inserted claimed (in_progress, epoch 1, leased for
# $23 seconds), as `_CLAIM` would leave it: one statement and one row version fewer than
# an insert and a claim.
_INSERT = (
    # The lane's facts and the admission's rules ($24 the tenant's limit when its lock is
    # held, $25 reject if busy, $26 the lane's queue limit), decided in this statement:
    # nothing is inserted when they refuse, and the facts say why.
    "WITH f AS (SELECT count(*) AS unfinished, count(*) FILTER (WHERE status = 'queued')"
    " AS queued, CASE WHEN $24::int IS NOT NULL THEN (SELECT count(*) FROM responses AS t"
    "  WHERE t.tenant = $2 AND t.status = 'queued') END AS tenant_queued"
    f" FROM responses WHERE lane = $8 AND {UNFINISHED}),"
    " h AS (SELECT f.*, ($24::int IS NULL OR f.tenant_queued < $24::int) AND (f.unfinished = 0"
    "  OR (NOT $25::bool AND ($26::int IS NULL OR f.queued < $26::int))) AS admit,"
    "  $3 = 'queued' AND $22::text IS NOT NULL AND f.unfinished = 0 AS claim FROM f),"
    " r AS (INSERT INTO responses (id, tenant, status, background, params, snapshot,"
    " last_seq, lane, conversation_id, conversation_upto, previous_response_id, owner, epoch,"
    " lease_expires_at) SELECT $1, $2, CASE WHEN h.claim THEN 'in_progress' ELSE $3 END, $4,"
    " $5, CASE WHEN h.claim THEN durable_set_status($6, 'in_progress') ELSE $6 END, $7, $8,"
    " $9, CASE WHEN h.claim AND $9::text IS NOT NULL THEN coalesce($10, (SELECT"
    " coalesce(max(position) + 1, 0) FROM conversation_items WHERE conversation_id = $9))"
    " ELSE $10 END, $11, CASE WHEN h.claim THEN $22 ELSE $12 END,"
    " CASE WHEN h.claim THEN 1 ELSE $13 END,"
    f" CASE WHEN h.claim THEN {EXPIRES.format('$23::float8')}"
    f" WHEN $14::float8 IS NULL THEN NULL ELSE {EXPIRES.format('$14')} END FROM h WHERE h.admit"
    f" RETURNING {RESPONSE_COLUMNS}),"
    " items AS (INSERT INTO response_items (response_id, position, item_id, item)"
    " SELECT $1, u.n - 1, u.item_id, u.item"
    " FROM r, unnest($15::text[], $16::text[]) WITH ORDINALITY AS u (item_id, item, n)),"
    f" {insert_events('r', 1, 17)},"
    " keys AS (INSERT INTO idempotency_keys (tenant, key, request_hash, response_id)"
    " SELECT $2, $20, $21, $1 FROM r WHERE $20::text IS NOT NULL)"
    # No NOTIFY: nobody elsewhere can follow a response before its create has committed
    # (its id is not known), and a notifying commit holds PostgreSQL's notification lock.
    " SELECT h.unfinished, h.queued, h.tenant_queued, r.* FROM h LEFT JOIN r ON true"
)

_CLAIM = (
    "UPDATE responses SET status = 'in_progress', owner = $1, epoch = epoch + 1,"
    " snapshot = durable_set_status(snapshot, 'in_progress'),"
    f" lease_expires_at = {EXPIRES.format('$2')}, updated_at = statement_timestamp(),"
    # The history's end as a position (items are numbered max + 1, and a deleted item
    # leaves a gap), so that later items are left out and none before.
    " conversation_upto = CASE WHEN conversation_id IS NULL THEN NULL"
    "  ELSE coalesce(conversation_upto, (SELECT coalesce(max(position) + 1, 0)"
    "   FROM conversation_items WHERE conversation_id = responses.conversation_id)) END"
    f" WHERE id = $3 AND status = 'queued' AND owner IS NULL{LANE_HEAD}"
    f" RETURNING {RESPONSE_COLUMNS}"
)

_REPLAY = (
    f"SELECT k.request_hash, {response_columns('r.')} FROM idempotency_keys AS k"
    " LEFT JOIN responses AS r ON r.id = k.response_id WHERE k.tenant = $1 AND k.key = $2"
)

_LANE_FACTS = (
    "SELECT count(*) AS unfinished, count(*) FILTER (WHERE status = 'queued') AS queued,"
    " CASE WHEN $3 THEN (SELECT count(*) FROM responses AS t"
    "  WHERE t.tenant = $2 AND t.status = 'queued') END AS tenant_queued"
    f" FROM responses WHERE lane = $1 AND {UNFINISHED}"
)


class LaneStore(PostgresBase):
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
        None), and nothing is written.

        The record's `created_at` is the database's clock, not `new.created_at`; a
        foreground response's lease runs `new.lease_expires_at - new.created_at`
        seconds from the database's now."""
        rules = admission or Admission()

        async def op(tx: Tx) -> tuple[ResponseRecord, bool, ResponseRecord | None]:
            tenant_locked = await self._lock_admission(tx.conn, new, rules)
            if rules.idempotency_key is not None:
                existing = await self._idempotent_replay(tx.conn, new.tenant, rules)
                if existing is not None:
                    return existing, False, None
            if rules.steer is not None:
                await self._steer(tx, new, rules, tenant_locked)
            inserted = await self._insert(tx, new, items, events, rules, tenant_locked, claim_for)
            await take_steers(
                tx.conn, new.id, rules.steers, rules.steers_state, new.previous_response_id
            )
            if inserted.status == new.status:
                return inserted, True, None
            return as_created(inserted, new), True, inserted

        return await self._write("create response", op)

    async def _lock_admission(self, conn: Conn, new: NewResponse, rules: Admission) -> bool:
        """Take the advisory locks this admission decides under, always in one order
        (key, tenant, lane), in a statement of its own (the module docstring). The
        tenant's lock only when its limit applies and its queued turns, counted in this
        statement's snapshot (up to the threshold), reach `limit - TENANT_SLACK`: True
        when it was taken, and the tenant's count must then be read again under it."""
        args: list[Any] = []

        def arg(value: object) -> str:
            args.append(value)
            return f"${len(args)}"

        def lock(kind: int, key: str) -> str:
            return f"pg_advisory_xact_lock({arg(kind)}::int, hashtext({arg(key)}))"

        calls: list[str] = []
        if rules.idempotency_key is not None:
            calls.append(lock(KEY_LOCK, f"{new.tenant}\x1f{rules.idempotency_key}"))
        limit = rules.max_queued_tenant
        if limit is not None and new.status == "queued":
            near = max(limit - TENANT_SLACK, 0)
            # Left to right, like the locks: the count (an init plan, run when the CASE
            # first needs it) after the key's lock, the tenant's lock before the lane's.
            tenant = arg(new.tenant)
            threshold = arg(near)
            calls.append(
                f"CASE WHEN (SELECT count(*) FROM (SELECT FROM responses WHERE tenant = {tenant}"
                f" AND status = 'queued' LIMIT {threshold}::int) AS q) >= {threshold}::int"
                f" THEN {lock(TENANT_LOCK, new.tenant)} IS NOT NULL ELSE false END"
                " AS tenant_locked"
            )
        else:
            calls.append("false AS tenant_locked")
        calls.append(lock(LANE_LOCK, new.lane))
        row = await conn.fetchrow(f"SELECT {', '.join(calls)}", *args)
        assert row is not None
        return bool(row["tenant_locked"])

    async def _idempotent_replay(
        self, conn: Conn, tenant: str, rules: Admission
    ) -> ResponseRecord | None:
        row = await conn.fetchrow(_REPLAY, tenant, rules.idempotency_key)
        if row is None:
            return None
        if row["request_hash"] != rules.request_hash:
            raise IdempotencyMismatch(f"key {rules.idempotency_key!r} was used for another request")
        if row["id"] is None:  # the response was deleted: the key is free again
            await conn.execute(
                "DELETE FROM idempotency_keys WHERE tenant = $1 AND key = $2",
                tenant,
                rules.idempotency_key,
            )
            return None
        return response(row)

    async def _steer(self, tx: Tx, new: NewResponse, rules: Admission, tenant_locked: bool) -> None:
        """A steering turn asks the lane's running turn to stop, if the lane admits it
        (the insert decides again, under the same locks, and finds the same)."""
        facts = await tx.conn.fetchrow(_LANE_FACTS, new.lane, new.tenant, tenant_locked)
        assert facts is not None
        refusal = _refusal(facts, rules, tenant_locked, new.lane)
        if refusal is not None:
            raise refusal
        if not facts["unfinished"]:
            return
        # Only the lane's running turn: a foreground turn waiting in place is not it.
        await tx.conn.execute(
            "WITH s AS (UPDATE responses SET steer = $1, updated_at = statement_timestamp()"
            # A response.steer's stop (`steer`) gives way to an interrupt or rollback.
            f" WHERE lane = $2 AND status = 'in_progress'"
            f" AND (steer IS NULL OR steer = 'steer'){LANE_HEAD}"
            f" RETURNING id) SELECT {notify_signal(3, 's.id')} FROM s",
            rules.steer,
            new.lane,
            self._signal("stop"),
        )

    async def _insert(
        self,
        tx: Tx,
        new: NewResponse,
        items: Sequence[ItemRow],
        events: Sequence[EventRow],
        rules: Admission,
        tenant_locked: bool,
        claim_for: tuple[str, float] | None,
    ) -> ResponseRecord:
        """Insert the new turn if its lane's rules admit it (`_refusal` says why not)."""
        if events and events[0].seq != 0:
            raise Conflict(f"response {new.id}: event {events[0].seq} does not follow event -1")
        ttl = None
        if new.lease_expires_at is not None:  # a duration: the hosts' clocks cancel out
            ttl = new.lease_expires_at - new.created_at
        args: list[Any] = [
            new.id,
            new.tenant,
            new.status,
            new.background,
            new.params,
            new.snapshot,
            new.last_seq,
            new.lane,
            new.conversation_id,
            new.conversation_upto,
            new.previous_response_id,
            new.owner,
            1 if new.owner else 0,
            ttl,
            *columns(items, "item_id", "item"),
            *columns(events, "seq", "type", "data"),
            rules.idempotency_key,
            rules.request_hash,
            *(claim_for or (None, None)),
            rules.max_queued_tenant if tenant_locked else None,
            rules.reject_if_busy,
            rules.max_queued,
        ]
        row = await tx.conn.fetchrow(_INSERT, *args)
        assert row is not None
        if row["id"] is None:
            refusal = _refusal(row, rules, tenant_locked, new.lane)
            assert refusal is not None
            raise refusal
        self._notify_after(tx, new.id, events)
        return response(row)

    async def claim(self, response_id: str, owner: str, lease_ttl: float) -> ResponseRecord | None:
        """Take a queued response for `owner`; None if it is not queued any more (or
        not at the head of its lane)."""

        async def op(tx: Tx) -> ResponseRecord | None:
            locked = await tx.conn.fetchval(
                "SELECT pg_advisory_xact_lock($1::int, hashtext(lane)) IS NULL FROM responses"
                " WHERE id = $2 AND status = 'queued' AND owner IS NULL",
                LANE_LOCK,
                response_id,
            )
            if locked is None:
                return None  # not queued: no lock needed to say so
            return await self._claim(tx.conn, response_id, owner, lease_ttl)

        return await self._write("claim response", op)

    async def _claim(
        self, conn: Conn, response_id: str, owner: str, lease_ttl: float
    ) -> ResponseRecord | None:
        """The claim of a queued response at the head of its lane (G10), guarded; the
        transaction holds the lane's lock."""
        row = await conn.fetchrow(_CLAIM, owner, float(lease_ttl), response_id)
        return response(row) if row else None

    # -- reads ------------------------------------------------------------------------

    async def count_queued(self) -> int:
        row = await self._db.fetchrow(
            "count queued", "SELECT count(*) FROM responses WHERE status = 'queued'"
        )
        return int(row[0]) if row else 0

    async def lane_busy(self, lane: str) -> bool:
        row = await self._db.fetchrow(
            "lane busy", f"SELECT 1 FROM responses WHERE lane = $1 AND {UNFINISHED} LIMIT 1", lane
        )
        return row is not None

    async def running_turn(self, lane: str) -> ResponseRecord | None:
        """The turn of `lane` that runs now, if any (a lane runs one at a time, G10)."""
        row = await self._db.fetchrow(
            "read running turn",
            # The lane's head: foreground turns waiting behind it are in progress too.
            f"SELECT {RESPONSE_COLUMNS} FROM responses WHERE lane = $1"
            " AND status = 'in_progress' ORDER BY ord LIMIT 1",
            lane,
        )
        return response(row) if row is not None else None

    async def idempotency_key(self, tenant: str, key: str) -> tuple[str, str] | None:
        """(request hash, response id) recorded for the key, if its response still exists."""
        row = await self._db.fetchrow(
            "read idempotency key",
            "SELECT k.request_hash, k.response_id FROM idempotency_keys AS k"
            " JOIN responses AS r ON r.id = k.response_id WHERE k.tenant = $1 AND k.key = $2",
            tenant,
            key,
        )
        return (row[0], row[1]) if row else None

    async def is_lane_head(self, response_id: str) -> bool:
        """True when no earlier unfinished response shares this response's lane."""
        row = await self._db.fetchrow(
            "lane head", f"SELECT 1 FROM responses WHERE id = $1{LANE_HEAD}", response_id
        )
        return row is not None

    async def next_in_lane(self, lane: str) -> str | None:
        """The queued response that runs next in `lane`, if it may start now."""
        row = await self._db.fetchrow(
            "next in lane",
            "SELECT id FROM responses WHERE lane = $1 AND status = 'queued' AND owner IS NULL"
            f"{LANE_HEAD} ORDER BY ord LIMIT 1",
            lane,
        )
        return str(row[0]) if row else None


def _refusal(facts: Any, rules: Admission, tenant_locked: bool, lane: str) -> Exception | None:
    """Why the lane's facts refuse a new turn under `rules`, or None (docs/guarantees.md,
    Steering). The tenant's limit is checked only under the tenant's lock; without it,
    `_lock_admission` found the tenant at least TENANT_SLACK turns below its limit."""
    limit = rules.max_queued_tenant
    if tenant_locked and limit is not None and facts["tenant_queued"] >= limit:
        return TooManyQueued(facts["tenant_queued"], "tenant")
    if not facts["unfinished"]:
        return None
    if rules.reject_if_busy:
        return LaneBusy(f"lane {lane} has an unfinished turn")
    if rules.max_queued is not None and facts["queued"] >= rules.max_queued:
        return TooManyQueued(facts["queued"], "lane")
    return None
