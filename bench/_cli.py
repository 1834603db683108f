"""`python -m bench`: run the workloads, print the table, write the JSON results."""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import _postgres as pg
from . import _reference as ref
from . import _workers as workers
from . import _workloads as w
from ._procs import REPO
from ._report import Row, table, write_json
from ._sizes import SIZES

WORKLOADS = (
    "poll",
    "create",
    "stream",
    "background",
    "durability",
    "recovery",
    "memory",
    "scale",
    "slow-readers",
    "ceiling",
    "follow",
    "scale-out",
    "workers",
)
# They kill, measure or fill the server.
NEEDS_OWN_SERVER = {
    "recovery",
    "memory",
    "scale",
    "slow-readers",
    "follow",
    "scale-out",
    "workers",
}
# They read or grow the SQLite file itself.
SQLITE_ONLY = {"scale", "slow-readers"}
# Two server processes on one database.
POSTGRES_ONLY = {"follow", "scale-out"}
REFERENCE_UNAVAILABLE = 3  # the exit status when --reference cannot install or start it
# What --store both compares (the rest runs with --store sqlite or postgres).
BOTH = {"poll", "create", "stream", "durability", "background", "recovery", *POSTGRES_ONLY}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="durable-responses benchmark suite (bench/README.md)"
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument(
        "--base-url",
        help="measure this server instead of starting one (poll, create, stream, background, "
        "durability; the ceiling still runs locally; recovery, memory, scale, slow-readers are "
        "skipped)",
    )
    parser.add_argument("--runs", type=int, help="runs per figure (default: by size)")
    parser.add_argument(
        "--out",
        type=Path,
        help="the JSON results (default: bench/results/latest.json, with --reference "
        "bench/results/reference.json)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=WORKLOADS,
        metavar="WORKLOAD",
        help=f"run only these workloads ({', '.join(WORKLOADS)})",
    )
    parser.add_argument(
        "--store",
        choices=("sqlite", "postgres", "both"),
        default="sqlite",
        help="the servers' store: SQLite files, databases of a throwaway PostgreSQL the bench "
        "starts (fsync on), or both in alternating rounds with their ratios (bench/README.md)",
    )
    parser.add_argument(
        "--pg-synchronous-commit",
        choices=("on", "off"),
        default="on",
        help="PostgreSQL's synchronous_commit for the bench's databases: on (the default: a "
        "commit waits for its WAL flush) or off (like SQLite's synchronous=NORMAL, a commit "
        "survives the server process's crash but not the machine's)",
    )
    parser.add_argument(
        "--reference",
        action="store_true",
        help=f"measure poll, create, stream and background against the reference ({ref.PIN}, "
        "installed once into a virtual environment of its own under ~/.cache) in alternating "
        "rounds, with the ceiling, and nothing else (bench/README.md)",
    )
    args = parser.parse_args(argv)
    if args.base_url and args.store != "sqlite":
        parser.error("--base-url measures that server: leave --store at sqlite")
    if args.reference and (args.base_url or args.store != "sqlite"):
        parser.error("--reference starts both servers itself, on SQLite: no --base-url or --store")
    if args.out is None:
        args.out = (
            REPO / "bench" / "results" / ("reference.json" if args.reference else "latest.json")
        )
    if args.runs is not None and not 1 <= args.runs <= 50:
        parser.error("--runs must be between 1 and 50")
    return args


def _raise_fd_limit() -> None:
    """Children inherit it: 1,000 streams need more than the usual 1,024 descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 16_384 if hard == resource.RLIM_INFINITY else min(hard, 16_384)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def _meta(args: argparse.Namespace) -> dict[str, Any]:
    size = SIZES[args.size].with_runs(args.runs)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, check=False
    ).stdout.decode()
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "size": args.size,
        "runs": size.runs,
        "heavy_runs": size.heavy_runs,
        "base_url": args.base_url,
        "store": args.store,
        "reference": ref.PIN if args.reference else None,
        "pg_synchronous_commit": args.pg_synchronous_commit if args.store != "sqlite" else None,
        "commit": commit.strip(),
        "cpus": os.cpu_count(),
        "machine": f"{platform.machine()} {platform.system()} {platform.release()}",
        "python": platform.python_version(),
    }


def _chosen(args: argparse.Namespace) -> set[str]:
    """The workloads to run, less those this store or --base-url cannot run (said so)."""
    if args.reference:
        compared = set(ref.WORKLOADS) | {"ceiling"}  # the ceiling always runs beside them
        chosen = set(args.only or compared)
        if chosen - compared:
            print(f"skipping {', '.join(sorted(chosen - compared))}: not run with --reference")
        return chosen & set(ref.WORKLOADS)
    excluded = {
        "sqlite": POSTGRES_ONLY,
        "postgres": SQLITE_ONLY,
        "both": set(WORKLOADS) - BOTH,
    }[args.store]
    if args.base_url:
        excluded = excluded | NEEDS_OWN_SERVER
    if args.only:
        chosen = set(args.only)
        skipped = chosen & excluded
        if skipped:
            print(f"skipping {', '.join(sorted(skipped))}: not run with this --store/--base-url")
    else:
        chosen = set(WORKLOADS)
    return chosen - excluded


def _steps(
    bench: w.Bench, args: argparse.Namespace, chosen: set[str]
) -> list[tuple[set[str], str, Callable[[], w.Result]]]:
    store = args.store
    if args.reference:
        return [(set(ref.WORKLOADS), "reference", lambda: ref.compare(bench, chosen))]
    if store == "both":
        return [
            (
                {"poll", "create", "stream", "durability", "background"},
                "pg-vs-sqlite",
                lambda: pg.compare(bench, chosen),
            ),
            ({"recovery"}, "recovery", lambda: pg.recovery_both(bench)),
            ({"follow"}, "follow", lambda: pg.follow(bench)),
            ({"scale-out"}, "scale-out", lambda: pg.scale_out(bench)),
        ]
    main = w.main_server(bench) if chosen - NEEDS_OWN_SERVER else None
    return [
        ({"poll", "ceiling"}, "poll+ceiling", lambda: w.poll_and_ceiling(bench, main)),
        ({"create"}, "create", lambda: w.create(bench, main)),
        (
            {"stream", "durability"},
            "stream+durability",
            lambda: w.stream_and_durability(bench, main),
        ),
        ({"background"}, "background", lambda: w.background(bench, main)),
        ({"recovery"}, "recovery", lambda: w.recovery(bench)),
        ({"memory"}, "memory", lambda: w.memory(bench)),
        ({"scale"}, "scale", lambda: w.scale(bench)),
        ({"slow-readers"}, "slow-readers", lambda: w.slow_readers(bench)),
        ({"follow"}, "follow", lambda: pg.follow(bench)),
        ({"scale-out"}, "scale-out", lambda: pg.scale_out(bench)),
        ({"workers"}, "workers", lambda: workers.workers(bench)),
    ]


def run(args: argparse.Namespace) -> tuple[dict[str, Any], list[Row]]:
    size = SIZES[args.size].with_runs(args.runs)
    chosen = _chosen(args)
    details: dict[str, Any] = {}
    rows: list[Row] = []
    _raise_fd_limit()
    with tempfile.TemporaryDirectory(prefix="durable-bench-") as tmp:
        bench = w.Bench(size, Path(tmp), args.base_url)
        bench.store = "sqlite" if args.store == "both" else args.store
        if args.pg_synchronous_commit == "off":
            bench.pg_settings["synchronous_commit"] = "off"
        try:
            if args.store != "sqlite":
                pg.start(bench)
            for names, label, step in _steps(bench, args, chosen):
                if not names & chosen:
                    continue
                began = time.monotonic()
                print(f"running {label} ...", flush=True)
                details[label], more = step()
                rows += more
                print(f"  done in {time.monotonic() - began:.1f}s", flush=True)
        finally:
            bench.close()
            pg.stop(bench)
    return details, rows


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    began, load_before = time.monotonic(), os.getloadavg()
    try:
        details, rows = run(args)
    except ref.ReferenceUnavailable as exc:
        print(f"reference unavailable: {exc}", file=sys.stderr)
        sys.exit(REFERENCE_UNAVAILABLE)
    meta = _meta(args)
    meta["seconds"] = round(time.monotonic() - began, 1)
    # The machine's other load moves every absolute figure: (1, 5, 15-minute averages).
    meta["load_average"] = {"before": load_before, "after": os.getloadavg()}
    print()
    if args.reference:
        print(
            f"durable-responses bench against {ref.PIN}, size {args.size}, "
            f"{meta['runs']} rounds, {meta['date']}, {meta['cpus']} CPUs ({meta['machine']}), "
            f"load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after"
        )
    else:
        print(
            f"durable-responses bench, store {args.store}, size {args.size}, "
            f"median of {meta['runs']} runs "
            f"({meta['heavy_runs']} for recovery, memory and slow-readers), "
            f"{meta['date']}, {meta['cpus']} CPUs ({meta['machine']})"
        )
    if "reference" in details:
        print(f"\nevery round ({ref.PIN} beside this server):")
        print(ref.rounds_table(details["reference"]))
        print("\nmedians and targets:")
    print(table(rows))
    write_json(args.out, meta, details, rows)
    print(f"\nresults written to {args.out}")
    sys.stdout.flush()
