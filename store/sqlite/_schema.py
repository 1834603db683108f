"""The schema, as append-only numbered migrations.

Migration N is applied once, in its own transaction, and recorded in `schema_version`.
Never edit a released migration: add a new one.
"""

from __future__ import annotations

MIGRATIONS: tuple[str, ...] = (
    # 1: responses, their input items, the event log, conversations.
    """
    CREATE TABLE responses (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL DEFAULT '',
        status TEXT NOT NULL,
        background INTEGER NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        params TEXT NOT NULL,           -- what the runner needs from the create request (JSON)
        snapshot TEXT NOT NULL,         -- the Response object at the last checkpoint (JSON)
        last_seq INTEGER NOT NULL,      -- last event sequence number the snapshot covers
        lane TEXT NOT NULL,
        conversation_id TEXT,
        conversation_upto INTEGER,      -- conversation items this turn's history includes
        previous_response_id TEXT,
        owner TEXT,                     -- lease holder, NULL when free
        epoch INTEGER NOT NULL DEFAULT 0,
        lease_expires_at REAL,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        recoveries INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX responses_active ON responses (status)
        WHERE status IN ('queued', 'in_progress');
    CREATE INDEX responses_lane ON responses (lane, created_at);

    CREATE TABLE response_items (
        response_id TEXT NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        item_id TEXT NOT NULL,
        item TEXT NOT NULL,
        PRIMARY KEY (response_id, position)
    ) WITHOUT ROWID;

    CREATE TABLE events (
        response_id TEXT NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        type TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (response_id, seq)
    ) WITHOUT ROWID;

    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL DEFAULT '',
        created_at REAL NOT NULL,
        metadata TEXT NOT NULL
    );

    CREATE TABLE conversation_items (
        conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        item_id TEXT NOT NULL,
        item TEXT NOT NULL,
        PRIMARY KEY (conversation_id, position)
    ) WITHOUT ROWID;
    CREATE UNIQUE INDEX conversation_items_id ON conversation_items (conversation_id, item_id);
    """,
    # 2: step records and the tool journal (docs/guarantees.md: step record, journal entry).
    """
    ALTER TABLE responses ADD COLUMN step INTEGER NOT NULL DEFAULT 0;  -- steps checkpointed
    CREATE TABLE steps (
        response_id TEXT NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
        step INTEGER NOT NULL,
        items TEXT NOT NULL,            -- the model's output items for this step (JSON)
        PRIMARY KEY (response_id, step)
    ) WITHOUT ROWID;

    CREATE TABLE journal (
        response_id TEXT NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
        call_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        arguments TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        state TEXT NOT NULL,            -- claimed | completed | errored
        output TEXT,
        attempts INTEGER NOT NULL DEFAULT 1,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (response_id, call_id)
    ) WITHOUT ROWID;
    """,
    # 3: steering requests from later turns of a lane, and idempotency keys (G11).
    """
    ALTER TABLE responses ADD COLUMN steer TEXT;  -- interrupt | rollback, asked by a later turn
    CREATE TABLE idempotency_keys (
        tenant TEXT NOT NULL,
        key TEXT NOT NULL,
        request_hash TEXT NOT NULL,
        response_id TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (tenant, key)
    ) WITHOUT ROWID;
    """,
    # 4: indexes over unfinished responses only, so that lease renewals, the recovery
    # scan, admission and lane checks cost what is running, not what is stored. SQLite
    # uses a partial index only where the query repeats its condition (store/sqlite/_base.py,
    # UNFINISHED) or one of its OR terms.
    """
    DROP INDEX IF EXISTS responses_active;
    DROP INDEX IF EXISTS responses_lane;
    CREATE INDEX responses_unfinished_owner ON responses (owner, status)
        WHERE (status = 'queued' OR status = 'in_progress');
    CREATE INDEX responses_unfinished_tenant ON responses (tenant, status)
        WHERE (status = 'queued' OR status = 'in_progress');
    CREATE INDEX responses_unfinished_lane ON responses (lane)
        WHERE (status = 'queued' OR status = 'in_progress');
    """,
    # 5: the retention purge reads only finished responses old enough to go, and the
    # idempotency keys of exactly those, instead of scanning both tables every hour.
    # The condition is spelled as store/sqlite/_base.py _TERMINAL_SQL, which SQLite must match.
    """
    CREATE INDEX responses_finished ON responses (updated_at)
        WHERE status IN ('completed', 'failed', 'cancelled', 'incomplete');
    CREATE INDEX idempotency_keys_response ON idempotency_keys (response_id);
    """,
    # 6: the journal is keyed by (response, step, call id), not (response, call id): an
    # upstream that repeats call ids across steps (every step's call `call_0`) must not
    # get an earlier step's output reused for a call that never ran. An entry written
    # before takes the first step whose record asks for its call id (0 if none does:
    # workflow steps, whose call ids are unique in their response, all use step 0).
    """
    CREATE TABLE journal_by_step (
        response_id TEXT NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
        step INTEGER NOT NULL,
        call_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        arguments TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        state TEXT NOT NULL,
        output TEXT,
        attempts INTEGER NOT NULL DEFAULT 1,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (response_id, step, call_id)
    ) WITHOUT ROWID;
    INSERT INTO journal_by_step (response_id, step, call_id, tool, arguments,
        idempotency_key, state, output, attempts, created_at, updated_at)
    SELECT j.response_id,
        coalesce((SELECT min(s.step) FROM steps AS s, json_each(s.items) AS c
                  WHERE s.response_id = j.response_id
                    AND json_extract(c.value, '$.call_id') = j.call_id), 0),
        j.call_id, j.tool, j.arguments, j.idempotency_key, j.state, j.output, j.attempts,
        j.created_at, j.updated_at
    FROM journal AS j;
    DROP TABLE journal;
    ALTER TABLE journal_by_step RENAME TO journal;
    """,
    # 7: one row that a readiness check rewrites to learn whether the database can be
    # written (a full disk) when no other write has said so lately (store/sqlite/_health.py).
    """
    CREATE TABLE write_probe (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        written_at REAL NOT NULL
    );
    """,
    # 8: items found by id across a tenant's responses and conversations, for
    # `item_reference` input items (store/sqlite/_items.py): the input and conversation
    # items by their id, and the ids of each finished response's output items (written by
    # the terminal save; the output items themselves stay in the snapshot).
    """
    CREATE INDEX response_items_item ON response_items (item_id);
    CREATE INDEX conversation_items_item ON conversation_items (item_id);
    CREATE TABLE response_outputs (
        response_id TEXT NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
        item_id TEXT NOT NULL,
        PRIMARY KEY (response_id, item_id)
    ) WITHOUT ROWID;
    CREATE INDEX response_outputs_item ON response_outputs (item_id);
    INSERT OR IGNORE INTO response_outputs (response_id, item_id)
    SELECT r.id, CASE WHEN e.type = 'object' THEN json_extract(e.value, '$.id') END AS item_id
    FROM responses AS r, json_each(r.snapshot, '$.output') AS e
    WHERE r.status IN ('completed', 'failed', 'cancelled', 'incomplete')
        AND item_id IS NOT NULL;
    """,
    # 9: steers (`response.steer` over WebSocket, store/sqlite/_steers.py): input queued
    # for a running response's successor, or pending until the client's continuation of
    # a response that waits for client tool output. Insertion order is submission order.
    """
    CREATE TABLE steers (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        target_id TEXT NOT NULL REFERENCES responses (id) ON DELETE CASCADE,
        input TEXT NOT NULL,
        state TEXT NOT NULL,  -- queued | pending | applied | failed
        successor_id TEXT,
        error TEXT,
        created_at REAL NOT NULL,
        settled_at REAL
    );
    CREATE INDEX steers_target ON steers (target_id);
    CREATE INDEX steers_waiting ON steers (target_id) WHERE state = 'queued';
    """,
)

SCHEMA_VERSION = len(MIGRATIONS)
