"""The `workers` workload: one server process against `--workers 2` on one host, each on
a store of its own (bench.store), in alternating rounds: background and create
throughput, and the servers' CPU (the workers', summed)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import _workloads as w
from ._procs import Proc
from ._report import Row
from ._stats import median

WORKLOADS = ("background", "create")


def worker_pids(parent: int) -> list[int]:
    """The live children of `parent` (the workers of `--workers N`)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent:
            found.append(int(stat.parent.name))
    return found


def wait_workers(proc: Proc, n: int, deadline: float = 60.0) -> list[int]:
    """Until `proc`'s log says all `n` workers listen; their pids."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.log_path.read_text(errors="replace").count("listening on http://") >= n:
            return worker_pids(proc.pid)
        time.sleep(0.1)
    raise RuntimeError(f"{n} workers not listening after {deadline}s; see {proc.log_path}")


def workers(bench: w.Bench) -> w.Result:
    one = bench.server("workers-1")
    two = bench.server("workers-2", "--workers", "2")
    pids = {one.url: [one.pid], two.url: wait_workers(two, 2)}

    def side(proc: Proc, workload: str) -> Callable[[], dict[str, Any]]:
        spec = {"poll_interval": w.BACKGROUND_POLL_INTERVAL} if workload == "background" else {}
        return lambda: bench.timed(workload, proc, server_pids=pids[proc.url], **spec)

    details: dict[str, Any] = {}
    rows: list[Row] = []
    for workload in WORKLOADS:
        pairs = w._paired(bench.size.runs, side(one, workload), side(two, workload))
        ones, twos = [a for a, _ in pairs], [b for _, b in pairs]
        ratio = median([b["ops_per_s"] / a["ops_per_s"] for a, b in pairs if a["ops_per_s"]])
        details[workload] = {"one": ones, "two": twos, "ratio": ratio}
        label = f"workers {bench.store}"
        rows += [
            Row(label, f"{workload}/s, 1 process", w._med(ones, "ops_per_s"), "/s"),
            Row(label, f"{workload}/s, --workers 2", w._med(twos, "ops_per_s"), "/s"),
            Row(label, f"{workload} ratio --workers 2 / 1", ratio),
            Row(label, f"{workload} server CPU, 1 process", w._med(ones, "server_cpu")),
            Row(label, f"{workload} server CPU, --workers 2", w._med(twos, "server_cpu")),
        ]
    one.kill()
    two.kill()
    return details, rows
