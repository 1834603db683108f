"""Retention on PostgreSQL (issue 15): the store's bounded batches against day partitions.

    .venv/bin/python -m bench.pg_retention [--responses N]

A throwaway PostgreSQL (fsync on) gets N finished responses (10 events of 200 bytes, 1
item each) over 10 days, 90% expired, in two databases: the store's schema, purged by
`PostgresStore.purge` (500 a transaction, ON DELETE CASCADE); and the same columns plus
`day`, partitioned BY RANGE (day), whose expired days go by DETACH PARTITION + DROP
TABLE. Beside each, another connection appends one event a commit to a live response,
against a baseline of that loop alone. It also records PostgreSQL's answers to what
partitioning would ask of the schema, and the rows the purge keeps though created on
an expired day. Results: a Markdown table, and bench/results/pg-retention-<commit>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import itertools
import json
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg

from store import open_store
from tests.support.postgres import INSTALL_HINT, ThrowawayPostgres, find_bindir

DAYS = 10  # day 0 recent, days 1-9 expired
BASELINE_S = 10.0  # the commit loop alone
OP_TIMEOUT_S = 900.0  # bound on any one operation and on the commit loop
TABLES = ("responses", "events", "response_items")
SEQ = itertools.count(1_000_000)  # the live response's appended events

FILL_RESPONSES = """
INSERT INTO {p}responses (id, status, background, created_at, updated_at, params, snapshot,
    last_seq, lane{dc})
SELECT 'resp_' || i, 'completed', false,
    CASE WHEN {long} AND d = 0 AND i % 1000 = 0
        THEN t - make_interval(days => 1 + i / 1000 % 9) ELSE t END, t,
    '{{"model":"bench","input":"' || repeat('p', 100) || '"}}',
    '{{"id":"resp_' || i || '","object":"response","status":"completed","output":"'
        || repeat('s', 400) || '"}}', 10, 'resp_' || i{dv}
FROM (SELECT i, i % 10 AS d, now() - make_interval(days => i % 10, secs => i % 80000) AS t
      FROM generate_series(1, $1) AS i) AS g
"""
FILL_EVENTS = """
INSERT INTO {p}events (response_id, seq, type, data{dc})
SELECT r.id, s, 'response.output_text.delta', repeat('e', 200){rd}
FROM {p}responses AS r, generate_series(1, 10) AS s
"""
FILL_ITEMS = """
INSERT INTO {p}response_items (response_id, position, item_id, item{dc})
SELECT r.id, 0, 'msg_' || r.id, '{{"type":"message","content":"' || repeat('i', 200) || '"}}'
    {rd} FROM {p}responses AS r
"""
# Two old finished turns that a running turn's previous_response_id chain reaches.
CHAIN = """
INSERT INTO {p}responses (id, status, background, created_at, params, snapshot, last_seq,
    lane, previous_response_id{dc})
VALUES
    ('chain_1', 'completed', false, now() - interval '5 days', '{{}}', '{{}}', 0, 'c', NULL{d5}),
    ('chain_2', 'completed', false, now() - interval '4 days', '{{}}', '{{}}', 0, 'c',
        'chain_1'{d4}),
    ('live', 'in_progress', true, now(), '{{}}', '{{}}', 0, 'c', 'chain_2'{d0});
UPDATE {p}responses SET updated_at = created_at WHERE id LIKE 'chain_%'
"""


def latency(ms: list[float]) -> dict[str, float]:
    o = sorted(ms) or [0.0]
    return {"n": len(ms), "p50": o[len(o) // 2], "p99": o[int(0.99 * len(o))], "max": o[-1]}


async def commits(url: str, prefix: str, stop: asyncio.Event, min_s: float) -> list[float]:
    """Append one event to the live response per commit until `stop` (and at least
    `min_s`, at most OP_TIMEOUT_S); each commit's latency in ms."""
    col, val = (", day", ", current_date") if prefix else ("", "")
    sql = (
        f"INSERT INTO {prefix}events (response_id, seq, type, data{col})"
        f" VALUES ('live', $1, 'response.output_text.delta', $2{val})"
    )
    conn = await asyncpg.connect(url)
    out: list[float] = []
    start = time.perf_counter()
    try:
        while (elapsed := time.perf_counter() - start) < OP_TIMEOUT_S:
            if stop.is_set() and elapsed >= min_s:
                break
            t = time.perf_counter()
            await conn.execute(sql, next(SEQ), "x" * 200)
            out.append((time.perf_counter() - t) * 1000)
    finally:
        await conn.close()
    return out


async def sizes(conn: asyncpg.Connection, prefix: str) -> dict[str, int]:
    """Table + index bytes of each table (summed over partitions)."""
    one = "SELECT pg_total_relation_size($1)"
    tree = "SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree($1)"
    sql = tree if prefix else one
    return {t: int(await conn.fetchval(sql, prefix + t)) for t in TABLES}


async def measured(
    conn: asyncpg.Connection, url: str, prefix: str, op: Callable[[], Awaitable[int]]
) -> dict[str, Any]:
    """Run `op` (returning responses deleted) beside the commit loop, after a baseline
    of the loop alone; time, WAL, sizes and latencies."""
    stop = asyncio.Event()
    stop.set()
    baseline = await commits(url, prefix, stop, BASELINE_S)
    await conn.execute("CHECKPOINT")  # both start with the same full-page-write state
    before = await sizes(conn, prefix)
    lsn = await conn.fetchval("SELECT pg_current_wal_lsn()")
    stop = asyncio.Event()
    loop = asyncio.create_task(commits(url, prefix, stop, 0.0))
    t0 = time.perf_counter()
    try:
        deleted = await asyncio.wait_for(op(), OP_TIMEOUT_S)
        seconds = time.perf_counter() - t0
        wal = await conn.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1)", lsn)
    finally:
        stop.set()
        during = await asyncio.wait_for(loop, OP_TIMEOUT_S + 60)
    return {
        "deleted": deleted,
        "seconds": seconds,
        "rows_per_s": deleted / seconds if seconds else 0.0,
        "wal_bytes": int(wal),
        "sizes_before": before,
        "sizes_after": await sizes(conn, prefix),
        "commit_ms_baseline": latency(baseline),
        "commit_ms_during": latency(during),
    }


async def fill(conn: asyncpg.Connection, prefix: str, n: int, day_col: bool) -> float:
    t0 = time.perf_counter()
    dc, dv, rd = (", day", ", current_date - d", ", r.day") if day_col else ("", "", "")
    long = "false" if day_col else "true"  # created on an expired day, changed recently
    await conn.execute(FILL_RESPONSES.format(p=prefix, dc=dc, dv=dv, long=long), n)
    d5, d4, d0 = (
        (", current_date - 5", ", current_date - 4", ", current_date") if day_col else ("",) * 3
    )
    await conn.execute(CHAIN.format(p=prefix, dc=dc, d5=d5, d4=d4, d0=d0))
    await conn.execute(FILL_EVENTS.format(p=prefix, dc=dc, rd=rd))
    await conn.execute(FILL_ITEMS.format(p=prefix, dc=dc, rd=rd))
    for t in TABLES:
        await conn.execute(f"VACUUM ANALYZE {prefix}{t}")
    return time.perf_counter() - t0


async def batches(pg: ThrowawayPostgres, n: int) -> dict[str, Any]:
    url = pg.create_database("batches")
    async with open_store(url) as store:
        conn = await asyncpg.connect(url)
        try:
            fill_s = await fill(conn, "", n, day_col=False)
            print(f"batches: filled {n} responses in {fill_s:.0f} s", flush=True)

            async def purge() -> int:
                gone, _keys = await store.purge(time.time() - 86400)
                return int(gone)

            result = await measured(conn, url, "", purge)

            async def vacuum() -> int:
                for t in TABLES:
                    await conn.execute(f"VACUUM {t}")
                return 0

            vac = await measured(conn, url, "", vacuum)
            # The rows the purge kept although created on an expired day.
            kept = await conn.fetch(
                "SELECT id, created_at::date AS created FROM responses"
                " WHERE created_at < now() - interval '1 day' ORDER BY id"
            )
        finally:
            await conn.close()
    result |= {"fill_seconds": fill_s, "vacuum_after": vac}
    result["kept_created_on_expired_day"] = {
        "count": len(kept),
        "distinct_days": len({r["created"] for r in kept}),
        "chain_kept": [r["id"] for r in kept if r["id"].startswith("chain_")],
    }
    return result


async def attempt(conn: asyncpg.Connection, sql: str) -> str:
    """PostgreSQL's answer to `sql`, rolled back."""
    try:
        async with conn.transaction():
            await conn.execute(sql)
            raise LookupError("ok (rolled back)")
    except (asyncpg.PostgresError, LookupError) as e:
        return f"{type(e).__name__}: {e}"


async def partitions(pg: ThrowawayPostgres, n: int) -> dict[str, Any]:
    url = pg.create_database("partitions")
    async with open_store(url):  # the real tables, to copy their columns
        pass
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "CREATE TABLE p_responses (day date NOT NULL, LIKE responses INCLUDING DEFAULTS,"
            " PRIMARY KEY (day, id)) PARTITION BY RANGE (day);"
            "CREATE TABLE p_events (day date NOT NULL, LIKE events INCLUDING DEFAULTS,"
            " PRIMARY KEY (day, response_id, seq), FOREIGN KEY (day, response_id)"
            " REFERENCES p_responses (day, id) ON DELETE CASCADE) PARTITION BY RANGE (day);"
            "CREATE TABLE p_response_items (day date NOT NULL,"
            " LIKE response_items INCLUDING DEFAULTS, PRIMARY KEY (day, response_id, position),"
            " FOREIGN KEY (day, response_id) REFERENCES p_responses (day, id) ON DELETE CASCADE)"
            " PARTITION BY RANGE (day);"
            "CREATE INDEX ON p_responses (updated_at)"
            " WHERE status IN ('completed', 'failed', 'cancelled', 'incomplete')"
        )
        today: datetime.date = await conn.fetchval("SELECT current_date")
        for k in range(-1, DAYS):
            lo, hi = today - datetime.timedelta(days=k), today - datetime.timedelta(days=k - 1)
            for t in TABLES:
                await conn.execute(
                    f"CREATE TABLE p_{t}_{k + 1} PARTITION OF p_{t}"
                    f" FOR VALUES FROM ('{lo}') TO ('{hi}')"
                )
        fill_s = await fill(conn, "p_", n, day_col=True)
        print(f"partitions: filled {n} responses in {fill_s:.0f} s", flush=True)

        steps: list[list[float]] = []  # per day: each DETACH and DROP's seconds

        async def drop() -> int:
            gone = 0
            for k in range(1, DAYS):  # partition suffix k + 1: day `today - k`
                gone += await conn.fetchval(f"SELECT count(*) FROM p_responses_{k + 1}")
                steps.append([])
                async with conn.transaction():  # ACCESS EXCLUSIVE on the parents till commit
                    for t in ("events", "response_items", "responses"):  # referencing first
                        for sql in (f"ALTER TABLE p_{t} DETACH PARTITION", "DROP TABLE"):
                            t0 = time.perf_counter()
                            await conn.execute(f"{sql} p_{t}_{k + 1}")
                            steps[-1].append(round(time.perf_counter() - t0, 4))
            return int(gone)

        result = await measured(conn, url, "p_", drop)
        result |= {"fill_seconds": fill_s, "seconds_per_step": steps}
        result["facts"] = {
            "pk_without_partition_key": await attempt(
                conn, "CREATE TABLE f (id text PRIMARY KEY, day date) PARTITION BY RANGE (day)"
            ),
            "fk_to_id_alone": await attempt(
                conn, "CREATE TABLE f (response_id text REFERENCES p_responses (id))"
            ),
            "detach_day_with_its_events_still_there": await attempt(
                conn, "ALTER TABLE p_responses DETACH PARTITION p_responses_1"
            ),
            "change_a_referenced_rows_day": await attempt(
                conn, "UPDATE p_responses SET day = day + 1 WHERE id = 'resp_10'"
            ),
        }
    finally:
        await conn.close()
    return result


def mb(b: float) -> str:
    return f"{b / 1e6:.1f}"


def table(results: dict[str, dict[str, Any]]) -> str:
    head = (
        "| approach | deleted | s | rows/s | WAL MB | resp+events+items MB before -> after"
        " | commit ms alone p50/p99/max | during p50/p99/max (n) |"
    )
    lines = [head, "|" + "---|" * 8]
    for name, r in results.items():
        a, d = r["commit_ms_baseline"], r["commit_ms_during"]
        lines.append(
            f"| {name} | {r['deleted']} | {r['seconds']:.2f} | {r['rows_per_s']:.0f}"
            f" | {mb(r['wal_bytes'])} | {mb(sum(r['sizes_before'].values()))} -> "
            f"{mb(sum(r['sizes_after'].values()))} | {a['p50']:.1f}/{a['p99']:.1f}/{a['max']:.1f}"
            f" | {d['p50']:.1f}/{d['p99']:.1f}/{d['max']:.1f} ({d['n']}) |"
        )
    return "\n".join(lines)


async def run(n: int) -> dict[str, Any]:
    bindir = find_bindir()
    if bindir is None:
        raise SystemExit(INSTALL_HINT)
    pg = ThrowawayPostgres(bindir, durable=True)
    pg.start()
    try:
        got = await batches(pg, n)
        vac = got.pop("vacuum_after")
        return {"batches": got, "batches: vacuum after": vac, "partitions": await partitions(pg, n)}
    finally:
        pg.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--responses", type=int, default=100_000)
    args = parser.parse_args()
    results = asyncio.run(run(args.responses))
    print(table(results))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    out = Path(__file__).parent / "results" / f"pg-retention-{commit}.json"
    doc = {"responses": args.responses, "commit": commit, "date": time.time(), **results}
    out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(json.dumps(results["partitions"]["facts"], indent=1))
    print(json.dumps(results["batches"]["kept_created_on_expired_day"]))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
