"""CPU budget per background response (issue 18, item 3): the server's CPU time per
completed background response, split into the stages of its path, and one poll GET's.

    python -m bench.cpu_budget [--runs 3] [--responses 1000] [--gets 3000] [--clients 16]
                               [--interval-ms 5] [--out FILE] [--report FILE]

It starts a server (`python -m server`, 127.0.0.1, a free port, a SQLite file in a
temporary directory, the embedded model's default 10 words) under bench/_cpu_sampler.py,
warms it up with 200 responses, then, `--runs` times:

1. runs `--responses` background responses as the bench's `background` workload does
   (POST `background: true`, then GET every 20 ms until completed) with the sampler off:
   the server's CPU time (user + system, /proc/PID/stat) per completed response, the GETs
   each one needed and the store's group commits (its /metrics);
2. runs them again with the sampler on, which records each thread's Python stack every
   `--interval-ms` of that thread's own CPU time. Each thread's CPU time over the run
   (/proc/PID/task) is split over the stages (bench/_stages.py) by its samples.

The stages' shares of all sampled runs together are applied to the median of the plain
runs' CPU time per response. Then the same for `--gets` GETs of one completed response:
what one poll costs. Every run is bounded (RUN_TIMEOUT); the default takes about a
minute and a half.

CPU time, not wall time: on a shared, loaded machine it is what stays meaningful, and it
is why samples are taken per CPU time rather than per wall time as py-spy takes them (a
thread that waits for a CPU counts as running there; bench/_cpu_sampler.py says more).
No profiler needs installing. The table (Markdown) goes to stdout, the JSON to `--out`
and the samples beside it; `--report FILE` splits a saved run's samples again with the
current rules (bench/_stages.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from ._clients import OP_TIMEOUT, _address, _create_body
from ._procs import REPO, Proc, cpu_seconds, free_port
from ._stages import STAGES, classify, collections, read_samples, thread_kind, where
from ._stats import median
from ._wire import Connection, HTTPError
from ._workloads import BACKGROUND_POLL_INTERVAL

WARMUP = 200  # background responses before anything is measured
RUN_TIMEOUT = 120.0  # seconds: a bound on every load run
COLUMNS = ("loop", "writer", "others")  # the table's thread columns
HTTP_STAGES = ("asgi", "hypercorn", "socket")
COMMITS = "durable_responses_store_commit_seconds_count "

Op = Callable[[Connection, int], Awaitable[int]]


# -- CPU time from /proc -------------------------------------------------------------------


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each live thread of `pid`."""
    ticks = os.sysconf("SC_CLK_TCK")
    threads = {}
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            threads[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) / ticks
    return threads


def system_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[12]) / os.sysconf("SC_CLK_TCK")


# -- the load --------------------------------------------------------------------------------


async def _each(url: str, count: int, clients: int, op: Op) -> dict[str, Any]:
    """Run `op` for 0..count-1 over `clients` keep-alive connections, each op bounded by
    OP_TIMEOUT and the whole by RUN_TIMEOUT; op returns the GETs it made."""
    numbers = iter(range(count))
    gets: list[int] = []
    errors: list[str] = []

    async def worker() -> None:
        conn = Connection(*_address(url))
        try:
            for n in numbers:
                try:
                    gets.append(await asyncio.wait_for(op(conn, n), OP_TIMEOUT))
                except (OSError, HTTPError, TimeoutError, asyncio.IncompleteReadError) as exc:
                    errors.append(repr(exc))
                    await conn.close()
        finally:
            await conn.close()

    began = time.monotonic()
    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(clients))), RUN_TIMEOUT)
    return {
        "done": len(gets),
        "gets": sum(gets),
        "gets_each": dict(sorted(Counter(gets).items())),
        "seconds": time.monotonic() - began,
        "errors": len(errors),
        "first_errors": errors[:3],
    }


async def _background(conn: Connection, n: int) -> int:
    """POST a background response, GET it every 20 ms until completed; the GETs made."""
    return (await _completed(conn))[1]


async def _completed(conn: Connection) -> tuple[str, int]:
    """(id, GETs made) of a background response, polled until completed."""
    status, data = await conn.request("POST", "/v1/responses", _create_body(background=True))
    if status != 200:
        raise HTTPError(f"POST: HTTP {status}: {data[:200]!r}")
    response_id = str(json.loads(data)["id"])
    for gets in range(1, 10_000):
        status, data = await conn.request("GET", f"/v1/responses/{response_id}")
        if status != 200:
            raise HTTPError(f"GET: HTTP {status}: {data[:200]!r}")
        state = json.loads(data)["status"]
        if state == "completed":
            return response_id, gets
        if state not in ("queued", "in_progress"):
            raise HTTPError(f"background: ended {state}")
        await asyncio.sleep(BACKGROUND_POLL_INTERVAL)
    raise HTTPError("background: never completed")


def _poll(response_id: str) -> Op:
    async def op(conn: Connection, n: int) -> int:
        status, data = await conn.request("GET", f"/v1/responses/{response_id}")
        if status != 200 or b'"completed"' not in data:
            raise HTTPError(f"GET: HTTP {status}: {data[:200]!r}")
        return 1

    return op


async def _one_completed(url: str) -> str:
    conn = Connection(*_address(url))
    try:
        return (await asyncio.wait_for(_completed(conn), OP_TIMEOUT))[0]
    finally:
        await conn.close()


# -- the sampled server ----------------------------------------------------------------------


class Sampled:
    """A server started under bench/_cpu_sampler.py, and the sampler's control file."""

    def __init__(self, workdir: Path) -> None:
        self.control = workdir / "control"
        self.control.mkdir()
        argv = [sys.executable, "-m", "bench._cpu_sampler", str(self.control), "--"]
        argv += ["--port", "{port}", "--db", str(workdir / "budget.db"), "--no-access-log"]
        self.metrics_port = free_port()
        argv += ["--metrics-port", str(self.metrics_port)]
        self.proc = Proc(argv, workdir / "server.log", name="server")

    def commits(self) -> int:
        """Group commits so far (the count of the store's commit-duration histogram)."""
        page = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).text
        for line in page.splitlines():
            if line.startswith(COMMITS):
                return int(float(line.split()[-1]))
        return 0

    def command(self, command: str, deadline: float = 30.0) -> None:
        """Have the sampler carry out `command` (start ... / stop); wait until it has."""
        staged = self.control / "command.new"
        staged.write_text(command)
        staged.replace(self.control / "command")  # the sampler never reads half of it
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            with contextlib.suppress(OSError):
                if (self.control / "done").read_text() == command:
                    return
            time.sleep(0.02)
        raise RuntimeError(f"the sampler did not carry out {command!r}; see the server log")


# -- one workload, plain and sampled -----------------------------------------------------------


def measure(
    server: Sampled, args: argparse.Namespace, name: str, op: Op, count: int
) -> dict[str, Any]:
    """`runs` rounds of `count` ops without sampling, then `count` sampled."""
    rounds = []
    for i in range(args.runs):
        commits = server.commits()
        plain = _timed(server.proc, args, op, count)
        plain["commits"] = server.commits() - commits
        samples = args.out.parent / f"{args.out.stem}-{name}-{i}"
        shutil.rmtree(samples, ignore_errors=True)
        server.command(f"start {samples} {int(args.interval_ms * 1e6)} {time.time()}")
        try:
            sampled = _timed(server.proc, args, op, count)
        finally:
            server.command(f"stop {time.time()}")
        rounds.append({"plain": plain, "sampled": sampled, "samples": str(samples)})
    return budget({"rounds": rounds})


def _timed(proc: Proc, args: argparse.Namespace, op: Op, count: int) -> dict[str, Any]:
    cpu0, sys0, threads0 = cpu_seconds(proc.pid), system_seconds(proc.pid), thread_cpu(proc.pid)
    run = asyncio.run(_each(proc.url, count, args.clients, op))
    run["cpu"] = cpu_seconds(proc.pid) - cpu0
    run["system"] = system_seconds(proc.pid) - sys0
    run["threads"] = {
        tid: cpu - threads0.get(tid, 0.0) for tid, cpu in thread_cpu(proc.pid).items()
    }
    if run["done"] == 0:
        raise RuntimeError(f"no operation completed: {run['first_errors']}")
    run["cpu_us_each"] = run["cpu"] / run["done"] * 1e6
    return run


def budget(run: dict[str, Any]) -> dict[str, Any]:
    """The sampled runs' CPU time split by their samples, as shares of the median plain
    run's CPU time per op (µs)."""
    rounds = run["rounds"]
    plain_us = median([r["plain"]["cpu_us_each"] for r in rounds])
    cells = {key: dict.fromkeys(COLUMNS, 0.0) for key, _ in STAGES}
    top: dict[str, defaultdict[str, float]] = {key: defaultdict(float) for key, _ in STAGES}
    kinds: dict[str, dict[str, float]] = {}
    gcs: Counter[int] = Counter()
    for r in rounds:
        threads = {int(tid): cpu for tid, cpu in r["sampled"]["threads"].items()}
        part = split(Path(r["samples"]), threads)
        for stage, row in part["cells"].items():
            for column, seconds in row.items():
                cells[stage][column] += seconds
            for at, seconds in part["top"][stage].items():
                top[stage][at] += seconds
        cells["unaccounted"]["others"] += r["sampled"]["cpu"] - sum(threads.values())
        for kind, row in part["threads_by_kind"].items():
            mine = kinds.setdefault(kind, {"cpu": 0.0, "samples": 0})
            mine["cpu"] += row["cpu"]
            mine["samples"] += row["samples"]
        gcs.update(collections(Path(r["samples"])))
    sampled_cpu = sum(r["sampled"]["cpu"] for r in rounds)
    scale = plain_us / sampled_cpu  # sampled seconds -> µs per op of the plain runs
    done = sum(r["sampled"]["done"] for r in rounds)
    return {
        **run,
        "plain_us": plain_us,
        "us": {s: {c: v * scale for c, v in row.items()} for s, row in cells.items()},
        "top": {s: _largest(found, 8, scale) for s, found in top.items()},
        "threads_by_kind": kinds,
        "collections_per_op": {str(g): n / done for g, n in sorted(gcs.items())},
    }


def _largest(found: dict[str, float], n: int, scale: float) -> dict[str, float]:
    return {at: v * scale for at, v in sorted(found.items(), key=lambda kv: -kv[1])[:n]}


def split(directory: Path, threads: dict[int, float]) -> dict[str, Any]:
    """Each thread's CPU seconds (`threads`) split over the stages by its samples; a
    thread with CPU time but no sample goes to its kind's default stage."""
    samples: dict[int, list[tuple[str, str]]] = {}
    kinds: dict[int, str] = {}
    for sample in read_samples(directory, REPO):
        kinds[sample.tid] = kind = thread_kind(sample.thread)
        stage = classify(kind, sample)
        samples.setdefault(sample.tid, []).append((stage, where(sample, stage)))
    cells = {key: dict.fromkeys(COLUMNS, 0.0) for key, _ in STAGES}
    top: dict[str, defaultdict[str, float]] = {key: defaultdict(float) for key, _ in STAGES}
    per_kind: dict[str, dict[str, float]] = {}
    for tid, cpu in threads.items():
        kind = kinds.get(tid, "other")
        column = kind if kind in ("loop", "writer") else "others"
        mine = samples.get(tid) or [(_unsampled(kind), "(no sample)")]
        for stage, at in mine:
            cells[stage][column] += cpu / len(mine)
            top[stage][at] += cpu / len(mine)
        row = per_kind.setdefault(kind, {"cpu": 0.0, "samples": 0})
        row["cpu"] += cpu
        row["samples"] += len(samples.get(tid, ()))
    return {"cells": cells, "top": top, "threads_by_kind": per_kind}


def _unsampled(kind: str) -> str:
    return {"loop": "loop", "writer": "txn", "readers": "readers"}.get(kind, "other_threads")


# -- the report ------------------------------------------------------------------------------


def table(us: dict[str, dict[str, float]]) -> str:
    total = sum(sum(row.values()) for row in us.values())
    lines = [
        "| stage | event loop | writer thread | other threads | total µs | share |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, label in STAGES:
        row = us[key]
        if abs(sum(row.values())) < 0.5:
            continue
        cells = " | ".join(f"{row[c]:,.0f}" for c in COLUMNS)
        share = 100 * sum(row.values()) / total if total else 0.0
        lines.append(f"| {label} | {cells} | {sum(row.values()):,.0f} | {share:.1f}% |")
    sums = " | ".join(f"{sum(r[c] for r in us.values()):,.0f}" for c in COLUMNS)
    lines.append(f"| **total** | {sums} | **{total:,.0f}** | 100% |")
    return "\n".join(lines)


def summary(meta: dict[str, Any], background: dict[str, Any], get: dict[str, Any]) -> str:
    plains = [r["plain"] for r in background["rounds"]]
    done = sum(p["done"] for p in plains)
    gets_each = sum(p["gets"] for p in plains) / done
    per_get = get["plain_us"]
    route = sum(get["us"]["poll"].values())
    http = sum(sum(get["us"][key].values()) for key in HTTP_STAGES)
    lines = [
        f"CPU budget per background response, {meta['date']}, commit {meta['commit']}, "
        f"{meta['cpus']} CPUs, load average {meta['load'][0]:.1f} before, "
        f"{meta['load_after'][0]:.1f} after",
        f"background: {len(plains)} runs of {plains[0]['done']:,} responses "
        f"({meta['clients']} clients, {sum(p['errors'] for p in plains)} errors): server CPU "
        f"{_each_us(plains)} µs per response, median **{background['plain_us']:,.0f} µs** "
        f"({_pct(sum(p['system'] for p in plains), sum(p['cpu'] for p in plains))} of it "
        f"system time); sampled runs {_each_us([r['sampled'] for r in background['rounds']])}"
        f" µs; GETs per response {gets_each:.2f} (how many needed 1, 2, ...: "
        f"{_gets_each(plains)}); group commits per response "
        f"{sum(p.get('commits', 0) for p in plains) / done:.2f}",
        f"samples, one per {meta['interval_ms']:g} ms of a thread's CPU time: "
        f"{_threads(background['threads_by_kind'])}; garbage collections per response "
        f"(by generation): {_gcs(background['collections_per_op'])}",
        "",
        table(background["us"]),
        "",
        "where the largest stages' samples were, µs per response (a stage of our code: the "
        "innermost frame in server/, recovery/ or store/; a library's: its innermost frame):",
        *_tops(background),
        "",
        f"one poll GET: {len(get['rounds'])} runs of {get['rounds'][0]['plain']['done']:,} "
        f"GETs of one completed response: {_each_us([r['plain'] for r in get['rounds']])} "
        f"µs of CPU, median **{per_get:,.0f} µs**; the route {route:,.0f}, HTTP and ASGI "
        f"{http:,.0f}; so a response's {gets_each:.2f} polls cost about "
        f"{gets_each * per_get:,.0f} µs",
        "",
        table(get["us"]),
    ]
    return "\n".join(lines)


def _each_us(runs: list[dict[str, Any]]) -> str:
    return ", ".join(f"{r['cpu_us_each']:,.0f}" for r in runs)


def _tops(result: dict[str, Any], stages: int = 5, functions: int = 4) -> list[str]:
    totals = {key: sum(row.values()) for key, row in result["us"].items()}
    lines = []
    for key in sorted(totals, key=lambda k: -totals[k])[:stages]:
        top = list(result["top"][key].items())[:functions]
        lines.append(f"- {key}: " + "; ".join(f"{at} {us:,.0f}" for at, us in top))
    return lines


def _gcs(per_op: dict[str, float]) -> str:
    return ", ".join(f"gen{g} {n:.3f}" for g, n in per_op.items()) or "none"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def _threads(kinds: dict[str, dict[str, float]]) -> str:
    return ", ".join(
        f"{kind} {row['cpu']:.2f} s CPU, {row['samples']:,.0f} samples"
        for kind, row in sorted(kinds.items(), key=lambda kv: -kv[1]["cpu"])
    )


def _gets_each(plains: list[dict[str, Any]]) -> str:
    counts: Counter[str] = Counter()
    for plain in plains:
        counts.update({str(n): c for n, c in plain["gets_each"].items()})
    total = sum(counts.values())
    return ", ".join(f"{100 * c / total:.0f}%" for _, c in sorted(counts.items(), key=_first))


def _first(item: tuple[str, int]) -> int:
    return int(item[0])


# -- the command -----------------------------------------------------------------------------


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.cpu_budget", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--responses", type=int, default=1000, help="per run (default 1000)")
    parser.add_argument("--gets", type=int, default=3000, help="per run (default 3000)")
    parser.add_argument("--runs", type=int, default=3, help="plain and sampled (default 3)")
    parser.add_argument("--clients", type=int, default=16, help="connections (default 16)")
    parser.add_argument(
        "--interval-ms",
        type=float,
        default=5.0,
        help="a sample every this much of a thread's CPU time (default 5)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "cpu-budget.json")
    parser.add_argument("--report", type=Path, help="print the budget of a saved run and exit")
    args = parser.parse_args(argv)
    for name in ("responses", "gets", "clients", "runs"):
        if not 1 <= getattr(args, name) <= 100_000:
            parser.error(f"--{name} must be between 1 and 100000")
    if not 0.5 <= args.interval_ms <= 1000:
        parser.error("--interval-ms must be between 0.5 and 1000")
    return args


def _meta(args: argparse.Namespace) -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, check=False
    ).stdout.decode()
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit.strip(),
        "cpus": os.cpu_count(),
        "load": os.getloadavg(),
        "clients": args.clients,
        "interval_ms": args.interval_ms,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    meta = _meta(args)
    with tempfile.TemporaryDirectory(prefix="cpu-budget-") as tmp:
        server = Sampled(Path(tmp))
        server.proc.start()
        try:
            asyncio.run(_each(server.proc.url, WARMUP, args.clients, _background))
            background = measure(server, args, "background", _background, args.responses)
            response_id = asyncio.run(_one_completed(server.proc.url))
            get = measure(server, args, "get", _poll(response_id), args.gets)
        finally:
            server.proc.stop()
    meta["load_after"] = os.getloadavg()
    return {"meta": meta, "background": background, "get": get}


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.report is not None:  # split a saved run's samples again, with today's rules
        saved = json.loads(args.report.read_text())
        print(summary(saved["meta"], budget(saved["background"]), budget(saved["get"])))
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = run(args)
    args.out.write_text(json.dumps(result))
    print(summary(result["meta"], result["background"], result["get"]))
    print(f"\nresults written to {args.out}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
