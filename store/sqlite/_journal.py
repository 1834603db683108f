"""Step records and the tool journal (docs/guarantees.md: step record, journal entry)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from .._errors import Conflict
from .._records import EventRow, Fence, JournalEntry
from ._base import _JOURNAL_COLUMNS, StoreBase, _entry
from ._connection import Tx


class JournalStore(StoreBase):
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

        def op(tx: Tx) -> None:
            last = self._fenced_log_end(tx, response_id, fence)
            self._insert_events(tx, response_id, events, last)
            tx.conn.execute(
                "INSERT INTO steps (response_id, step, items) VALUES (?, ?, ?)",
                (response_id, step, items),
            )

        await self._write("record step", op)

    async def get_step(self, response_id: str, step: int) -> str | None:
        row = await self._readers.fetchone(
            "SELECT items FROM steps WHERE response_id = ? AND step = ?", (response_id, step)
        )
        return str(row[0]) if row else None

    async def journal(self, response_id: str, step: int | None = None) -> list[JournalEntry]:
        """The response's journal entries, or only those of one `step` (a call id names a
        call only within its step: an upstream may repeat call ids across steps)."""
        select = f"SELECT {_JOURNAL_COLUMNS} FROM journal WHERE response_id = ?"
        if step is None:
            rows = await self._readers.fetchall(f"{select} ORDER BY created_at", (response_id,))
        else:
            rows = await self._readers.fetchall(
                f"{select} AND step = ? ORDER BY created_at", (response_id, step)
            )
        return [_entry(r) for r in rows]

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

        def op(tx: Tx) -> None:
            self._check_live_fence(tx, response_id, fence)
            now = time.time()
            tx.conn.execute(
                "INSERT INTO journal (response_id, step, call_id, tool, arguments,"
                " idempotency_key, state, output, attempts, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)",
                (
                    response_id,
                    step,
                    call_id,
                    tool,
                    arguments,
                    idempotency_key,
                    state,
                    output,
                    now,
                    now,
                ),
            )

        await self._write("claim call", op)

    async def reclaim_call(
        self, response_id: str, fence: Fence, call_id: str, *, step: int = 0
    ) -> None:
        """Count one more attempt of an ambiguous call that is safe to run again."""

        def op(tx: Tx) -> None:
            self._check_live_fence(tx, response_id, fence)
            cur = tx.conn.execute(
                "UPDATE journal SET attempts = attempts + 1, updated_at = ?"
                " WHERE response_id = ? AND step = ? AND call_id = ? AND state = 'claimed'",
                (time.time(), response_id, step, call_id),
            )
            if cur.rowcount != 1:
                raise Conflict(f"call {call_id} of step {step} of {response_id} is not claimed")

        await self._write("reclaim call", op)

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

        def op(tx: Tx) -> None:
            self._check_fence(tx, response_id, fence)
            cur = tx.conn.execute(
                "UPDATE journal SET state = ?, output = ?, updated_at = ?"
                " WHERE response_id = ? AND step = ? AND call_id = ? AND state = 'claimed'",
                (state, output, time.time(), response_id, step, call_id),
            )
            if cur.rowcount != 1:
                raise Conflict(f"call {call_id} of step {step} of {response_id} is not claimed")

        await self._write("finish call", op)
