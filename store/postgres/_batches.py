"""Group commit of event appends: what SQLite's writer does for every write, done here
for the hottest one.

Each append is its own commit otherwise, and a commit costs a WAL flush; a commit that
sent NOTIFY also holds PostgreSQL's notification lock until it is flushed, so such
commits do not even share flushes. Appends of many responses therefore go in batches:
the first append to find no batch committing takes every append queued so far (up to
MAX_BATCH) into one statement, and those that arrive while it commits wait for the next.
One statement does it all: it checks each fence (locking each row FOR SHARE, as a single
append does), checks that each append follows its log's last event, inserts the events of
those that pass, and notifies each; an append that fails (LeaseLost, Conflict) fails
alone, and writes nothing. Appends of one response never share a batch: each waits for
the response's earlier writes first (store/postgres/_database.py).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import Conflict, LeaseLost, StoreError
from .._records import EventRow, Fence
from ._database import Database, Tx
from ._listen import EVENTS

MAX_BATCH = 256

_APPEND_MANY = (
    "WITH a AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::int[],"
    "  $5::int[]) AS a (rid, owner, epoch, first, n)),"
    " f AS (SELECT a.rid, coalesce((SELECT max(seq) FROM events WHERE response_id = a.rid),"
    "  -1) AS last FROM a JOIN responses AS r ON r.id = a.rid AND r.owner = a.owner"
    "  AND r.epoch = a.epoch AND r.status IN ('queued', 'in_progress') FOR SHARE OF r),"
    " ok AS (SELECT a.rid FROM a JOIN f USING (rid) WHERE a.n = 0 OR f.last + 1 = a.first),"
    " ins AS (INSERT INTO events (response_id, seq, type, data)"
    "  SELECT e.rid, e.seq, e.type, e.data"
    "  FROM unnest($6::text[], $7::int[], $8::text[], $9::text[]) AS e (rid, seq, type, data)"
    "  WHERE e.rid IN (SELECT rid FROM ok))"
    " SELECT a.rid, f.last, ok.rid IS NOT NULL AS ok, (SELECT count(*) FROM"
    f"  (SELECT pg_notify('{EVENTS}', $10 || a.rid || ' ' || a.first || ' '"
    "  || a.first + a.n - 1) WHERE ok.rid IS NOT NULL AND a.n > 0) AS n) AS notified"
    " FROM a LEFT JOIN f USING (rid) LEFT JOIN ok USING (rid)"
)


@dataclass(slots=True)
class _Append:
    response_id: str
    fence: Fence
    take: Callable[[], Sequence[EventRow]]  # the rows, taken as the batch is made
    outcome: asyncio.Future[None]
    rows: Sequence[EventRow] = field(default=())


class AppendBatches:
    def __init__(
        self,
        db: Database,
        notify_prefix: str,
        deliver: Callable[[str, Sequence[EventRow]], None],
    ) -> None:
        self._db = db
        self._prefix = notify_prefix  # "<instance> ": the payload's start
        self._deliver = deliver  # this process's listeners, after the commit
        self._queue: list[_Append] = []
        self._lock = asyncio.Lock()  # one batch commits at a time

    async def append(
        self, response_id: str, fence: Fence, take: Callable[[], Sequence[EventRow]]
    ) -> None:
        """Append the rows `take()` gives (called once, as the batch is made) with the
        next batch; return once committed, or raise what refused this append."""
        mine = _Append(response_id, fence, take, asyncio.get_running_loop().create_future())
        self._queue.append(mine)
        async with self._lock:
            if not mine.outcome.done():  # not carried by the batch before
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                await self._commit(batch)
        return mine.outcome.result()

    async def _commit(self, batch: list[_Append]) -> None:
        for each in batch:
            each.rows = each.take()
        try:
            refusals = await self._db.commit(
                "append events", lambda tx: self._write(tx, batch), atomic=False, writes=len(batch)
            )
        except BaseException as exc:
            error = exc if isinstance(exc, Exception) else StoreError("the store closed")
            for each in batch:
                if not each.outcome.done():
                    each.outcome.set_exception(error)
            raise
        for each, refusal in zip(batch, refusals, strict=True):
            if refusal is None:
                each.outcome.set_result(None)
            else:
                each.outcome.set_exception(refusal)

    async def _write(self, tx: Tx, batch: list[_Append]) -> list[StoreError | None]:
        args: list[Any] = [
            [a.response_id for a in batch],
            [a.fence.owner for a in batch],
            [a.fence.epoch for a in batch],
            [a.rows[0].seq if a.rows else 0 for a in batch],
            [len(a.rows) for a in batch],
            [a.response_id for a in batch for _ in a.rows],
            [r.seq for a in batch for r in a.rows],
            [r.type for a in batch for r in a.rows],
            [r.data for a in batch for r in a.rows],
            self._prefix,
        ]
        found = {row["rid"]: row for row in await tx.conn.fetch(_APPEND_MANY, *args)}
        refusals: list[StoreError | None] = []
        for each in batch:
            row = found[each.response_id]
            refusals.append(_refusal(each, row["last"], row["ok"]))
            if refusals[-1] is None and each.rows:
                tx.after_commit(functools.partial(self._deliver, each.response_id, each.rows))
        return refusals


def _refusal(append: _Append, last: int | None, ok: bool) -> StoreError | None:
    if last is None:
        return LeaseLost(f"response {append.response_id} is no longer held by {append.fence}")
    if not ok:
        return Conflict(
            f"response {append.response_id}: event {append.rows[0].seq} does not follow"
            f" event {last}"
        )
    return None
