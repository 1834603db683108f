"""What the PostgreSQL store's modules share: column lists, row mappers, SQL fragments
and the advisory-lock key spaces."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import asyncpg

from .._records import ConversationRecord, JournalEntry, ResponseRecord, response_record

if TYPE_CHECKING:
    from typing import TypeAlias

    from asyncpg.pool import PoolConnectionProxy

    Conn: TypeAlias = asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]
    Pool: TypeAlias = asyncpg.Pool[asyncpg.Record]

Row = asyncpg.Record

TERMINAL = "('completed', 'failed', 'cancelled', 'incomplete')"
# As the partial indexes of migration 1 spell it.
UNFINISHED = "status IN ('queued', 'in_progress')"

# A response may start only when no earlier unfinished response shares its lane (G10).
# Under READ COMMITTED this holds only while the lane's advisory lock is held: admissions
# and claims of one lane take it (store/postgres/_lanes.py).
LANE_HEAD = (
    " AND NOT EXISTS (SELECT 1 FROM responses AS earlier WHERE earlier.lane = responses.lane"
    " AND earlier.ord < responses.ord AND earlier.status IN ('queued', 'in_progress'))"
)

# The first key of pg_advisory_xact_lock(int, int): one key space per kind of lock, the
# second key being hashtext() of the lane, the tenant or the idempotency key. A hash
# collision only makes two lanes wait for each other.
LANE_LOCK = 0x44520001
TENANT_LOCK = 0x44520002
KEY_LOCK = 0x44520003

# A lease's expiry, from a TTL in seconds given as a parameter, on the database's clock.
EXPIRES = "statement_timestamp() + make_interval(secs => {})"


def epoch(column: str) -> str:
    return f"extract(epoch FROM {column})::float8"


def response_columns(prefix: str = "") -> str:
    p = prefix
    return (
        f"{p}id, {p}tenant, {p}status, {p}background, {epoch(p + 'created_at')} AS created_at,"
        f" {p}params, {p}snapshot, {p}last_seq, {p}lane, {p}conversation_id,"
        f" {p}conversation_upto, {p}previous_response_id, {p}owner, {p}epoch,"
        f" {epoch(p + 'lease_expires_at')} AS lease_expires_at, {p}cancel_requested,"
        f" {p}recoveries, {p}step, {p}steer"
    )


RESPONSE_COLUMNS = response_columns()
JOURNAL_COLUMNS = "call_id, tool, arguments, idempotency_key, state, output, attempts"
CONVERSATION_COLUMNS = "id, tenant, created_at, metadata"


def response(row: Row) -> ResponseRecord:
    return response_record(row)


def entry(row: Row) -> JournalEntry:
    return JournalEntry(
        call_id=row["call_id"],
        tool=row["tool"],
        arguments=row["arguments"],
        idempotency_key=row["idempotency_key"],
        state=row["state"],
        output=row["output"],
        attempts=row["attempts"],
    )


def conversation(row: Row) -> ConversationRecord:
    return ConversationRecord(
        id=row["id"], tenant=row["tenant"], created_at=row["created_at"], metadata=row["metadata"]
    )


def columns(rows: Any, *names: str) -> tuple[list[Any], ...]:
    """The attributes `names` of `rows` as one list each (for unnest parameters)."""
    return tuple([getattr(r, name) for r in rows] for name in names)


# A stop of the driving process's own (`cancelled` with no cancel request) of a response
# with an accepted `response.steer` (add_steer sets `steer` in its transaction; a later
# interrupt overwrites it): it ends steered (G12). Columns of the row only, so the
# recheck after a lock wait sees them.
STEERED_BY_INPUT = "(NOT cancel_requested AND steer IN ('steer', 'interrupt'))"
