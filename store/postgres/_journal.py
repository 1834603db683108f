"""Step records and the tool journal (docs/guarantees.md: step record, journal entry).

Each write is one statement: the fence is read with its row locked FOR SHARE (a takeover
waits for the write, or the write sees the takeover) and the write is conditional on it.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._errors import Conflict, LeaseLost
from .._records import EventRow, Fence, JournalEntry
from ._base import PostgresBase
from ._database import Tx
from ._sql import JOURNAL_COLUMNS, UNFINISHED, entry

_FENCE = (
    "f AS (SELECT 1 FROM responses WHERE id = $1 AND owner = $2 AND epoch = $3"
    f" AND {UNFINISHED}{{live}} FOR SHARE)"
)
# A body starts only under a lease no other host may take yet, by the database's clock
# (a host that stalled past its lease must not start one).
_LIVE_FENCE = _FENCE.format(
    live=" AND (lease_expires_at IS NULL OR lease_expires_at > statement_timestamp())"
)
_HELD_FENCE = _FENCE.format(live="")

_CLAIM_CALL = (
    f"WITH {_LIVE_FENCE}, ins AS (INSERT INTO journal (response_id, step, call_id, tool, arguments,"
    " idempotency_key, state, output) SELECT $1, $4, $5, $6, $7, $8, $9, $10 FROM f RETURNING 1)"
    " SELECT count(*) FROM ins"
)

_UPDATE_CALL = (
    "WITH {fence}, u AS (UPDATE journal SET {change}, updated_at = statement_timestamp()"
    " FROM f WHERE response_id = $1 AND step = $4 AND call_id = $5 AND state = 'claimed'"
    " RETURNING 1)"
    " SELECT (SELECT count(*) FROM f) AS held, (SELECT count(*) FROM u) AS changed"
)
_RECLAIM = _UPDATE_CALL.format(fence=_LIVE_FENCE, change="attempts = attempts + 1")
_FINISH = _UPDATE_CALL.format(fence=_HELD_FENCE, change="state = $6, output = $7")


class JournalStore(PostgresBase):
    async def record_step(
        self,
        response_id: str,
        fence: Fence,
        step: int,
        items: str,
        *,
        events: Sequence[EventRow] = (),
    ) -> None:
        """Commit a step's model output (its function calls) before any tool of it runs,
        with `events` (those that publish the calls) in the same transaction."""

        async def op(tx: Tx) -> None:
            await self._append_fenced(tx, response_id, fence, events, (step, items))

        await self._write("record step", op, after=(response_id,), atomic=False)

    async def get_step(self, response_id: str, step: int) -> str | None:
        row = await self._db.fetchrow(
            "read step",
            "SELECT items FROM steps WHERE response_id = $1 AND step = $2",
            response_id,
            step,
        )
        return str(row[0]) if row else None

    async def journal(self, response_id: str, step: int | None = None) -> list[JournalEntry]:
        """The response's journal entries, or only those of one `step` (a call id names a
        call only within its step: an upstream may repeat call ids across steps)."""
        select = f"SELECT {JOURNAL_COLUMNS} FROM journal WHERE response_id = $1"
        if step is None:
            rows = await self._db.fetch("read journal", f"{select} ORDER BY ord", response_id)
        else:
            rows = await self._db.fetch(
                "read journal", f"{select} AND step = $2 ORDER BY ord", response_id, step
            )
        return [entry(r) for r in rows]

    async def claim_call(
        self,
        response_id: str,
        fence: Fence,
        *,
        call_id: str,
        tool: str,
        arguments: str,
        idempotency_key: str,
        step: int = 0,
        state: str = "claimed",
        output: str | None = None,
    ) -> None:
        """Write a call's journal entry: `claimed` before its body starts, or directly
        `errored` for a call that will not run. `step` is the step that asked for the call
        (workflow steps, whose call ids are unique in their response, use 0). Conflict if
        the call is journaled already."""
        args = (response_id, fence.owner, fence.epoch, step, call_id, tool, arguments)

        async def op(tx: Tx) -> None:
            written = await tx.conn.fetchval(_CLAIM_CALL, *args, idempotency_key, state, output)
            if not written:
                raise LeaseLost(f"response {response_id} is no longer held by {fence}")

        await self._write("claim call", op, after=(response_id,), atomic=False)

    async def reclaim_call(
        self, response_id: str, fence: Fence, call_id: str, *, step: int = 0
    ) -> None:
        """Count one more attempt of an ambiguous call that is safe to run again."""
        await self._update_call("reclaim call", _RECLAIM, response_id, fence, step, call_id)

    async def finish_call(
        self,
        response_id: str,
        fence: Fence,
        call_id: str,
        *,
        state: str,
        output: str,
        step: int = 0,
    ) -> None:
        """Record a claimed call's output (`completed` or `errored`); it never runs again."""
        await self._update_call(
            "finish call", _FINISH, response_id, fence, step, call_id, state, output
        )

    async def _update_call(
        self,
        what: str,
        sql: str,
        response_id: str,
        fence: Fence,
        step: int,
        call_id: str,
        *more: str,
    ) -> None:
        async def op(tx: Tx) -> None:
            row = await tx.conn.fetchrow(
                sql, response_id, fence.owner, fence.epoch, step, call_id, *more
            )
            assert row is not None
            if not row["held"]:
                raise LeaseLost(f"response {response_id} is no longer held by {fence}")
            if not row["changed"]:
                raise Conflict(f"call {call_id} of step {step} of {response_id} is not claimed")

        await self._write(what, op, after=(response_id,), atomic=False)
