"""The orchestrator side of each workload: which servers, which load runs, which rows.

Each workload function returns (details for the JSON, rows for the table). A figure is
the median over `size.runs` runs; a ratio is computed within each run (both sides
measured back to back against servers that are up at the same time) and then its
median taken, so drift between runs cancels out.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _fill, _procs
from ._procs import Proc
from ._report import POLL_CEILING_TARGET, Row, at_least, below
from ._sizes import Size
from ._stats import median

Result = tuple[dict[str, Any], list[Row]]
MB = 1024 * 1024
BACKGROUND_POLL_INTERVAL = 0.02  # seconds between a background client's GETs
STREAM_DELAY_MS = 600_000  # a delta every 10 minutes: the memory streams stay open
SLOW_READER_RCVBUF = 4096  # bytes: a slow reader's receive buffer (and so its TCP window)
SLOW_READER_CYCLES = 2  # open-hold-close cycles per run: memory must not ratchet up
HEALTH_TARGET_MS = 100.0
SLOW_READER_GROWTH_MB = 100.0
PHASES = ("opening", "held", "closing")


class LoadError(RuntimeError):
    """A load process failed."""


@dataclass
class Bench:
    size: Size
    workdir: Path
    base_url: str | None = None
    servers: list[Proc] = field(default_factory=list)
    log: Callable[[str], None] = print
    store: str = "sqlite"  # the servers' store unless a call says otherwise: or "postgres"
    pg: Any = None  # a started ThrowawayPostgres (tests/support/postgres.py) when needed
    databases: dict[str, str] = field(default_factory=dict)  # name -> PostgreSQL URL
    pg_settings: dict[str, str] = field(default_factory=dict)  # ALTER DATABASE ... SET

    @property
    def external(self) -> bool:
        return self.base_url is not None

    def postmaster_pid(self) -> int:
        return int((self.pg.data / "postmaster.pid").read_text().split()[0])

    def database(self, name: str) -> str:
        """The PostgreSQL database called `name` (created on first use): its URL."""
        if name not in self.databases:
            assert self.pg is not None, "a PostgreSQL store needs bench.pg started"
            url = self.pg.create_database(name.replace("-", "_"))
            if self.pg_settings:
                _procs.set_database(url, self.pg_settings)
            self.databases[name] = url
        return self.databases[name]

    def server(
        self, name: str, *args: str, db: Path | None = None, store: str | None = None
    ) -> Proc:
        """A started server on store `name`: a SQLite file in the work directory, or a
        database of the bench's PostgreSQL (servers given the same name share it)."""
        if (store or self.store) == "postgres":
            log = self.workdir / f"{name}-{len(self.servers)}.log"
            proc = _procs.server(self.database(name), *args, log=log)
        else:
            proc = _procs.server(db or self.workdir / f"{name}.db", *args)
        self.servers.append(proc)
        return proc.start()

    def ceiling(self) -> Proc:
        proc = _procs.ceiling(self.workdir)
        self.servers.append(proc)
        return proc.start()

    def close(self) -> None:
        for proc in self.servers:
            proc.kill()

    def load(self, workload: str, url: str, pid: int | None = None, **spec: Any) -> Any:
        """Run one load process; its JSON result."""
        spec = {"workload": workload, "url": url, "server_pid": pid, **spec}
        if self.pg is not None:
            spec.setdefault("db_pid", self.postmaster_pid())
        spec.setdefault("clients", self.size.clients)
        spec.setdefault("warmup", self.size.warmup)
        spec.setdefault("duration", self.size.duration)
        timeout = spec.get("timeout", 0) + spec["warmup"] + spec["duration"] + 120
        done = subprocess.run(
            [sys.executable, "-m", "bench._load"],
            input=json.dumps(spec).encode(),
            capture_output=True,
            cwd=_procs.REPO,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise LoadError(f"load {workload} failed:\n{done.stderr.decode()[-2000:]}")
        return json.loads(done.stdout)

    def timed(self, workload: str, proc: Proc | None, **spec: Any) -> dict[str, Any]:
        url = proc.url if proc else self.base_url
        assert url is not None
        result: dict[str, Any] = self.load(workload, url, proc.pid if proc else None, **spec)
        if result["errors"]:
            self.log(f"  {workload}: {result['errors']} errors, e.g. {result['first_errors']}")
        return result


def _paired(
    runs: int, first: Callable[[], Any], second: Callable[[], Any]
) -> list[tuple[Any, Any]]:
    """`runs` pairs, alternating which side goes first so that drift cancels."""
    pairs = []
    for i in range(runs):
        if i % 2 == 0:
            a = first()
            b = second()
        else:
            b = second()
            a = first()
        pairs.append((a, b))
    return pairs


def _med(runs: list[dict[str, Any]], *path: str) -> float:
    values = []
    for run in runs:
        value: Any = run
        for key in path:
            value = value[key]
        values.append(float("nan") if value is None else float(value))
    return median(values)


def main_server(bench: Bench) -> Proc | None:
    """The server the throughput workloads share (None: an external base URL)."""
    return None if bench.external else bench.server("main")


def poll_and_ceiling(bench: Bench, main: Proc | None) -> Result:
    """Workloads 1 and 9: GET of a completed response vs the trivial endpoint."""
    size = bench.size
    url = main.url if main else bench.base_url
    assert url is not None
    ids = bench.load("fill", url, count=size.poll_ids, timeout=300)["ids"]
    ceiling = bench.ceiling()
    pairs = _paired(
        size.runs,
        lambda: bench.timed("poll", main, ids=ids),
        lambda: bench.timed("poll", ceiling, ids=["resp_ceiling"]),
    )
    polls = [p for p, _ in pairs]
    ceilings = [c for _, c in pairs]
    ratio = median([p["ops_per_s"] / c["ops_per_s"] for p, c in pairs if c["ops_per_s"]])
    poll_rate = _med(polls, "ops_per_s")
    rows = [
        Row("ceiling", "req/s (trivial endpoint)", _med(ceilings, "ops_per_s"), "/s"),
        Row("ceiling", "client CPU (cores)", _med(ceilings, "client_cpu")),
        Row("poll", "req/s", poll_rate, "/s"),
        Row(
            "poll",
            "ratio to ceiling",
            ratio,
            "",
            f">= {POLL_CEILING_TARGET:.2f}",
            at_least(ratio, POLL_CEILING_TARGET),
        ),
        Row("poll", "latency p50", _med(polls, "latency_ms", "p50"), "ms"),
        Row("poll", "latency p99", _med(polls, "latency_ms", "p99"), "ms"),
        Row("poll", "server CPU (cores)", _med(polls, "server_cpu")),
        Row("poll", "client CPU (cores)", _med(polls, "client_cpu")),
    ]
    return {"poll": polls, "ceiling": ceilings, "ratio": ratio}, rows


def create(bench: Bench, main: Proc | None) -> Result:
    """Workload 2: foreground POST (JSON), store=true."""
    runs = [bench.timed("create", main) for _ in range(bench.size.runs)]
    rate = _med(runs, "ops_per_s")
    rows = [
        Row("create", "req/s", rate, "/s"),
        Row("create", "latency p50", _med(runs, "latency_ms", "p50"), "ms"),
        Row("create", "latency p99", _med(runs, "latency_ms", "p99"), "ms"),
        Row("create", "server CPU (cores)", _med(runs, "server_cpu")),
    ]
    return {"runs": runs}, rows


def stream_and_durability(bench: Bench, main: Proc | None) -> Result:
    """Workloads 3 and 5: foreground streams (memory only) paired with background
    streams (every event committed to the log before it is sent), at full load for
    throughput and with one client for the unloaded time to first delta."""
    size = bench.size

    def side(background: bool, clients: int) -> Callable[[], dict[str, Any]]:
        return lambda: bench.timed("stream", main, background=background, clients=clients)

    loaded = _paired(size.runs, side(False, size.clients), side(True, size.clients))
    single = _paired(size.runs, side(False, 1), side(True, 1))
    memory = [m for m, _ in loaded]
    logged = [d for _, d in loaded]
    ratio = median([d["events_per_s"] / m["events_per_s"] for m, d in loaded if m["ops"]])
    added = median(
        [d["ttfd_ms"]["p50"] - m["ttfd_ms"]["p50"] for m, d in single if m["ops"] and d["ops"]]
    )
    added_loaded = median(
        [d["ttfd_ms"]["p50"] - m["ttfd_ms"]["p50"] for m, d in loaded if m["ops"] and d["ops"]]
    )
    rate = _med(memory, "ops_per_s")
    rows = [
        Row("stream", "events/s", _med(memory, "events_per_s"), "/s"),
        Row("stream", "responses/s", rate, "/s"),
        Row("stream", f"first delta p50, {size.clients} clients", _ttfd(memory), "ms"),
        Row("stream", "first delta p50, 1 client", _ttfd([m for m, _ in single]), "ms"),
        Row("durability cost", "events/s with the log", _med(logged, "events_per_s"), "/s"),
        Row(
            "durability cost",
            "events/s ratio, log/no log",
            ratio,
            "",
            ">= 0.85",
            at_least(ratio, 0.85),
        ),
        Row(
            "durability cost",
            "added first delta p50, 1 client",
            added,
            "ms",
            "< 2 ms",
            below(added, 2.0),
        ),
        Row(
            "durability cost", f"added first delta p50, {size.clients} clients", added_loaded, "ms"
        ),
    ]
    details = {
        "without_log": memory,
        "with_log": logged,
        "single_client": [{"without_log": m, "with_log": d} for m, d in single],
        "events_ratio": ratio,
        "added_ttfd_ms": added,
    }
    return details, rows


def _ttfd(runs: list[dict[str, Any]]) -> float:
    return _med(runs, "ttfd_ms", "p50")


def background(bench: Bench, main: Proc | None) -> Result:
    """Workload 4: background POST, then polling until completed."""
    runs = [
        bench.timed("background", main, poll_interval=BACKGROUND_POLL_INTERVAL)
        for _ in range(bench.size.runs)
    ]
    rate = _med(runs, "ops_per_s")
    rows = [
        Row("background", "completed/s", rate, "/s"),
        Row("background", "latency p50", _med(runs, "latency_ms", "p50"), "ms"),
        Row("background", "latency p90", _med(runs, "latency_ms", "p90"), "ms"),
        Row("background", "latency p99", _med(runs, "latency_ms", "p99"), "ms"),
    ]
    return {"runs": runs, "poll_interval": BACKGROUND_POLL_INTERVAL}, rows


def recovery(bench: Bench, store: str | None = None) -> Result:
    """Workload 6: N in-flight background responses, SIGKILL, restart; seconds from the
    kill until the API shows every one terminal. The first server's model pauses 1 s per
    delta (10 s answers, all still running at the kill); the restarted one has no delay,
    so the figure is the recovery machinery (lease expiry, scan, claim, re-run), not
    model time."""
    store = store or bench.store
    runs = [recovery_run(bench, store, run) for run in range(bench.size.heavy_runs)]
    return recovery_result(bench, store, runs)


def recovery_run(bench: Bench, store: str, run: int) -> dict[str, Any]:
    """One run of workload 6 on `store` (sqlite or postgres)."""
    size = bench.size
    ttl = f"{size.lease_ttl:g}"
    name = f"recovery-{run}" if store == "sqlite" else f"recovery-{store}-{run}"
    db = bench.workdir / f"{name}.db"
    first = bench.server(name, "--lease-ttl", ttl, "--embedded-delay-ms", "1000", store=store)
    made = bench.load("fill", first.url, count=size.recovery, background=True, timeout=300)
    time.sleep(0.3)
    first.kill()
    killed, killed_at_epoch = time.monotonic(), time.time()
    second = bench.server(name, "--lease-ttl", ttl, db=db, store=store)
    result: dict[str, Any] = bench.load(
        "await_terminal",
        second.url,
        ids=made["ids"],
        t0=killed,
        killed_at_epoch=killed_at_epoch,
        timeout=size.lease_ttl + 120,
        clients=4,  # light: the polling must not slow the recovery it measures
        interval=0.2,
    )
    result["create_seconds"] = made["seconds"]
    result["healthy_seconds"] = second.healthy_at - killed
    second.kill()
    return result


def recovery_result(bench: Bench, store: str, runs: list[dict[str, Any]]) -> Result:
    size = bench.size
    seconds = _med(runs, "seconds")
    lost = max(r["lost"] for r in runs)
    bound = size.lease_ttl + 5
    label = "recovery" if store == "sqlite" else "recovery pg"
    rows = [
        Row(label, "responses created (N)", float(size.recovery)),
        Row(label, "in flight at the kill (min of runs)", _least(runs, "in_flight_at_kill")),
        Row(label, "--lease-ttl", size.lease_ttl, "s"),
        Row(
            label,
            "kill to all terminal",
            seconds,
            "s",
            f"<= lease TTL + 5 s ({bound:g} s)",
            None if math.isnan(seconds) else seconds <= bound,
        ),
        Row(label, "lost (max of runs)", float(lost), "", "0", lost == 0),
    ]
    return {"runs": runs, "lease_ttl": size.lease_ttl, "n": size.recovery}, rows


def _least(runs: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in runs if r.get(key) is not None]
    return float(min(values)) if values else float("nan")


def memory(bench: Bench) -> Result:
    """Workload 7: VmRSS with N open SSE streams (foreground: memory only; background:
    through the log) and with M background responses queued on one conversation."""
    size = bench.size
    streams = str(size.streams + 100)
    details: dict[str, Any] = {}
    rows = []
    for kind in ("foreground", "background"):
        runs = []
        for run in range(size.heavy_runs):
            proc = bench.server(f"memory-{kind}-{run}", "--max-streams-per-tenant", streams)
            runs.append(
                bench.load(
                    "hold_streams",
                    proc.url,
                    proc.pid,
                    count=size.streams,
                    delay_ms=STREAM_DELAY_MS,
                    background=kind == "background",
                    timeout=120,
                )
            )
            proc.kill()
        details[f"{kind}_streams"] = runs
        rss = _med(runs, "rss_open") / MB
        opened = min(r["opened"] for r in runs)
        rows += [
            Row(
                "memory",
                f"RSS, {opened:,} open {kind} streams",
                rss,
                "MB",
                "< 200 MB",
                below(rss, 200) if opened == size.streams else False,
            ),
        ]
    queued = str(size.queued + 10)
    runs = []
    for run in range(size.heavy_runs):
        proc = bench.server(
            f"memory-queue-{run}", "--max-queued", queued, "--max-queued-per-tenant", queued
        )
        runs.append(bench.load("hold_queue", proc.url, proc.pid, count=size.queued, timeout=300))
        proc.kill()
    details["queued"] = runs
    rows += [
        Row("memory", "RSS, idle server", _med(runs, "rss_before") / MB, "MB"),
        Row(
            "memory",
            f"RSS, {min(r['queued'] for r in runs):,} queued background",
            _med(runs, "rss_queued") / MB,
            "MB",
        ),
    ]
    return details, rows


def scale(bench: Bench) -> Result:
    """Workload 8: poll latency on a small and a large store, both up at once; bytes on
    disk per stored simple response. The large store is grown by SQL copies (`_fill`)."""
    size = bench.size
    small_db, large_db = bench.workdir / "scale-small.db", bench.workdir / "scale-large.db"
    filler = bench.server("scale-small", db=small_db)
    made = bench.load("fill", filler.url, count=size.scale_small, timeout=300)
    filler.stop()
    small_bytes = _fill.disk_bytes(small_db)
    shutil.copyfile(small_db, large_db)
    grow_seconds = _fill.grow(large_db, size.scale_large)
    large_count = _fill.count(large_db)
    large_bytes = _fill.disk_bytes(large_db)
    large_ids = _fill.sample_ids(large_db, 5000)
    small = bench.server("scale-small", db=small_db)
    large = bench.server("scale-large", db=large_db)
    clients = size.scale_clients
    pairs = _paired(
        size.runs,
        lambda: bench.timed("poll", small, ids=made["ids"], clients=clients),
        lambda: bench.timed("poll", large, ids=large_ids, clients=clients),
    )
    ratio = median([b["latency_ms"]["p50"] / a["latency_ms"]["p50"] for a, b in pairs])
    small_runs = [a for a, _ in pairs]
    large_runs = [b for _, b in pairs]
    # Background turns too: admission, claims and lease renewals must not grow with the
    # store (no target in the issue; a full scan per turn once hid here).
    turns = _paired(
        size.runs,
        lambda: bench.timed(
            "background", small, clients=clients, poll_interval=BACKGROUND_POLL_INTERVAL
        ),
        lambda: bench.timed(
            "background", large, clients=clients, poll_interval=BACKGROUND_POLL_INTERVAL
        ),
    )
    turn_ratio = median([b["latency_ms"]["p50"] / a["latency_ms"]["p50"] for a, b in turns])
    per_response = (large_bytes - small_bytes) / max(1, large_count - size.scale_small)
    rows = [
        Row(
            "scale",
            f"poll p50, {size.scale_small:,} stored",
            _med(small_runs, "latency_ms", "p50"),
            "ms",
        ),
        Row(
            "scale",
            f"poll p50, {large_count:,} stored",
            _med(large_runs, "latency_ms", "p50"),
            "ms",
        ),
        Row(
            "scale",
            "p50 ratio, large/small",
            ratio,
            "",
            "<= 1.20",
            None if math.isnan(ratio) else ratio <= 1.20,
        ),
        Row(
            "scale",
            f"background p50, {size.scale_small:,} stored",
            _med([a for a, _ in turns], "latency_ms", "p50"),
            "ms",
        ),
        Row(
            "scale",
            f"background p50, {large_count:,} stored",
            _med([b for _, b in turns], "latency_ms", "p50"),
            "ms",
        ),
        Row("scale", "background p50 ratio, large/small", turn_ratio, ""),
        Row("scale", "bytes on disk per simple response", per_response, "B"),
        Row("scale", "SQL pre-population (not HTTP)", grow_seconds, "s"),
    ]
    details = {
        "small": small_runs,
        "large": large_runs,
        "background_small": [a for a, _ in turns],
        "background_large": [b for _, b in turns],
        "small_count": size.scale_small,
        "large_count": large_count,
        "small_bytes": small_bytes,
        "large_bytes": large_bytes,
        "bytes_per_response": per_response,
        "prepopulated_by_sql_seconds": grow_seconds,
        "http_fill_seconds": made["seconds"],
    }
    small.kill()
    large.kill()
    for path in large_db.parent.glob(large_db.name + "*"):
        path.unlink()
    return details, rows


def slow_readers(bench: Bench) -> Result:
    """Workload 10 (issue 12, item 5): N replays of one completed response's large event
    log to clients that read nothing (small receive buffers), opened, held and closed
    twice, against the same server with no readers: /healthz latency, peak RSS and
    server CPU per phase."""
    size = bench.size
    runs = []
    for run in range(size.heavy_runs):
        name = f"slow-readers-{run}"
        proc = bench.server(name, "--max-streams-per-tenant", str(size.slow_readers + 10))
        response_id = _large_log(bench, proc, size.slow_log_words)
        result = bench.load(
            "slow_readers",
            proc.url,
            proc.pid,
            response_id=response_id,
            count=size.slow_readers,
            rcvbuf=SLOW_READER_RCVBUF,
            probe_interval=0.05,
            hold=size.duration,
            cycles=SLOW_READER_CYCLES,
            settle_timeout=120,
            timeout=300 * SLOW_READER_CYCLES,
        )
        result["log_bytes"] = _fill.log_bytes(bench.workdir / f"{name}.db", response_id)
        if result["errors"]:
            bench.log(f"  slow-readers: {result['errors']} errors, e.g. {result['first_errors']}")
        runs.append(result)
        proc.kill()
    return {"runs": runs, "rcvbuf": SLOW_READER_RCVBUF}, _slow_reader_rows(runs, size.slow_readers)


def _large_log(bench: Bench, proc: Proc, words: int) -> str:
    """A completed background response whose answer is `words` words of 40 letters."""
    text = f"[[words {words}]] {'x' * 40}"
    made = bench.load("fill", proc.url, count=1, clients=1, background=True, input=text)
    response_id: str = made["ids"][0]
    done = bench.load("await_terminal", proc.url, ids=[response_id], t0=0.0, timeout=120, clients=1)
    if done["lost"]:
        raise LoadError(f"the large response did not complete: {done['statuses']}")
    return response_id


def _worst(run: dict[str, Any], phase: str, *path: str) -> float:
    """The worst (largest) figure of a phase over a run's cycles."""
    return max(_med([cycle[phase]], *path) for cycle in run["cycles"])


def _slow_reader_rows(runs: list[dict[str, Any]], readers: int) -> list[Row]:
    opened = min(min(c["opened"] for c in r["cycles"]) for r in runs)
    idle_rss = median([r["idle"]["rss_peak"] / MB for r in runs])
    peak = median([max(_worst(r, p, "rss_peak") for p in PHASES) / MB for r in runs])
    after = median([r["rss_after"] / MB for r in runs])
    growth = peak - idle_rss
    rows = [
        Row("slow-readers", "event log of the response", _med(runs, "log_bytes") / MB, "MB"),
        Row("slow-readers", "readers opened (min of cycles)", float(opened), "", str(readers)),
        Row("slow-readers", "RSS, no readers", idle_rss, "MB"),
        Row(
            "slow-readers",
            f"RSS peak, {readers:,} readers, {SLOW_READER_CYCLES} cycles",
            peak,
            "MB",
        ),
        Row(
            "slow-readers",
            "RSS growth at peak",
            growth,
            "MB",
            f"< {SLOW_READER_GROWTH_MB:g} MB",
            below(growth, SLOW_READER_GROWTH_MB) if opened == readers else False,
        ),
        Row("slow-readers", f"RSS after {SLOW_READER_CYCLES} cycles", after, "MB"),
        Row(
            "slow-readers", "/healthz p50, no readers", _med(runs, "idle", "health_ms", "p50"), "ms"
        ),
        Row(
            "slow-readers", "/healthz p99, no readers", _med(runs, "idle", "health_ms", "p99"), "ms"
        ),
    ]
    for phase in PHASES:
        p99 = median([_worst(r, phase, "health_ms", "p99") for r in runs])
        worst = median([_worst(r, phase, "health_ms", "max") for r in runs])
        cpu = median([_worst(r, phase, "server_cpu_seconds") for r in runs])
        target = f"< {HEALTH_TARGET_MS:g} ms"
        rows += [
            Row(
                "slow-readers",
                f"/healthz p99, {phase} readers",
                p99,
                "ms",
                target,
                below(p99, HEALTH_TARGET_MS),
            ),
            Row("slow-readers", f"/healthz max, {phase} readers", worst, "ms"),
            Row("slow-readers", f"server CPU, {phase} readers", cpu, "s"),
        ]
    return rows
