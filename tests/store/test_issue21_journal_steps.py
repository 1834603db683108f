"""Issue 21: the journal is keyed by (response, step, call id). An upstream that repeats
call ids across steps (every step's call `call_0`) got the first step's output reused
for a later step's call that never ran. Migration 6 re-keys the journal; an entry
written before takes the first step whose record asks for its call id."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

from store import Admission, Fence, SQLiteStore, open_store
from store.sqlite._connection import migrate
from store.sqlite._schema import MIGRATIONS
from tests.store.test_sqlite import new_response

FENCE = Fence("me", 1)


async def _claim(store: SQLiteStore, step: int, call_id: str, key: str) -> None:
    await store.claim_call(
        "resp_1", FENCE, call_id=call_id, tool="t", arguments="{}", idempotency_key=key, step=step
    )


async def test_a_call_id_names_a_call_only_within_its_step(tmp_path: Path) -> None:
    async with open_store(tmp_path / "r.db") as store:
        await store.create_response(new_response("resp_1", owner="me"), [], [], Admission())
        await _claim(store, 0, "call_0", "k0")
        await _claim(store, 1, "call_0", "k1")  # the same id, another step: another call

        await store.finish_call("resp_1", FENCE, "call_0", state="completed", output="one", step=1)

        [first] = await store.journal("resp_1", 0)
        [second] = await store.journal("resp_1", 1)
        assert (first.idempotency_key, first.state) == ("k0", "claimed")
        assert (second.idempotency_key, second.state, second.output) == ("k1", "completed", "one")
        assert len(await store.journal("resp_1")) == 2


async def test_migration_6_gives_each_entry_the_first_step_that_asked_for_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        migrate(conn, MIGRATIONS[:5])
        conn.execute(
            "INSERT INTO responses (id, status, background, created_at, updated_at, params,"
            " snapshot, last_seq, lane) VALUES ('resp_1', 'in_progress', 1, 0, 0, '{}', '{}',"
            " -1, 'resp_1')"
        )
        steps = {0: ["call_a"], 1: ["call_b", "call_a"], 2: ["call_c"]}
        for step, ids in steps.items():
            items = [{"type": "function_call", "call_id": i, "name": "t"} for i in ids]
            conn.execute(
                "INSERT INTO steps (response_id, step, items) VALUES ('resp_1', ?, ?)",
                (step, json.dumps(items)),
            )
        for n, call_id in enumerate(["call_a", "call_b", "call_c", "step_1_wf"]):
            conn.execute(
                "INSERT INTO journal (response_id, call_id, tool, arguments, idempotency_key,"
                " state, output, attempts, created_at, updated_at)"
                " VALUES ('resp_1', ?, 't', '{}', ?, 'completed', 'out', 1, ?, ?)",
                (call_id, f"k_{call_id}", n, n),
            )

    async with open_store(path) as store:
        by_step = {s: [e.call_id for e in await store.journal("resp_1", s)] for s in range(3)}

    # call_a was first asked for in step 0 (step 1 reused it, the old bug); a workflow
    # step's entry has no step record and takes 0.
    assert by_step == {0: ["call_a", "step_1_wf"], 1: ["call_b"], 2: ["call_c"]}
