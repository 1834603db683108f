"""Steers (`response.steer`): input a client sent while a response ran, committed before
the client is told it was accepted, then settled once its target has ended: applied to a
successor, left pending for the client's continuation, or failed (docs/guarantees.md,
Steering over WebSocket)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from .._errors import StaleSteers, SteerNotAdded
from .._records import STEER_CONTINUED as CONTINUED
from .._records import NewSteer, SteerRecord
from ._base import _TERMINAL_SQL, StoreBase, _fetchone
from ._connection import Tx

_STEER_COLUMNS = "id, tenant, target_id, input, state, successor_id, error"

# A later turn already continues the target: a response chained on it, or a turn of its
# conversation created after it.
_CONTINUED = (
    "SELECT 1 FROM responses WHERE previous_response_id = ?"
    " OR (? IS NOT NULL AND conversation_id = ? AND created_at > ?) LIMIT 1"
)


def take_steers(
    tx: Tx, successor_id: str, steer_ids: Sequence[str], state: str, continues: str | None
) -> None:
    """Apply `steer_ids` (each still in `state`) to the turn `successor_id` being created in
    this transaction; StaleSteers, and the transaction is rolled back, if one is not. A
    turn that `continues` a response (its previous_response_id) must take every steer
    pending for it: one left behind would never be applied (the response counts as
    continued from now on), so a pending steer it did not take is StaleSteers too."""
    if continues is not None:
        others = _fetchone(
            tx.conn,
            "SELECT count(*) FROM steers WHERE target_id = ? AND state = 'pending'"
            " AND id NOT IN (SELECT value FROM json_each(?))",
            (continues, json.dumps(list(steer_ids) if state == "pending" else [])),
        )
        if others is not None and others[0]:
            raise StaleSteers(f"response {continues} has pending steers this turn did not take")
    if not steer_ids:
        return
    cur = tx.conn.execute(
        "UPDATE steers SET state = 'applied', successor_id = ?, settled_at = ?"
        " WHERE state = ? AND id IN (SELECT value FROM json_each(?))",
        (successor_id, time.time(), state, json.dumps(list(steer_ids))),
    )
    if cur.rowcount != len(steer_ids):
        raise StaleSteers(f"a steer of {list(steer_ids)} is not {state} any more")


def _continued(tx: Tx, target_id: str) -> bool:
    target = _fetchone(
        tx.conn, "SELECT conversation_id, created_at FROM responses WHERE id = ?", (target_id,)
    )
    if target is None:
        return False
    args = (target_id, target[0], target[0], target[1])
    return _fetchone(tx.conn, _CONTINUED, args) is not None


class SteerStore(StoreBase):
    async def add_steer(self, steer: NewSteer, *, max_waiting: int) -> None:
        """Commit a steer, or raise SteerNotAdded and write nothing. A `queued` steer's
        target must be unfinished; the same transaction asks it to stop at its next safe
        point (`steer` = `steer`, unless a stop was asked already). A `pending` steer's
        target must be terminal and not continued yet. At most `max_waiting` steers of one
        target wait in the same state."""

        def op(tx: Tx) -> None:
            target = _fetchone(
                tx.conn,
                "SELECT status FROM responses WHERE id = ? AND tenant = ?",
                (steer.target_id, steer.tenant),
            )
            if target is None:
                raise SteerNotAdded("not_found")
            status = target[0]
            active = status in ("queued", "in_progress")
            if steer.state == "queued" and not active:
                raise SteerNotAdded("ended", status)
            if steer.state == "pending":
                if active:
                    raise SteerNotAdded("running", status)
                if _continued(tx, steer.target_id):
                    raise SteerNotAdded("continued", status)
            waiting = _fetchone(
                tx.conn,
                "SELECT count(*) FROM steers WHERE target_id = ? AND state = ?",
                (steer.target_id, steer.state),
            )
            if waiting is not None and waiting[0] >= max_waiting:
                raise SteerNotAdded("too_many", status)
            now = time.time()
            tx.conn.execute(
                "INSERT INTO steers (id, tenant, target_id, input, state, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (steer.id, steer.tenant, steer.target_id, steer.input, steer.state, now),
            )
            if steer.state == "queued":
                tx.conn.execute(
                    "UPDATE responses SET steer = 'steer', updated_at = ?"
                    " WHERE id = ? AND steer IS NULL",
                    (now, steer.target_id),
                )

        await self._write("add steer", op)

    async def steers_of(self, target_id: str) -> list[SteerRecord]:
        """Every steer of `target_id`, in submission order."""
        rows = await self._readers.fetchall(
            f"SELECT {_STEER_COLUMNS} FROM steers WHERE target_id = ? ORDER BY rowid",
            (target_id,),
        )
        return [SteerRecord(*row) for row in rows]

    async def settle_steers(
        self, target_id: str, steer_ids: Sequence[str], *, state: str, error: str | None = None
    ) -> bool:
        """Move `queued` steers of `target_id` to `pending` or `failed` (with `error`), all
        of them or none: False (nothing written) if one was settled already. Steers that
        would be pending fail instead (`CONTINUED`) if a turn already continues the target:
        that turn did not take them, and none will."""

        def op(tx: Tx) -> None:
            settled, why = state, error
            if state == "pending" and _continued(tx, target_id):
                settled, why = "failed", CONTINUED
            cur = tx.conn.execute(
                "UPDATE steers SET state = ?, error = ?, settled_at = ?"
                " WHERE target_id = ? AND state = 'queued'"
                " AND id IN (SELECT value FROM json_each(?))",
                (settled, why, time.time(), target_id, json.dumps(list(steer_ids))),
            )
            if cur.rowcount != len(steer_ids):
                raise StaleSteers(f"a steer of {target_id} was settled already")

        try:
            await self._write("settle steers", op)
        except StaleSteers:
            return False
        return True

    async def unsettled_steers(self, limit: int = 100) -> list[tuple[str, str]]:
        """(target id, tenant) of finished responses that still have `queued` steers: a
        process ended them and stopped before settling them."""
        rows = await self._readers.fetchall(
            "SELECT DISTINCT s.target_id, s.tenant FROM steers AS s"
            " JOIN responses AS r ON r.id = s.target_id"
            f" WHERE s.state = 'queued' AND r.status IN {_TERMINAL_SQL} LIMIT ?",
            (limit,),
        )
        return [(row[0], row[1]) for row in rows]
