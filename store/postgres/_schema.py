"""The PostgreSQL schema, as append-only numbered migrations.

It holds what store/sqlite/_schema.py holds for SQLite, in PostgreSQL's types, with four
differences that the many-hosts rules need:

- `responses.ord` (bigserial) orders a lane first in, first out, as SQLite's rowid does.
  It is drawn while the lane's advisory lock is held (store/postgres/_lanes.py), so within
  a lane it follows commit order.
- Times are `timestamptz` set by the database's clock (`statement_timestamp()`), never a
  host's: leases, expiry and retention compare them with the same clock.
- `journal.ord` orders a response's journal as SQLite's `created_at` did.
- `durable_set_status(snapshot, status)` rewrites a snapshot's top-level `status`
  without re-encoding the rest (jsonb would reorder its keys), as SQLite's `json_set`.

Migration N is applied once, in its own transaction, under an advisory lock (several
hosts may start at once), and recorded in `schema_version`. Never edit a released
migration: add a new one. A database whose version is newer than `len(MIGRATIONS)` is
refused (StoreOpenError).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .._errors import StoreOpenError

if TYPE_CHECKING:
    from ._sql import Conn

log = logging.getLogger("store")

# pg_advisory_xact_lock key of the migration: one host migrates, the others wait.
_MIGRATION_LOCK = 0x44520000

# A snapshot's top-level "status" value when every key before it has a plain value (ours:
# it is the fourth key, recovery/_response.py); any other document goes through jsonb.
_STATUS_PATTERN = (
    r'^(\{(\s*"([^"\\]|\\.)*"\s*:\s*("([^"\\]|\\.)*"|[-+0-9.eE]+|true|false|null)\s*,)*'
    r'\s*"status"\s*:\s*)"([^"\\]|\\.)*"'
)

MIGRATIONS: tuple[str, ...] = (
    # 1: everything SQLite's migrations 1-7 built, at once.
    f"""
    CREATE TABLE responses (
        id text PRIMARY KEY,
        ord bigserial NOT NULL,         -- FIFO order (SQLite's rowid), drawn under the lane lock
        tenant text NOT NULL DEFAULT '',
        status text NOT NULL,
        background boolean NOT NULL,
        created_at timestamptz NOT NULL DEFAULT statement_timestamp(),
        updated_at timestamptz NOT NULL DEFAULT statement_timestamp(),
        params text NOT NULL,           -- what the runner needs from the create request (JSON)
        snapshot text NOT NULL,         -- the Response object at the last checkpoint (JSON)
        last_seq integer NOT NULL,      -- last event sequence number the snapshot covers
        lane text NOT NULL,
        conversation_id text,
        conversation_upto integer,      -- position where this turn's conversation history ends
        previous_response_id text,
        owner text,                     -- lease holder, NULL when free
        epoch bigint NOT NULL DEFAULT 0,
        lease_expires_at timestamptz,   -- the database's clock, never a host's
        cancel_requested boolean NOT NULL DEFAULT false,
        recoveries integer NOT NULL DEFAULT 0,
        step integer NOT NULL DEFAULT 0, -- steps checkpointed
        steer text                      -- interrupt | rollback, asked by a later turn
    ) WITH (fillfactor = 80);           -- room for lease renewals to stay HOT updates
    -- Unfinished responses only: admission, claims, lane heads, the recovery scan, stop
    -- requests and lease renewals cost what is running, not what is stored.
    CREATE INDEX responses_unfinished ON responses (ord)
        WHERE status IN ('queued', 'in_progress');
    CREATE INDEX responses_unfinished_lane ON responses (lane, ord)
        WHERE status IN ('queued', 'in_progress');
    CREATE INDEX responses_unfinished_owner ON responses (owner)
        WHERE status IN ('queued', 'in_progress');
    CREATE INDEX responses_queued_tenant ON responses (tenant) WHERE status = 'queued';
    -- The retention purge reads finished responses by when they last changed.
    CREATE INDEX responses_finished ON responses (updated_at)
        WHERE status IN ('completed', 'failed', 'cancelled', 'incomplete');

    CREATE TABLE response_items (
        response_id text NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
        position integer NOT NULL,
        item_id text NOT NULL,
        item text NOT NULL,
        PRIMARY KEY (response_id, position)
    );

    CREATE TABLE events (
        response_id text NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
        seq integer NOT NULL,
        type text NOT NULL,
        data text NOT NULL,
        PRIMARY KEY (response_id, seq)
    );

    CREATE TABLE steps (
        response_id text NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
        step integer NOT NULL,
        items text NOT NULL,            -- the model's output items for this step (JSON)
        PRIMARY KEY (response_id, step)
    );

    CREATE TABLE journal (
        response_id text NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
        step integer NOT NULL,
        call_id text NOT NULL,
        ord bigserial NOT NULL,         -- the order entries were written in
        tool text NOT NULL,
        arguments text NOT NULL,
        idempotency_key text NOT NULL,
        state text NOT NULL,            -- claimed | completed | errored
        output text,
        attempts integer NOT NULL DEFAULT 1,
        created_at timestamptz NOT NULL DEFAULT statement_timestamp(),
        updated_at timestamptz NOT NULL DEFAULT statement_timestamp(),
        PRIMARY KEY (response_id, step, call_id)
    );

    CREATE TABLE idempotency_keys (
        tenant text NOT NULL,
        key text NOT NULL,
        request_hash text NOT NULL,
        response_id text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT statement_timestamp(),
        PRIMARY KEY (tenant, key)
    );
    CREATE INDEX idempotency_keys_response ON idempotency_keys (response_id);

    CREATE TABLE conversations (
        id text PRIMARY KEY,
        tenant text NOT NULL DEFAULT '',
        created_at double precision NOT NULL,  -- as the API reported it at creation
        metadata text NOT NULL
    );

    CREATE TABLE conversation_items (
        conversation_id text NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        position integer NOT NULL,
        item_id text NOT NULL,
        item text NOT NULL,
        PRIMARY KEY (conversation_id, position)
    );
    CREATE UNIQUE INDEX conversation_items_id ON conversation_items (conversation_id, item_id);

    -- One row that a readiness check rewrites to learn whether the database takes writes.
    CREATE TABLE write_probe (
        id integer PRIMARY KEY CHECK (id = 1),
        written_at timestamptz NOT NULL
    );

    CREATE FUNCTION durable_set_status(snapshot text, status text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
        SELECT CASE WHEN snapshot ~ '{_STATUS_PATTERN}'
            THEN regexp_replace(snapshot, '{_STATUS_PATTERN}', '\\1' || to_json(status)::text)
            ELSE jsonb_set(snapshot::jsonb, '{{status}}', to_jsonb(status))::text END
    $$;
    """,
    # 2: items found by id across a tenant's responses and conversations, for
    # `item_reference` input items (store/postgres/_items.py): the input and conversation
    # items by their id, and the ids of each finished response's output items (written by
    # the terminal save; the output items themselves stay in the snapshot).
    """
    CREATE INDEX response_items_item ON response_items (item_id);
    CREATE INDEX conversation_items_item ON conversation_items (item_id);
    CREATE TABLE response_outputs (
        response_id text NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
        item_id text NOT NULL,
        PRIMARY KEY (response_id, item_id)
    );
    CREATE INDEX response_outputs_item ON response_outputs (item_id);
    -- PostgreSQL's json functions fail on a document holding an escaped NUL: such
    -- snapshots are left out (their output items cannot be referenced) rather than
    -- keeping the server from starting. The terminal save reads the rest in Python.
    INSERT INTO response_outputs (response_id, item_id)
    SELECT r.id, o.value ->> 'id' FROM responses AS r,
        jsonb_array_elements(CASE jsonb_typeof(r.snapshot::jsonb -> 'output') WHEN 'array'
            THEN r.snapshot::jsonb -> 'output' ELSE '[]'::jsonb END) AS o (value)
    WHERE r.status IN ('completed', 'failed', 'cancelled', 'incomplete')
        AND strpos(r.snapshot, '\\u0000') = 0
        AND o.value ->> 'id' IS NOT NULL
    ON CONFLICT DO NOTHING;
    """,
    # 3: steers (`response.steer` over WebSocket, store/postgres/_steers.py): input queued
    # for a running response's successor, or pending until the client's continuation of
    # a response that waits for client tool output. `ord` is submission order.
    """
    CREATE TABLE steers (
        id text PRIMARY KEY,
        ord bigserial NOT NULL,
        tenant text NOT NULL,
        target_id text NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
        input text NOT NULL,
        state text NOT NULL,  -- queued | pending | applied | failed
        successor_id text,
        error text,
        created_at timestamptz NOT NULL DEFAULT statement_timestamp(),
        settled_at timestamptz
    );
    CREATE INDEX steers_target ON steers (target_id, ord);
    CREATE INDEX steers_waiting ON steers (target_id) WHERE state = 'queued';
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)


async def migrate(conn: Conn) -> int:
    """Apply the migrations this database lacks; return the version it now has. Raise
    StoreOpenError if the database was migrated by a newer server."""
    async with conn.transaction():  # hosts starting together: one creates it
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version integer PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT statement_timestamp())"
        )
        current = await _version(conn)
    _refuse_newer(current)
    for version in range(current + 1, len(MIGRATIONS) + 1):
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
            if await _version(conn) >= version:
                continue  # another host applied it meanwhile
            await conn.execute(MIGRATIONS[version - 1])
            await conn.execute("INSERT INTO schema_version (version) VALUES ($1)", version)
        log.info("store migrated to schema version %d", version)
    return len(MIGRATIONS)


async def _version(conn: Conn) -> int:
    value = await conn.fetchval("SELECT max(version) FROM schema_version")
    return int(value) if value is not None else 0


def _refuse_newer(current: int) -> None:
    if current > len(MIGRATIONS):
        raise StoreOpenError(
            f"the database has schema version {current}, newer than this server knows "
            f"({len(MIGRATIONS)}); run a newer durable-responses"
        )
