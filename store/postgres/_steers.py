"""Steers (`response.steer`): what store/sqlite/_steers.py does, in PostgreSQL's terms.

A steer and its target's end are decided by the target's row lock: `add_steer` reads the
target FOR UPDATE, so a terminal write either commits first (and the steer sees the end)
or waits for the steer (and the runner's next stop check sees it). Settling takes the
steers' own row locks: of two processes settling one target, the second matches nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._errors import StaleSteers, SteerNotAdded
from .._records import STEER_CONTINUED as CONTINUED
from .._records import NewSteer, SteerRecord
from ._base import PostgresBase, notify_signal
from ._database import Tx
from ._sql import TERMINAL

if TYPE_CHECKING:
    from ._sql import Conn

_STEER_COLUMNS = "id, tenant, target_id, input, state, successor_id, error"

_TARGET = (
    "SELECT status, conversation_id, ord FROM responses WHERE id = $1 AND tenant = $2 FOR UPDATE"
)
# Later by `ord`, the order its lane runs in: a statement's clock is not (two creates
# may read it in one order and commit in the other).
_CONTINUED = (
    "SELECT EXISTS (SELECT 1 FROM responses WHERE previous_response_id = $1"
    " OR ($2::text IS NOT NULL AND conversation_id = $2 AND ord > $3))"
)


async def take_steers(
    conn: Conn, successor_id: str, steer_ids: Sequence[str], state: str, continues: str | None
) -> None:
    """As SQLite's `take_steers`, in the create's transaction. The continued response's
    row is locked FOR SHARE first, in a statement of its own, so that a pending steer
    being added (which holds it FOR UPDATE) either commits before the count below, and is
    counted, or waits, and then finds the response continued."""
    if continues is not None:
        await conn.execute("SELECT 1 FROM responses WHERE id = $1 FOR SHARE", continues)
        others = await conn.fetchval(
            "SELECT count(*) FROM steers WHERE target_id = $1 AND state = 'pending'"
            " AND NOT (id = ANY($2::text[]))",
            continues,
            list(steer_ids) if state == "pending" else [],
        )
        if others:
            raise StaleSteers(f"response {continues} has pending steers this turn did not take")
    if not steer_ids:
        return
    taken = await conn.fetchval(
        "WITH t AS (UPDATE steers SET state = 'applied', successor_id = $1,"
        " settled_at = statement_timestamp() WHERE state = $2 AND id = ANY($3::text[])"
        " RETURNING 1) SELECT count(*) FROM t",
        successor_id,
        state,
        list(steer_ids),
    )
    if taken != len(steer_ids):
        raise StaleSteers(f"a steer of {list(steer_ids)} is not {state} any more")


class SteerStore(PostgresBase):
    async def add_steer(self, steer: NewSteer, *, max_waiting: int) -> None:
        """As SQLite's; a `queued` steer's stop request is signalled to the other hosts."""

        async def op(tx: Tx) -> None:
            target = await tx.conn.fetchrow(_TARGET, steer.target_id, steer.tenant)
            if target is None:
                raise SteerNotAdded("not_found")
            status = target["status"]
            active = status in ("queued", "in_progress")
            if steer.state == "queued" and not active:
                raise SteerNotAdded("ended", status)
            if steer.state == "pending":
                if active:
                    raise SteerNotAdded("running", status)
                continued = await tx.conn.fetchval(
                    _CONTINUED, steer.target_id, target["conversation_id"], target["ord"]
                )
                if continued:
                    raise SteerNotAdded("continued", status)
            waiting = await tx.conn.fetchval(
                "SELECT count(*) FROM steers WHERE target_id = $1 AND state = $2",
                steer.target_id,
                steer.state,
            )
            if waiting >= max_waiting:
                raise SteerNotAdded("too_many", status)
            await tx.conn.execute(
                "INSERT INTO steers (id, tenant, target_id, input, state)"
                " VALUES ($1, $2, $3, $4, $5)",
                steer.id,
                steer.tenant,
                steer.target_id,
                steer.input,
                steer.state,
            )
            if steer.state == "queued":
                await tx.conn.execute(
                    "WITH s AS (UPDATE responses SET steer = 'steer',"
                    " updated_at = statement_timestamp() WHERE id = $1 AND steer IS NULL"
                    f" RETURNING id) SELECT {notify_signal(2, 's.id')} FROM s",
                    steer.target_id,
                    self._signal("stop"),
                )

        await self._write("add steer", op)

    async def steers_of(self, target_id: str) -> list[SteerRecord]:
        rows = await self._db.fetch(
            "steers",
            f"SELECT {_STEER_COLUMNS} FROM steers WHERE target_id = $1 ORDER BY ord",
            target_id,
        )
        return [SteerRecord(*row) for row in rows]

    async def settle_steers(
        self, target_id: str, steer_ids: Sequence[str], *, state: str, error: str | None = None
    ) -> bool:
        async def op(tx: Tx) -> None:
            settled_as, why = state, error
            if state == "pending":
                # The target's row lock orders this against a continuation's create (its
                # FOR SHARE, take_steers): it commits first and is seen here, or it waits
                # and counts these as pending steers it did not take.
                target = await tx.conn.fetchrow(
                    "SELECT conversation_id, ord FROM responses WHERE id = $1 FOR UPDATE",
                    target_id,
                )
                if target is not None and await tx.conn.fetchval(
                    _CONTINUED, target_id, target["conversation_id"], target["ord"]
                ):
                    settled_as, why = "failed", CONTINUED
            settled = await tx.conn.fetchval(
                "WITH t AS (UPDATE steers SET state = $1, error = $2,"
                " settled_at = statement_timestamp() WHERE target_id = $3"
                " AND state = 'queued' AND id = ANY($4::text[]) RETURNING 1)"
                " SELECT count(*) FROM t",
                settled_as,
                why,
                target_id,
                list(steer_ids),
            )
            if settled != len(steer_ids):
                raise StaleSteers(f"a steer of {target_id} was settled already")

        try:
            await self._write("settle steers", op)
        except StaleSteers:
            return False
        return True

    async def unsettled_steers(self, limit: int = 100) -> list[tuple[str, str]]:
        rows = await self._db.fetch(
            "unsettled steers",
            "SELECT DISTINCT s.target_id, s.tenant FROM steers AS s"
            " JOIN responses AS r ON r.id = s.target_id"
            f" WHERE s.state = 'queued' AND r.status IN {TERMINAL} LIMIT $1",
            limit,
        )
        return [(row["target_id"], row["tenant"]) for row in rows]
