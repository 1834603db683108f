"""What only the PostgreSQL store has (issue 15): start-up errors and migrations, other
processes' commits and signals through LISTEN/NOTIFY, a lost connection, retried
serialization failures, the three rules that SQLite kept only by having one writer (each
raced from many connections), and time taken from the database's clock.

The contract both backends share is tests/store/test_contract.py. A "host" here is a
store of its own (its own pool, listener and lease connection) on the same database.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import asyncpg
import pytest

from store import (
    Admission,
    Conflict,
    ConversationRecord,
    Fence,
    ItemRow,
    LeaseLost,
    StopRequested,
    StoreOpenError,
    StoreUnavailable,
    StoreUnreachableError,
    TooManyQueued,
)
from store.postgres import PostgresStore, open_postgres_store
from store.postgres._database import Tx
from store.postgres._lanes import TENANT_SLACK
from store.postgres._leases import RENEW
from store.postgres._schema import SCHEMA_VERSION
from store.postgres._sql import TENANT_LOCK
from tests.store.test_contract import claimed, end, in_lane
from tests.store.test_sqlite import new_response, rows
from tests.support.postgres import ThrowawayPostgres, free_port
from tests.support.tcp_proxy import TcpProxy

DAY = 86400.0
HOSTS = 5  # stores on one database, 10 pooled connections each


@pytest.fixture
async def hosts(postgres_url: str) -> AsyncIterator[list[PostgresStore]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(open_postgres_store(postgres_url, pool_size=10))
            for _ in range(HOSTS)
        ]


async def eventually(predicate, within: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def execute(url: str, sql: str, *args: object) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


# -- opening ------------------------------------------------------------------------------


async def test_an_unreachable_server_is_a_clear_open_error_without_the_password() -> None:
    url = f"postgresql://durable:s3cret@127.0.0.1:{free_port()}/nowhere"

    with pytest.raises(StoreUnreachableError, match="cannot reach the PostgreSQL store") as refused:
        async with open_postgres_store(url):
            pass

    assert "s3cret" not in str(refused.value)
    assert "127.0.0.1" in str(refused.value)


@pytest.mark.parametrize(
    ("user", "database"),
    [("durable", "no_such_database"), ("no_such_role", "postgres")],
    ids=["missing database", "unknown role"],
)
async def test_a_server_that_answers_but_refuses_is_an_open_error_not_unreachable(
    postgres: ThrowawayPostgres, user: str, database: str
) -> None:
    url = f"postgresql://{user}@127.0.0.1:{postgres.port}/{database}"

    with pytest.raises(StoreOpenError, match="does not exist") as refused:
        async with open_postgres_store(url):
            pass

    assert not isinstance(refused.value, StoreUnreachableError)


async def test_tls_the_server_does_not_speak_is_an_open_error_not_unreachable(
    postgres_url: str,
) -> None:
    """The throwaway server has no TLS: `sslmode=require` fails the same way at every
    try, so the server must exit on it rather than wait for it forever."""
    url = postgres_url + ("&" if "?" in postgres_url else "?") + "sslmode=require"

    with pytest.raises(StoreOpenError) as refused:
        async with open_postgres_store(url):
            pass

    assert not isinstance(refused.value, StoreUnreachableError), refused.value


async def test_a_schema_newer_than_the_code_is_refused(postgres_url: str) -> None:
    async with open_postgres_store(postgres_url):
        pass
    await execute(
        postgres_url, "INSERT INTO schema_version (version) VALUES ($1)", SCHEMA_VERSION + 5
    )

    with pytest.raises(StoreOpenError, match="newer than this server"):
        async with open_postgres_store(postgres_url):
            pass


async def test_hosts_starting_together_migrate_once(postgres_url: str) -> None:
    async def open_and_close() -> None:
        async with open_postgres_store(postgres_url, pool_size=2) as store:
            await store.ping()

    await asyncio.gather(*(open_and_close() for _ in range(4)))

    conn = await asyncpg.connect(postgres_url)
    try:
        versions = [r[0] for r in await conn.fetch("SELECT version FROM schema_version ORDER BY 1")]
    finally:
        await conn.close()
    assert versions == list(range(1, SCHEMA_VERSION + 1))


async def test_a_store_closed_while_its_listener_connects_closes(postgres_url: str) -> None:
    """Regression: on Python 3.11, asyncio.wait_for can swallow a cancel that arrives as
    its awaitable finishes. The listener connected inside wait_for, missed the cancel of
    the store's close, and listened on: the close waited forever (within the first ten
    quick open-and-close cycles, in three runs of three). It now uses asyncio.timeout,
    and lets a connect finish (and closes it) before it honours a cancel."""
    for n in range(30):
        async with asyncio.timeout(20), open_postgres_store(postgres_url, pool_size=1):
            await asyncio.sleep(0.001 * (n % 20))


# -- other processes' commits -------------------------------------------------------------


async def test_events_another_host_commits_reach_listeners_at_once(
    hosts: list[PostgresStore],
) -> None:
    """Another host's commits reach this host's listeners through NOTIFY, each once and in
    order, with no polling at all (the store never polls). How fast is the bench's
    question (`python -m bench`, follower latency), not a pass/fail test's."""
    writer, follower = hosts[0], hosts[1]
    heard: list[tuple[str, list[int], float]] = []
    mine: list[list[int]] = []
    follower.on_events_committed(
        lambda rid, ev: heard.append((rid, [e.seq for e in ev], time.perf_counter()))
    )
    writer.on_events_committed(lambda rid, ev: mine.append([e.seq for e in ev]))
    await eventually(lambda: follower.listening)
    fence = await claimed(writer, "resp_a")

    for seq in range(20):
        await writer.append_events("resp_a", fence, rows(seq))
        await eventually(lambda n=seq: len(heard) > n)

    assert [seqs for _, seqs, _ in heard] == [[n] for n in range(20)]
    assert mine == [[n] for n in range(20)]  # its own commits once, not again by NOTIFY


async def test_stop_requests_ends_and_hand_overs_signal_other_hosts(
    hosts: list[PostgresStore],
) -> None:
    driver, other = hosts[0], hosts[1]
    signals: list[tuple[str, str]] = []
    driver.on_signal(lambda kind, key: signals.append((kind, key)))
    await eventually(lambda: driver.listening)
    one = await claimed(driver, "resp_1")
    two = await claimed(driver, "resp_2")
    await other.create_response(in_lane("resp_3", "resp_1"), [], [])

    await other.request_cancel("resp_1")
    await eventually(lambda: ("stop", "resp_1") in signals)
    await other.create_response(in_lane("resp_4", "resp_2"), [], [], Admission(steer="interrupt"))
    await eventually(lambda: ("stop", "resp_2") in signals)

    waiter: list[tuple[str, str]] = []
    other.on_signal(lambda kind, key: waiter.append((kind, key)))
    await eventually(lambda: other.listening)
    await end(driver, "resp_1", one, "cancelled")
    await eventually(lambda: ("lane", "resp_1") in waiter)
    await driver.release_lease("resp_2", two)
    await eventually(lambda: ("free", "resp_2") in waiter)


async def test_the_listener_connects_again_when_its_connection_is_killed(
    hosts: list[PostgresStore], postgres_url: str
) -> None:
    writer, follower = hosts[0], hosts[1]
    heard: list[int] = []
    follower.on_events_committed(lambda rid, ev: heard.extend(e.seq for e in ev))
    await eventually(lambda: follower.listening)
    fence = await claimed(writer, "resp_a")

    # Every connection of both hosts: the pools open new ones, the listener reconnects.
    await execute(
        postgres_url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = 'durable-responses'",
    )
    await eventually(lambda: not follower.listening, within=15)
    await eventually(lambda: follower.listening, within=15)
    await writer.append_events("resp_a", fence, rows(0))

    await eventually(lambda: heard == [0])


# -- plans ------------------------------------------------------------------------------------


async def test_what_runs_per_turn_and_per_heartbeat_never_scans_a_table(postgres_url: str) -> None:
    """Admission, claims, lease renewals, cancel checks, the recovery scan, lane checks
    and the retention purge must cost what is running (or expiring), not what is stored:
    with sequential scans disabled, no plan of theirs may still need one (PostgreSQL
    would choose one on tables this small anyway)."""
    statements: list[tuple[str, tuple[object, ...]]] = []
    async with open_postgres_store(postgres_url, pool_size=1) as store:
        async with store._db.pool.acquire() as conn:
            conn.add_query_logger(lambda q: statements.append((q.query, tuple(q.args))))
        limits = Admission(max_queued=10, max_queued_tenant=10)
        await store.create_response(new_response("resp_a"), [], rows(0), limits)
        await store.create_response(new_response("resp_b"), [], [], limits, ("me", 10.0))
        assert await store.claim("resp_a", "me", 10.0) is not None
        await store.stop_requests("me")
        await store.orphans()
        await store.recover("resp_a", "other", 10.0)
        await store.lane_busy("resp_a")
        await store.is_lane_head("resp_a")
        await store.next_in_lane("resp_a")
        await store.count_queued()
        await store.request_cancel("resp_b")
        await store.append_events("resp_a", Fence("me", 1), rows(1))
        await store.save_snapshot(
            "resp_a", Fence("me", 1), snapshot="{}", last_seq=1, status="completed", terminal=True
        )
        await store.release_lease("resp_b", Fence("me", 1))
        await store.purge(before=time.time() - DAY)
        assert await store.delete_response("resp_a", "")
    verbs = ("SELECT", "UPDATE", "INSERT", "DELETE", "WITH")
    queries = [
        (q, a)
        for q, a in statements
        if q.split()[0].upper() in verbs and "pg_catalog" not in q  # not asyncpg's own
    ]
    queries.append((RENEW, (["resp_b"], ["me"], [1], 10.0)))
    assert len(queries) >= 15

    conn = await asyncpg.connect(postgres_url)
    try:
        await conn.execute("SET enable_seqscan = off")
        for sql, args in queries:
            plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, *args))
            assert "Seq Scan" not in plan, f"{sql}\n{plan}"
    finally:
        await conn.close()


# -- failures -----------------------------------------------------------------------------


async def test_a_lost_connection_is_store_unavailable_until_it_comes_back(
    postgres_url: str,
) -> None:
    """Mid-run, the database goes away (a network partition, a fail-over): every
    operation raises StoreUnavailable (the server answers 503 and turns pause), never a
    raw driver error, and the store works again once the database is back."""
    parts = urlsplit(postgres_url)
    proxy = TcpProxy(parts.hostname or "", parts.port or 0)
    await proxy.start()
    url = parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}").geturl()
    try:
        async with open_postgres_store(url) as store:
            fence = await claimed(store, "resp_a")
            await store.append_events("resp_a", fence, rows(0))

            proxy.cut()
            with pytest.raises(StoreUnavailable):
                await store.append_events("resp_a", fence, rows(1))
            with pytest.raises(StoreUnavailable):
                await store.get_response("resp_a", "")
            with pytest.raises(StoreUnavailable):
                await store.create_response(new_response("resp_b"), [], [])
            with pytest.raises(StoreUnavailable):
                await store.check_writable()
            with pytest.raises(StoreUnavailable):
                await asyncio.wrap_future(store.renew_leases([("resp_a", fence)], 30))

            proxy.restore()
            await store.check_writable()
            assert await asyncio.wrap_future(store.renew_leases([("resp_a", fence)], 30)) == [
                "resp_a"
            ]
            await store.append_events("resp_a", fence, rows(1))
            assert [e.seq for e in await store.read_events("resp_a", -1)] == [0, 1]
    finally:
        await proxy.close()


async def test_a_deadlocked_transaction_is_retried(postgres_url: str) -> None:
    """Two transactions that lock two rows in opposite orders deadlock; PostgreSQL
    aborts one (40P01) and the store runs it again, so both commit."""
    async with open_postgres_store(postgres_url) as store:
        for rid in ("resp_a", "resp_b"):
            await store.create_response(new_response(rid), [], [])
        both_locked_one = asyncio.Barrier(2)
        attempts: list[str] = []

        def locking(first: str, second: str):  # type: ignore[no-untyped-def]
            async def op(tx: Tx) -> None:
                attempts.append(first)
                await tx.conn.execute(
                    "UPDATE responses SET recoveries = recoveries + 1 WHERE id = $1", first
                )
                if len(attempts) <= 2:
                    await both_locked_one.wait()
                await tx.conn.execute(
                    "UPDATE responses SET recoveries = recoveries + 1 WHERE id = $1", second
                )

            return op

        await asyncio.gather(
            store._db.write("a then b", locking("resp_a", "resp_b")),
            store._db.write("b then a", locking("resp_b", "resp_a")),
        )

        assert len(attempts) == 3  # one of them ran twice
        for rid in ("resp_a", "resp_b"):
            record = await store.get_response(rid, "")
            assert record is not None and record.recoveries == 2


async def test_a_write_whose_caller_was_cancelled_still_commits(postgres_url: str) -> None:
    async with open_postgres_store(postgres_url) as store:
        creating = asyncio.create_task(store.create_response(new_response("resp_a"), [], rows(0)))
        await asyncio.sleep(0)
        creating.cancel()
        with pytest.raises(asyncio.CancelledError):
            await creating

    async with open_postgres_store(postgres_url) as again:
        assert await again.get_response("resp_a", "") is not None


async def test_appends_of_many_responses_share_commits_and_fail_alone(
    postgres_url: str,
) -> None:
    """Appends are committed in batches (store/postgres/_batches.py); an append that a
    fence or the log refuses fails alone, and its neighbours in the batch commit."""
    async with open_postgres_store(postgres_url) as store:
        writes: list[int] = []
        store.on_commit(lambda seconds, n: writes.append(n))
        fences = {f"resp_{n:02}": await claimed(store, f"resp_{n:02}") for n in range(30)}
        for rid, fence in fences.items():
            await store.append_events(rid, fence, rows(0))
        writes.clear()

        def append(n: int, rid: str) -> asyncio.Future[None]:
            if n % 3 == 1:
                return store.append_events(rid, Fence("me", fences[rid].epoch + 1), rows(1))
            return store.append_events(rid, fences[rid], rows(2 if n % 3 == 2 else 1))

        results = await asyncio.gather(
            *(append(n, rid) for n, rid in enumerate(fences)), return_exceptions=True
        )

        assert [type(r).__name__ for r in results] == ["NoneType", "LeaseLost", "Conflict"] * 10
        for n, rid in enumerate(fences):
            logged = [e.seq for e in await store.read_events(rid, -1)]
            assert logged == ([0, 1] if n % 3 == 0 else [0])
        assert max(writes) > 1 and sum(writes) == 30


async def test_an_end_carries_the_append_queued_before_it_in_its_own_commit(
    postgres_url: str,
) -> None:
    """A terminal write queued behind an append that has not started writes that
    append's rows in its own statement: two commits in a row become one, and the
    append's emitters hear of it only once that commit is made."""
    async with open_postgres_store(postgres_url) as store:
        fence = await claimed(store, "resp_a")
        writes: list[int] = []
        store.on_commit(lambda seconds, n: writes.append(n))
        first = store.append_events("resp_a", fence, rows(0))  # starts at once
        second = store.append_events("resp_a", fence, rows(1), join=True)  # waits behind it
        ending = store.save_snapshot(
            "resp_a",
            fence,
            snapshot="{}",
            last_seq=2,
            events=rows(2),
            status="completed",
            terminal=True,
            logged=True,
        )
        await asyncio.gather(first, second, ending)

        assert [e.seq for e in await store.read_events("resp_a", -1)] == [0, 1, 2]
        assert len(writes) == 2, writes  # the first append; the second with the end


async def test_a_refused_end_does_not_take_the_append_it_carried_with_it(
    postgres_url: str,
) -> None:
    """The carried rows were asked for before the end: a stop request that refuses the
    end does not refuse them (they commit alone), and a lost lease refuses both."""
    async with open_postgres_store(postgres_url) as store:
        fence = await claimed(store, "resp_b")
        assert await store.request_cancel("resp_b")
        first = store.append_events("resp_b", fence, rows(0))
        second = store.append_events("resp_b", fence, rows(1), join=True)
        with pytest.raises(StopRequested):
            await store.save_snapshot(
                "resp_b",
                fence,
                snapshot="{}",
                last_seq=2,
                events=rows(2),
                status="completed",
                terminal=True,
                logged=True,
            )
        await asyncio.gather(first, second)
        assert [e.seq for e in await store.read_events("resp_b", -1)] == [0, 1]

        held = await claimed(store, "resp_c")
        stale = Fence("me", held.epoch + 1)
        first = store.append_events("resp_c", stale, rows(0))
        second = store.append_events("resp_c", stale, rows(1), join=True)
        with pytest.raises(LeaseLost):
            await store.save_snapshot(
                "resp_c",
                stale,
                snapshot="{}",
                last_seq=2,
                events=rows(2),
                status="completed",
                terminal=True,
                logged=True,
            )
        outcomes = await asyncio.gather(first, second, return_exceptions=True)
        assert [type(o).__name__ for o in outcomes] == ["LeaseLost", "LeaseLost"]
        assert await store.read_events("resp_c", -1) == []


# -- the rules SQLite kept by having one writer (issue 15), raced ----------------------------


@pytest.mark.parametrize("where", ["lane", "tenant"])
async def test_issue15_concurrent_admissions_never_pass_a_queue_limit(
    hosts: list[PostgresStore], where: str
) -> None:
    """Admission counts a lane's (or a tenant's) queued turns in a read of its own,
    before the insert it decides. Under READ COMMITTED, 50 admissions from 50
    connections each counted the others' uncommitted turns as absent, and many more than
    the limit were admitted. Fix: every create first takes the lane's transaction-scoped
    advisory lock (and the tenant's, when a tenant limit applies) in a statement of its
    own. Checked by making `LaneStore._lock_admission` a no-op: all 50 were admitted
    instead of 5, with either limit, in every run. A limit of 5 is within TENANT_SLACK,
    so the tenant's lock is always taken (replacing it with `true`: 50 admitted)."""
    limit = 5
    await claimed(hosts[0], "resp_head")  # the lane's running turn: the rest must queue

    async def admit(n: int) -> bool:
        lane = "resp_head" if where == "lane" else f"lane_{n}"
        rules = (
            Admission(max_queued=limit) if where == "lane" else Admission(max_queued_tenant=limit)
        )
        try:
            await hosts[n % HOSTS].create_response(in_lane(f"resp_{n:02}", lane), [], [], rules)
        except TooManyQueued as refused:
            assert refused.where == where
            return False
        return True

    admitted = await asyncio.gather(*(admit(n) for n in range(50)))

    assert sum(admitted) == limit
    assert await hosts[0].count_queued() == limit


async def test_issue15_creates_far_below_the_tenant_limit_take_no_tenant_lock(
    hosts: list[PostgresStore], postgres_url: str
) -> None:
    """Every background create took its tenant's advisory lock and held it through
    commit, so one tenant's creates ran one at a time on every host (the bench: 0.28 of
    SQLite's background throughput). Now the lock is taken only when the tenant has at
    least `limit - TENANT_SLACK` queued turns. Held here by another session, the tenant's
    lock stops none of 10 creates from 10 connections far below the limit (before the
    fix, all 10 waited for it: the gather timed out); the next create, at the threshold,
    waits for it, and is admitted once it is released; the limit still holds exactly."""
    limit = TENANT_SLACK + 10
    rules = Admission(max_queued_tenant=limit)
    holder = await asyncpg.connect(postgres_url)
    try:
        await holder.execute("SELECT pg_advisory_lock($1::int, hashtext(''))", TENANT_LOCK)

        async def create(n: int) -> object:
            store = hosts[n % HOSTS]
            return await store.create_response(in_lane(f"resp_{n:03}", f"lane_{n}"), [], [], rules)

        # Guards a hang only: nothing here waits for the lock.
        await asyncio.wait_for(asyncio.gather(*(create(n) for n in range(10))), 60)
        assert await hosts[0].count_queued() == 10

        at_threshold = asyncio.create_task(create(10))
        waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1"
        waiting += " AND NOT granted"
        while not await holder.fetchval(waiting, TENANT_LOCK):
            assert not at_threshold.done(), at_threshold
            await asyncio.sleep(0.01)
        assert not at_threshold.done()
        await holder.execute("SELECT pg_advisory_unlock($1::int, hashtext(''))", TENANT_LOCK)
        await at_threshold
    finally:
        await holder.close()

    await asyncio.gather(*(create(n) for n in range(11, limit)))
    with pytest.raises(TooManyQueued):
        await create(limit)
    assert await hosts[0].count_queued() == limit


async def test_issue15_concurrent_creates_start_only_the_head_of_their_lane(
    hosts: list[PostgresStore],
) -> None:
    """A create may claim its turn in the same transaction when it heads its lane, a NOT
    EXISTS over earlier unfinished rows of the lane. Under READ COMMITTED it cannot see a
    row that a concurrent create inserted and has not committed, so of 20 creates in one
    empty lane from 20 connections, several found themselves at the head and started:
    two turns of one lane ran at once (G10). Fix: creates and claims take the lane's
    advisory lock, and `ord` (the lane's order) is drawn while it is held. Checked by
    making `LaneStore._lock_admission` a no-op: 2 and 5 of the 20 started (two runs).

    Then, turn by turn, every host claims every queued turn of the lane at once: each
    round exactly one claim wins, and it is the next turn in the lane's order."""
    lane = "conv_lane"
    created = await asyncio.gather(
        *(
            hosts[n % HOSTS].create_response(
                in_lane(f"resp_{n:02}", lane), [], [], None, (f"host{n}", 30)
            )
            for n in range(20)
        )
    )
    started = [claim for _, _, claim in created if claim is not None]
    assert len(started) == 1

    running = started[0]
    finished = [running.id]
    while True:
        await end(hosts[0], running.id, Fence(running.owner or "", running.epoch))
        head = await hosts[0].next_in_lane(lane)
        if head is None:
            break
        queued = [rid for rid, _ in await hosts[0].orphans()]
        claims = await asyncio.gather(
            *(hosts[h].claim(rid, f"host{h}", 30) for h in range(HOSTS) for rid in queued)
        )
        winners = [c for c in claims if c is not None]
        assert [w.id for w in winners] == [head]
        running = winners[0]
        finished.append(running.id)
    assert sorted(finished) == [f"resp_{n:02}" for n in range(20)]


async def test_issue15_a_cancel_racing_the_end_is_never_acknowledged_and_lost(
    hosts: list[PostgresStore],
) -> None:
    """A cancel that was acknowledged (request_cancel returned True) must win over the
    turn's end (G9): the terminal write then raises StopRequested. Here the check is in
    the terminal UPDATE's WHERE, so the row lock orders the two writes. Checked by
    moving the check into a read before the UPDATE (read, decide, write): 3, 6 and 19 of
    60 cancels (three runs) were acknowledged while their response still ended
    `completed`. (SQLite's own shape, a read after the UPDATE in its transaction, passed
    here too: the UPDATE's row lock already orders it after a committed cancel. The
    check in the WHERE makes the rule hold in one statement, without relying on that.)"""
    driver = hosts[0]
    fences = {}
    for n in range(60):
        fences[f"resp_{n:02}"] = await claimed(driver, f"resp_{n:02}")

    async def race(rid: str) -> tuple[BaseException | None, bool]:
        ending, cancelling = await asyncio.gather(
            end(driver, rid, fences[rid], "completed"),
            hosts[1 + int(rid[-2:]) % (HOSTS - 1)].request_cancel(rid),
            return_exceptions=True,
        )
        assert not isinstance(cancelling, BaseException)
        assert ending is None or isinstance(ending, StopRequested)
        return ending, cancelling

    outcomes = await asyncio.gather(*(race(rid) for rid in fences))

    for rid, (ending, acknowledged) in zip(fences, outcomes, strict=True):
        record = await driver.get_response(rid, "")
        assert record is not None
        if acknowledged:
            assert isinstance(ending, StopRequested) and ending.kind == "cancelled"
            assert (record.status, record.cancel_requested) == ("in_progress", True)
        else:
            assert ending is None and record.status == "completed"


async def test_issue15_concurrent_outputs_for_one_call_are_stored_once(
    hosts: list[PostgresStore],
) -> None:
    """An append's tool-pairing check reads the conversation's tool items, and new items
    take positions max + 1; two appends must neither both pass the check against a
    history the other one changes nor draw the same position. The conversation's row is
    locked before the read. Checked by dropping `FOR NO KEY UPDATE` from that lock:
    appends collided on a position (Conflict) in every run, and stored two outputs for
    the call in some."""
    call = ItemRow("fc", json.dumps({"type": "function_call", "call_id": "call_1"}))
    await hosts[0].create_conversation(ConversationRecord("conv_1", "", 0.0, "{}"), [call])

    def once(tool_items: list[str], waiting: list[str]) -> None:
        if any(json.loads(t)["type"] == "function_call_output" for t in tool_items):
            raise ValueError("answered already")

    async def answer(n: int) -> str:
        output = ItemRow(
            f"fco_{n}", json.dumps({"type": "function_call_output", "call_id": "call_1"})
        )
        try:
            await hosts[n % HOSTS].add_conversation_items("conv_1", "", [output], check=once)
        except ValueError:
            return "refused"
        except Conflict:
            return "collided"
        return "stored"

    outcomes = await asyncio.gather(*(answer(n) for n in range(20)))

    assert sorted(outcomes) == ["refused"] * 19 + ["stored"]
    assert len(await hosts[0].conversation_history("conv_1", None)) == 2


# -- time -----------------------------------------------------------------------------------


async def test_issue15_a_host_clock_offset_neither_steals_nor_keeps_a_lease(
    hosts: list[PostgresStore],
) -> None:
    """Hosts' clocks differ; leases, expiry and retention use the database's clock. A
    host whose clock runs two days ahead thinks every lease expired long ago, yet cannot
    take a live one; one whose clock runs two days behind thinks a lease has two days
    left, yet takes it once it expired by the database's clock. A lease or a retention
    age given by a skewed host is read as a duration. (The offset is test-only:
    `host_clock`, and the times the runtime would put into a NewResponse.)"""
    honest, ahead, behind = hosts[0], hosts[1], hosts[2]
    ahead.host_clock = lambda: time.time() + 2 * DAY
    behind.host_clock = lambda: time.time() - 2 * DAY

    await claimed(honest, "resp_live", owner="honest", ttl=30)
    assert await ahead.recover("resp_live", "ahead", 30) is None
    assert "resp_live" not in [rid for rid, _ in await ahead.orphans()]

    await claimed(honest, "resp_dead", owner="honest", ttl=0.3)
    await asyncio.sleep(0.5)
    assert [rid for rid, _ in await behind.orphans()] == ["resp_dead"]
    taken = await behind.recover("resp_dead", "behind", 30)
    assert taken is not None and taken.owner == "behind"

    for host, name in ((ahead, "resp_ahead"), (behind, "resp_behind")):
        now = host.host_clock()
        foreground = dataclasses.replace(
            new_response(name, owner=name), created_at=now, lease_expires_at=now + 30
        )
        record, _, _ = await host.create_response(foreground, [], [])
        database_now = await database_clock(honest)
        assert record.lease_expires_at is not None
        assert database_now + 20 < record.lease_expires_at < database_now + 31
        assert abs(record.created_at - database_now) < 5
        assert await honest.recover(name, "honest", 30) is None

    await end(honest, "resp_live", Fence("honest", 1))
    assert await ahead.purge(before=ahead.host_clock() - DAY) == (0, 0)  # finished just now
    assert await behind.purge(before=behind.host_clock() - DAY) == (0, 0)
    assert await behind.purge(before=behind.host_clock() + 60) == (1, 0)  # a negative age


async def database_clock(store: PostgresStore) -> float:
    row = await store._db.fetchrow(
        "clock", "SELECT extract(epoch FROM statement_timestamp())::float8"
    )
    assert row is not None
    return float(row[0])
