"""The PostgreSQL store: what `open_postgres_store` gives. Its public methods, their
signatures and their meaning are SQLite's (store/sqlite/_store.py); this module adds the reads,
health checks and retention, and the classes it derives from hold the rest."""

from __future__ import annotations

import time

from .._records import EventRow, ItemRow, ResponseRecord
from ._base import Order
from ._conversations import ConversationStore
from ._database import Tx
from ._items import ItemStore
from ._journal import JournalStore
from ._runs import RunStore
from ._sql import RESPONSE_COLUMNS, TERMINAL, UNFINISHED, response, response_columns
from ._steers import SteerStore

__all__ = ["PostgresStore"]

PROBE_AFTER = 5.0  # seconds without a write after which readiness writes to find out

# The responses that the previous_response_id chains of unfinished responses reach.
_LIVE_CHAINS = (
    "live_chain (id) AS ("
    f" SELECT previous_response_id FROM responses WHERE {UNFINISHED}"
    "  AND previous_response_id IS NOT NULL"
    " UNION SELECT r.previous_response_id FROM live_chain AS c JOIN responses AS r"
    "  ON r.id = c.id WHERE r.previous_response_id IS NOT NULL)"
)

# One batch of the retention purge, by the index on finished responses' `updated_at`;
# rows another host is purging are skipped. $1 is the retention age in seconds.
_PURGE = (
    f"WITH RECURSIVE {_LIVE_CHAINS},"
    f" doomed AS (SELECT id FROM responses WHERE status IN {TERMINAL}"
    "  AND updated_at < statement_timestamp() - make_interval(secs => $1)"
    "  AND NOT EXISTS (SELECT 1 FROM live_chain WHERE live_chain.id = responses.id)"
    "  ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED),"
    # A key lives as long as its response (G11: keys expire with its retention).
    " keys AS (DELETE FROM idempotency_keys WHERE response_id IN (SELECT id FROM doomed)"
    "  RETURNING 1),"
    " gone AS (DELETE FROM responses WHERE id IN (SELECT id FROM doomed) RETURNING 1)"
    " SELECT (SELECT count(*) FROM gone) AS gone, (SELECT count(*) FROM keys) AS keys"
)

_CHAIN = (
    "WITH RECURSIVE chain (id, depth) AS ("
    " SELECT id, 0 FROM responses WHERE id = $1 AND tenant = $2"
    " UNION ALL SELECT r.previous_response_id, c.depth + 1"
    "  FROM chain AS c JOIN responses AS r ON r.id = c.id"
    "  WHERE r.previous_response_id IS NOT NULL)"
    f" SELECT {response_columns('r.')}, coalesce((SELECT array_agg(i.item ORDER BY i.position)"
    "  FROM response_items AS i WHERE i.response_id = r.id), '{}') AS items"
    " FROM chain AS c JOIN responses AS r ON r.id = c.id AND r.tenant = $2"
    " ORDER BY c.depth DESC"
)


class PostgresStore(ConversationStore, ItemStore, JournalStore, RunStore, SteerStore):
    """Durable state of responses, events and conversations in one PostgreSQL database,
    shared by any number of server processes on any number of hosts.

    Each write is a transaction (most are one statement) on a pooled connection; writes
    of one response run in the order they were submitted. `on_events_committed`
    listeners get (response id, rows) after each commit that added events, this
    process's at once and other processes' through LISTEN/NOTIFY.
    """

    async def purge(self, before: float, batch: int = 500) -> tuple[int, int]:
        """Delete finished responses last changed before `before` (their items, events,
        steps and journal go with them) and their idempotency keys, `batch` responses per
        transaction so that other writes are not held up behind a large backlog. Running
        and queued responses are never touched, nor any response that the
        previous_response_id chain of one of them reaches: a turn that has yet to run or
        to be recovered rebuilds its history from that chain (G5). Returns (responses,
        keys) deleted.

        `before` is read as an age (the host's now minus `before`), measured back from
        the database's clock."""
        age = self.host_clock() - before

        async def op(tx: Tx) -> tuple[int, int]:
            row = await tx.conn.fetchrow(_PURGE, age, batch)
            assert row is not None
            return int(row["gone"]), int(row["keys"])

        responses = keys = 0
        while True:
            gone, keys_gone = await self._write("purge", op, atomic=False)
            responses, keys = responses + gone, keys + keys_gone
            if gone < batch:
                return responses, keys

    async def delete_response(self, response_id: str, tenant: str) -> bool:
        async def op(tx: Tx) -> bool:
            gone = await tx.conn.fetchval(
                "WITH d AS (DELETE FROM responses WHERE id = $1 AND tenant = $2"
                f" AND status IN {TERMINAL} RETURNING id),"
                " k AS (DELETE FROM idempotency_keys WHERE response_id IN (SELECT id FROM d))"
                " SELECT count(*) FROM d",
                response_id,
                tenant,
            )
            return bool(gone)

        return await self._write("delete response", op, atomic=False)

    # -- responses: reads -------------------------------------------------------------

    async def get_response(self, response_id: str, tenant: str) -> ResponseRecord | None:
        row = await self._db.fetchrow(
            "read response",
            f"SELECT {RESPONSE_COLUMNS} FROM responses WHERE id = $1 AND tenant = $2",
            response_id,
            tenant,
        )
        return response(row) if row else None

    async def response_snapshot(self, response_id: str, tenant: str) -> tuple[str, bool] | None:
        """(snapshot, background) of a response: what a GET needs, without the rest."""
        row = await self._db.fetchrow(
            "read snapshot",
            "SELECT snapshot, background FROM responses WHERE id = $1 AND tenant = $2",
            response_id,
            tenant,
        )
        return (row[0], row[1]) if row else None

    async def read_events(self, response_id: str, after: int, limit: int = 1000) -> list[EventRow]:
        rows = await self._db.fetch(
            "read events",
            "SELECT seq, type, data FROM events WHERE response_id = $1 AND seq > $2"
            " ORDER BY seq LIMIT $3",
            response_id,
            after,
            limit,
        )
        return [EventRow(r[0], r[1], r[2]) for r in rows]

    async def _read_span(self, response_id: str, first: int, last: int) -> list[EventRow]:
        """Events `first` to `last`: what another process's notification announced."""
        return await self.read_events(response_id, first - 1, last - first + 1)

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
        rows = await self._db.fetch("read chain", _CHAIN, response_id, tenant)
        return [(response(r), list(r["items"])) for r in rows]

    # -- health -----------------------------------------------------------------------

    async def ping(self) -> None:
        """Raise StoreError unless the database answers a read."""
        await self._db.fetch("ping", "SELECT 1")

    def check_file(self) -> None:
        """SQLite only (a database file deleted under the open store): nothing to check."""

    async def check_writable(self) -> None:
        """Raise StoreUnavailable unless the store can be written now: when the last
        write failed for want of the database (or none ran for PROBE_AFTER seconds), a
        probe write commits now. So an outage shows here, and so does its end, with no
        request having to fail first."""
        idle = time.monotonic() - self._db.committed_at >= PROBE_AFTER
        if self._db.unavailable is None and not idle:
            return

        async def op(tx: Tx) -> None:
            await tx.conn.execute(
                "INSERT INTO write_probe (id, written_at) VALUES (1, statement_timestamp())"
                " ON CONFLICT (id) DO UPDATE SET written_at = excluded.written_at"
            )

        await self._write("write probe", op, atomic=False)
