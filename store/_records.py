"""Plain records that cross the store boundary. JSON columns travel as text, unparsed,
so that hot paths (poll, replay) can hand them to the client without a decode/encode."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class Fence:
    """Who may write a running response: every runner write is conditional on both."""

    owner: str
    epoch: int


@dataclass(frozen=True, slots=True)
class EventRow:
    seq: int
    type: str
    data: str  # the event payload, JSON text


@dataclass(frozen=True, slots=True)
class ItemRow:
    item_id: str
    item: str  # JSON text


@dataclass(frozen=True, slots=True)
class NewResponse:
    id: str
    tenant: str
    status: str
    background: bool
    created_at: float
    params: str  # JSON text
    snapshot: str  # JSON text
    last_seq: int
    lane: str
    conversation_id: str | None
    conversation_upto: int | None
    previous_response_id: str | None
    owner: str | None
    lease_expires_at: float | None


@dataclass(frozen=True, slots=True)
class ResponseRecord:
    id: str
    tenant: str
    status: str
    background: bool
    created_at: float
    params: str
    snapshot: str
    last_seq: int
    lane: str
    conversation_id: str | None
    conversation_upto: int | None
    previous_response_id: str | None
    owner: str | None
    epoch: int
    lease_expires_at: float | None
    cancel_requested: bool
    recoveries: int
    step: int  # steps whose results the snapshot includes
    steer: str | None  # interrupt | rollback (a later turn of the lane) | steer (response.steer)

    @property
    def stop_request(self) -> str | None:
        """What the turn was asked to do: `cancelled`, `rollback`, `interrupt` or None."""
        return "cancelled" if self.cancel_requested else self.steer


@dataclass(frozen=True, slots=True)
class Admission:
    """How a new turn enters its lane (docs/guarantees.md, Steering)."""

    reject_if_busy: bool = False  # `reject`: refuse when the lane has an unfinished turn
    steer: str | None = None  # `interrupt` or `rollback`: ask the running turn to stop
    max_queued: int | None = None  # refuse when this many turns already wait in the lane
    # ... or this many background turns of the tenant: exact on SQLite; on PostgreSQL
    # exceeded only if one create stays in flight while 64 others of the tenant commit
    # (TENANT_SLACK: store/postgres/_lanes.py says precisely)
    max_queued_tenant: int | None = None
    idempotency_key: str | None = None  # G11: with the request's hash
    request_hash: str | None = None
    # Steers (`response.steer`) this turn takes over in its create transaction: each must
    # still be in `steers_state` (`queued`: an automatic successor; `pending`: the
    # explicit continuation of a turn that waited for client tool output), or StaleSteers
    # and nothing is written. They become `applied`, naming the new turn.
    steers: tuple[str, ...] = ()
    steers_state: str = "queued"


@dataclass(frozen=True, slots=True)
class NewSteer:
    """A `response.steer` to commit (docs/guarantees.md, Steering over WebSocket)."""

    id: str
    tenant: str
    target_id: str
    input: str  # JSON: the steer's input items, ids given
    state: str  # `queued` (the target runs) or `pending` (it waits for client tool output)


# Why a steer that would be pending fails instead: a turn already continues its target
# (it answered the tool calls while the target still ran) and did not take it.
STEER_CONTINUED = (
    "The response was continued (its tool calls answered) before this input could be"
    " applied; it is handed back."
)


@dataclass(frozen=True, slots=True)
class SteerRecord:
    """A committed steer and what became of it."""

    id: str
    tenant: str
    target_id: str
    input: str
    state: str  # queued | pending | applied | failed
    successor_id: str | None  # applied: the turn that took its input
    error: str | None  # failed: why, a message


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One server tool call (docs/guarantees.md, journal entry)."""

    call_id: str
    tool: str
    arguments: str
    idempotency_key: str
    state: str  # claimed | completed | errored
    output: str | None
    attempts: int


@dataclass(frozen=True, slots=True)
class ConversationRecord:
    id: str
    tenant: str
    created_at: float
    metadata: str  # JSON text


class Columns(Protocol):
    """A result row read by column name (sqlite3.Row, asyncpg.Record)."""

    def __getitem__(self, key: str) -> Any: ...


def response_record(row: Columns) -> ResponseRecord:
    """A `responses` row as a record, whichever backend read it (SQLite's flags are
    integers, PostgreSQL's booleans)."""
    return ResponseRecord(
        id=row["id"],
        tenant=row["tenant"],
        status=row["status"],
        background=bool(row["background"]),
        created_at=row["created_at"],
        params=row["params"],
        snapshot=row["snapshot"],
        last_seq=row["last_seq"],
        lane=row["lane"],
        conversation_id=row["conversation_id"],
        conversation_upto=row["conversation_upto"],
        previous_response_id=row["previous_response_id"],
        owner=row["owner"],
        epoch=row["epoch"],
        lease_expires_at=row["lease_expires_at"],
        cancel_requested=bool(row["cancel_requested"]),
        recoveries=row["recoveries"],
        step=row["step"],
        steer=row["steer"],
    )


def as_created(inserted: ResponseRecord, new: NewResponse) -> ResponseRecord:
    """A background response inserted already claimed, as its create tells the client of
    it: created and queued, owned by nobody yet (the claim is the runner's news)."""
    return replace(
        inserted,
        status=new.status,
        snapshot=new.snapshot,
        owner=new.owner,
        epoch=0,
        lease_expires_at=new.lease_expires_at,
        conversation_upto=new.conversation_upto,
    )
