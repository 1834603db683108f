"""The bench on PostgreSQL (issue 15): `--store postgres` and `--store both`.

The bench starts its own throwaway PostgreSQL (tests/support/postgres.py, fsync on) and
gives each server a database of it. With `--store both` each throughput workload runs
on a SQLite server and a PostgreSQL server up at the same time, in alternating rounds,
and the table gives the ratio PostgreSQL/SQLite of each round's pair (their median).
Three workloads are PostgreSQL's own: recovery (workload 6 on PostgreSQL), `follow`
(a stream followed on a second process) and `scale-out` (1 against 2 processes).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from . import _workloads as w
from ._procs import Proc
from ._report import Row, at_least, below
from ._stats import median

Result = w.Result
BACKGROUND_RATIO_TARGET = 0.7
FOLLOW_TARGET_MS = 50.0
FOLLOW_DELAY_MS = 100  # the model's pause before each delta of a followed response
FOLLOW_WORDS = 10
FOLLOW_CLIENTS = 4


def start(bench: w.Bench) -> None:
    """Start the bench's PostgreSQL (durable: fsync on, as in production)."""
    from tests.support.postgres import INSTALL_HINT, ThrowawayPostgres, find_bindir

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit(INSTALL_HINT)
    pg = ThrowawayPostgres(bindir, durable=True)
    pg.start()
    bench.pg = pg


def stop(bench: w.Bench) -> None:
    if bench.pg is not None:
        bench.pg.stop()
        bench.pg = None


def _ratio(pairs: list[tuple[Any, Any]], key: str) -> float:
    """Median over rounds of PostgreSQL's figure over SQLite's."""
    return median([p[key] / s[key] for s, p in pairs if s[key]])


COMPARED = {
    "poll": "poll",
    "create": "create",
    "stream": "stream",
    "stream through the log": "durability",
    "background": "background",
}


def compare(bench: w.Bench, chosen: set[str]) -> Result:
    """poll, create, stream (foreground and through the log) and background (those of
    them in `chosen`) on a SQLite server and a PostgreSQL server, both up, in alternating
    rounds."""
    size = bench.size
    lite = bench.server("main", store="sqlite")
    pg = bench.server("main-pg", store="postgres")
    ids = {
        proc.url: bench.load("fill", proc.url, count=size.poll_ids, timeout=300)["ids"]
        for proc in (lite, pg)
        if "poll" in chosen
    }
    runs: dict[str, Callable[[Proc], dict[str, Any]]] = {
        "poll": lambda proc: bench.timed("poll", proc, ids=ids[proc.url]),
        "create": lambda proc: bench.timed("create", proc),
        "stream": lambda proc: bench.timed("stream", proc, background=False),
        "stream through the log": lambda proc: bench.timed("stream", proc, background=True),
        "background": lambda proc: bench.timed(
            "background", proc, poll_interval=w.BACKGROUND_POLL_INTERVAL
        ),
    }
    details: dict[str, Any] = {}
    rows: list[Row] = []
    for name, run in runs.items():
        if COMPARED[name] not in chosen:
            continue
        pairs = w._paired(size.runs, functools.partial(run, lite), functools.partial(run, pg))
        key = "events_per_s" if name.startswith("stream") else "ops_per_s"
        unit = "events/s" if name.startswith("stream") else "/s"
        ratio = _ratio(pairs, key)
        lite_runs, pg_runs = [s for s, _ in pairs], [p for _, p in pairs]
        is_target = name == "background"
        rows += [
            Row(f"pg vs sqlite: {name}", f"SQLite {unit}", w._med(lite_runs, key), "/s"),
            Row(f"pg vs sqlite: {name}", f"PostgreSQL {unit}", w._med(pg_runs, key), "/s"),
            Row(
                f"pg vs sqlite: {name}",
                "ratio PostgreSQL/SQLite",
                ratio,
                "",
                f">= {BACKGROUND_RATIO_TARGET:g}" if is_target else "",
                at_least(ratio, BACKGROUND_RATIO_TARGET) if is_target else None,
            ),
            Row(
                f"pg vs sqlite: {name}",
                "latency p50, SQLite",
                w._med(lite_runs, "latency_ms", "p50"),
                "ms",
            ),
            Row(
                f"pg vs sqlite: {name}",
                "latency p50, PostgreSQL",
                w._med(pg_runs, "latency_ms", "p50"),
                "ms",
            ),
            Row(f"pg vs sqlite: {name}", "server CPU, SQLite", w._med(lite_runs, "server_cpu")),
            Row(f"pg vs sqlite: {name}", "server CPU, PostgreSQL", w._med(pg_runs, "server_cpu")),
            Row(
                f"pg vs sqlite: {name}",
                "PostgreSQL's own CPU (postmaster + backends)",
                w._med(pg_runs, "db_cpu"),
            ),
        ]
        details[name] = {"sqlite": lite_runs, "postgres": pg_runs, "ratio": ratio}
    lite.kill()
    pg.kill()
    return details, rows


def recovery_both(bench: w.Bench) -> Result:
    """Workload 6 on SQLite and on PostgreSQL, in alternating rounds."""
    pairs = []
    for run in range(bench.size.heavy_runs):
        order = ("sqlite", "postgres") if run % 2 == 0 else ("postgres", "sqlite")
        got = {store: w.recovery_run(bench, store, run) for store in order}
        pairs.append((got["sqlite"], got["postgres"]))
    lite_details, lite_rows = w.recovery_result(bench, "sqlite", [s for s, _ in pairs])
    pg_details, pg_rows = w.recovery_result(bench, "postgres", [p for _, p in pairs])
    ratio = median([p["seconds"] / s["seconds"] for s, p in pairs if s["seconds"] and p["seconds"]])
    rows = [*lite_rows, *pg_rows, Row("recovery pg", "seconds, ratio PostgreSQL/SQLite", ratio)]
    return {"sqlite": lite_details, "postgres": pg_details, "ratio": ratio}, rows


def follow(bench: w.Bench) -> Result:
    """A stream followed on process B of a background response that process A runs,
    both on one PostgreSQL: the delay from A's stream receiving an event (A sends an
    event only once it is committed) to B's stream receiving it. The roles swap every
    run."""
    size = bench.size
    a = bench.server("follow", store="postgres")
    b = bench.server("follow", store="postgres")
    runs = []
    for run in range(size.runs):
        runner, follower = (a, b) if run % 2 == 0 else (b, a)
        result = bench.load(
            "follow",
            runner.url,
            follower_url=follower.url,
            clients=FOLLOW_CLIENTS,
            words=FOLLOW_WORDS,
            delay_ms=FOLLOW_DELAY_MS,
        )
        if result["errors"]:
            bench.log(f"  follow: {result['errors']} errors, e.g. {result['first_errors']}")
        runs.append(result)
    a.kill()
    b.kill()
    p50 = w._med(runs, "delay_ms", "p50")
    rows = [
        Row("follow pg", "events measured (min of runs)", float(min(r["events"] for r in runs))),
        Row(
            "follow pg", "events B never saw (max of runs)", float(max(r["missing"] for r in runs))
        ),
        Row(
            "follow pg",
            "A's stream to B's follower, p50",
            p50,
            "ms",
            f"< {FOLLOW_TARGET_MS:g} ms",
            below(p50, FOLLOW_TARGET_MS),
        ),
        Row("follow pg", "A's stream to B's follower, p90", w._med(runs, "delay_ms", "p90"), "ms"),
        Row("follow pg", "A's stream to B's follower, p99", w._med(runs, "delay_ms", "p99"), "ms"),
    ]
    details = {
        "runs": runs,
        "clients": FOLLOW_CLIENTS,
        "words": FOLLOW_WORDS,
        "delay_ms": FOLLOW_DELAY_MS,
    }
    return details, rows


def scale_out(bench: w.Bench) -> Result:
    """Background throughput on one PostgreSQL with 1 server process against 2 (the
    client's connections split round-robin between them), in alternating rounds."""
    size = bench.size
    a = bench.server("scale-out", store="postgres")
    b = bench.server("scale-out", store="postgres")

    def side(procs: list[Proc]) -> Callable[[], dict[str, Any]]:
        return lambda: bench.timed(
            "background",
            a,
            urls=[p.url for p in procs],
            server_pids=[p.pid for p in procs],
            poll_interval=w.BACKGROUND_POLL_INTERVAL,
        )

    pairs = w._paired(size.runs, side([a]), side([a, b]))
    a.kill()
    b.kill()
    one, two = [x for x, _ in pairs], [y for _, y in pairs]
    ratio = median([y["ops_per_s"] / x["ops_per_s"] for x, y in pairs if x["ops_per_s"]])
    rows = [
        Row("scale-out pg", "background completed/s, 1 process", w._med(one, "ops_per_s"), "/s"),
        Row("scale-out pg", "background completed/s, 2 processes", w._med(two, "ops_per_s"), "/s"),
        Row("scale-out pg", "ratio 2 processes / 1", ratio),
        Row("scale-out pg", "latency p50, 1 process", w._med(one, "latency_ms", "p50"), "ms"),
        Row("scale-out pg", "latency p50, 2 processes", w._med(two, "latency_ms", "p50"), "ms"),
        Row("scale-out pg", "server CPU, 1 process", w._med(one, "server_cpu")),
        Row("scale-out pg", "server CPU, 2 processes (sum)", w._med(two, "server_cpu")),
        Row("scale-out pg", "PostgreSQL's own CPU, 1 process", w._med(one, "db_cpu")),
        Row("scale-out pg", "PostgreSQL's own CPU, 2 processes", w._med(two, "db_cpu")),
        Row("scale-out pg", "client CPU, 2 processes", w._med(two, "client_cpu")),
    ]
    return {"one": one, "two": two, "ratio": ratio}, rows
