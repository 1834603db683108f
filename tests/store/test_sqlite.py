"""The SQLite store: migrations, start-up errors, group commit and fenced writes."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sqlite3
import time
from pathlib import Path

import pytest

from store import (
    SCHEMA_VERSION,
    Admission,
    Conflict,
    EventRow,
    Fence,
    LeaseLost,
    NewResponse,
    SQLiteStore,
    StoreError,
    StoreOpenError,
    open_store,
)
from store.sqlite._connection import migrate
from store.sqlite._schema import MIGRATIONS


def new_response(response_id: str, *, owner: str | None = None) -> NewResponse:
    return NewResponse(
        id=response_id,
        tenant="",
        status="in_progress" if owner else "queued",
        background=owner is None,
        created_at=time.time(),
        params="{}",
        snapshot='{"status": "queued"}',
        last_seq=-1,
        lane=response_id,
        conversation_id=None,
        conversation_upto=None,
        previous_response_id=None,
        owner=owner,
        lease_expires_at=None,
    )


def rows(*seqs: int) -> list[EventRow]:
    return [EventRow(seq, "response.output_text.delta", f'{{"n":{seq}}}') for seq in seqs]


async def test_a_store_of_an_older_schema_opens_and_migrates(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        migrate(conn, MIGRATIONS[:1])
        conn.execute(
            "INSERT INTO responses (id, status, background, created_at, updated_at, params,"
            " snapshot, last_seq, lane)"
            " VALUES ('resp_old', 'completed', 1, 0, 0, '{}', '{}', -1, 'resp_old')"
        )

    async with open_store(path) as store:
        record = await store.get_response("resp_old", "")
        assert record is not None and record.status == "completed"
    with sqlite3.connect(path) as check:
        assert check.execute("SELECT max(version) FROM schema_version").fetchone() == (
            SCHEMA_VERSION,
        )


async def test_a_store_from_a_newer_server_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    async with open_store(path):
        pass
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION + 5,))

    with pytest.raises(StoreOpenError, match="newer than this server"):
        async with open_store(path):
            pass


@pytest.mark.parametrize(
    "prepare",
    [
        pytest.param(lambda p: p.write_bytes(b"this is not a database" * 100), id="corrupt-file"),
        pytest.param(lambda p: p.mkdir(), id="path-is-a-directory"),
        pytest.param(lambda p: p.parent.joinpath("blocker").write_text("x"), id="parent-is-file"),
    ],
)
async def test_an_unusable_database_file_gives_a_store_open_error(tmp_path: Path, prepare) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "db.sqlite"
    prepare(path)
    if (tmp_path / "blocker").exists():
        path = tmp_path / "blocker" / "db.sqlite"

    with pytest.raises(StoreOpenError, match=str(path.name)):
        async with open_store(path):
            pass


@pytest.fixture
async def store(tmp_path: Path):  # type: ignore[no-untyped-def]
    async with open_store(tmp_path / "store.db") as opened:
        yield opened


async def test_concurrent_appends_share_commits_and_all_land(store: SQLiteStore) -> None:
    await store.create_response(new_response("resp_a", owner="me"), [], [])
    fence = Fence("me", 1)

    await asyncio.gather(*(store.append_events("resp_a", fence, rows(i)) for i in range(200)))

    events = await store.read_events("resp_a", -1, limit=1000)
    assert [e.seq for e in events] == list(range(200))


async def test_a_failing_write_in_a_batch_does_not_undo_its_neighbours(
    store: SQLiteStore,
) -> None:
    await store.create_response(new_response("resp_b", owner="me"), [], [])
    fence = Fence("me", 1)
    await store.append_events("resp_b", fence, rows(0))

    first = store.append_events("resp_b", fence, rows(1))
    duplicate = store.append_events("resp_b", fence, rows(0))
    third = store.append_events("resp_b", fence, rows(2))
    results = await asyncio.gather(first, duplicate, third, return_exceptions=True)

    assert results[0] is None and results[2] is None
    assert isinstance(results[1], Conflict)
    assert [e.seq for e in await store.read_events("resp_b", -1)] == [0, 1, 2]


async def test_writes_with_a_stale_epoch_are_refused(store: SQLiteStore) -> None:
    await store.create_response(new_response("resp_c"), [], [])
    first = await store.claim("resp_c", "one", lease_ttl=10)
    assert first is not None and first.epoch == 1

    with pytest.raises(LeaseLost):
        await store.append_events("resp_c", Fence("one", 0), rows(0))
    with pytest.raises(LeaseLost):
        await store.save_snapshot(
            "resp_c", Fence("other", 1), snapshot="{}", last_seq=0, status="completed"
        )
    assert await store.read_events("resp_c", -1) == []


async def test_the_event_log_refuses_a_gap_and_a_snapshot_ahead_of_it(
    store: SQLiteStore,
) -> None:
    """Writes queued behind a failed append must not commit past it (G7): the log stays
    gapless and a snapshot never covers events the log does not hold."""
    await store.create_response(new_response("resp_g", owner="me"), [], [])
    fence = Fence("me", 1)
    await store.append_events("resp_g", fence, rows(0, 1))

    with pytest.raises(Conflict):
        await store.append_events("resp_g", fence, rows(3))
    with pytest.raises(Conflict):
        await store.save_snapshot(
            "resp_g", fence, snapshot="{}", last_seq=2, status="in_progress", logged=True
        )
    await store.save_snapshot(
        "resp_g",
        fence,
        snapshot="{}",
        last_seq=3,
        status="in_progress",
        events=rows(2, 3),
        logged=True,
    )

    assert [row.seq for row in await store.read_events("resp_g", -1)] == [0, 1, 2, 3]
    record = await store.get_response("resp_g", "")
    assert record is not None and record.last_seq == 3


async def test_a_write_after_the_store_closed_fails_instead_of_hanging(tmp_path: Path) -> None:
    async with open_store(tmp_path / "closed.db") as store:
        await store.create_response(new_response("resp_z"), [], [])

    with pytest.raises(StoreError, match="closed"):
        await asyncio.wait_for(store.request_cancel("resp_z"), 10)


async def test_a_queued_response_is_claimed_by_exactly_one_owner(store: SQLiteStore) -> None:
    await store.create_response(new_response("resp_d"), [], [])

    claims = await asyncio.gather(*(store.claim("resp_d", f"owner{i}", 10) for i in range(5)))

    winners = [c for c in claims if c is not None]
    assert len(winners) == 1
    assert winners[0].status == "in_progress"


async def test_what_runs_per_turn_and_per_heartbeat_never_scans_all_stored_responses(
    tmp_path: Path,
) -> None:
    """Admission, claims, lease renewals, cancel checks, the recovery scan, lane checks
    and the retention purge must cost what is running (or expiring), not what is stored:
    a full scan of a million stored responses stalls every write behind it."""
    path = tmp_path / "plans.db"
    statements: list[str] = []
    async with open_store(path) as store:
        store._writer._conn.set_trace_callback(statements.append)
        store._readers._direct.set_trace_callback(statements.append)
        for conn in store._readers.conns:
            await conn.set_trace_callback(statements.append)
        limits = Admission(max_queued=10, max_queued_tenant=10)
        await store.create_response(new_response("resp_a"), [], [], limits)
        await store.create_response(new_response("resp_b"), [], [], limits, ("me", 10.0))
        assert await store.claim("resp_a", "me", 10.0) is not None
        await asyncio.wrap_future(store.renew_leases([("resp_a", Fence("me", 1))], 10.0))
        await store.stop_requests("me")
        await store.orphans()
        await store.lane_busy("resp_a")
        await store.is_lane_head("resp_a")
        await store.next_in_lane("resp_a")
        await store.count_queued()
        await store.append_events("resp_a", Fence("me", 1), rows(0))
        await store.save_snapshot(
            "resp_a", Fence("me", 1), snapshot="{}", last_seq=0, status="completed", terminal=True
        )
        await store.purge(before=time.time() - 86400)
        assert await store.delete_response("resp_a", "")
    verbs = ("SELECT", "UPDATE", "INSERT", "DELETE")
    queries = [s for s in statements if s.split()[0].upper() in verbs]
    assert len(queries) >= 12

    with contextlib.closing(sqlite3.connect(path)) as conn:
        for sql in queries:
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql)]
            full_scans = [step for step in plan if re.fullmatch(r"SCAN \w+", step)]
            assert not full_scans, f"{sql}\n  scans: {full_scans}"
