"""`python -m bench --reference`: this server against the reference, in the same run.

The reference is `azure-ai-agentserver-responses` (pinned below) hosting a minimal echo
handler written for the bench (`bench/reference/echo_server.py`: 10 deltas, no delay,
resilient background, `/v1` routes). The package is installed from PyPI into a virtual
environment of its own under the user's cache directory, once, and is never one of the
project's dependencies: the bench starts that environment's Python on the handler and
talks to it over HTTP only.

Both servers and the ceiling app are up at once. Each round measures every workload on
this server and on the reference back to back (`poll` and `background` the ceiling
too), the order reversed every other round so that drift cancels; every ratio is taken
within a round, and the table gives the median of the rounds' ratios.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import _workloads as w
from ._procs import REPO, Proc
from ._report import POLL_CEILING_TARGET, Row, at_least, fmt, grid
from ._stats import median

PACKAGE = "azure-ai-agentserver-responses"
VERSION = "2.3.0"
PIN = f"{PACKAGE}=={VERSION}"
HANDLER = REPO / "bench" / "reference" / "echo_server.py"
INSTALL_TIMEOUT = 600.0  # seconds for pip (about 30 s here)
START_DEADLINE = 60.0  # seconds for the reference to answer /healthz (a few here)

WORKLOADS = ("poll", "create", "stream", "background")  # what --reference compares
WITH_CEILING = {"poll", "background"}  # their targets are ratios to the ceiling too
UNITS = {"poll": "req/s", "create": "req/s", "stream": "responses/s", "background": "completed/s"}
OURS, REFERENCE, CEILING = "this server", "reference", "ceiling"
FACTOR = 3.0  # this server against the reference, every workload
BACKGROUND_HALF_CEILING_TARGET = 0.40  # background completed/s over half the ceiling's req/s
MIN_ROUNDS = 3  # a target is judged on the median of at least this many rounds
TARGETS = {  # ratio -> its lower bound
    f"{OURS}/{REFERENCE}": FACTOR,
    "poll/ceiling": POLL_CEILING_TARGET,
    "background/(ceiling/2)": BACKGROUND_HALF_CEILING_TARGET,
}
# Not a target: on a busy machine each server gets what share of a core it can, and
# that share can differ between two servers measured a few seconds apart; the work each
# does per CPU-second moves less (bench/README.md).
PER_CPU = f"{OURS}/{REFERENCE} per CPU-second"

Round = dict[str, dict[str, dict[str, Any]]]  # workload -> side -> a load's result


class ReferenceUnavailable(RuntimeError):
    """The reference could not be installed or started here (the message says why)."""


def venv_dir() -> Path:
    """Where the reference's environment lives: kept across runs, one per version."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "durable-responses-bench" / f"reference-{VERSION}"


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _installed(venv: Path) -> bool:
    marker = venv / "bench-installed"
    return marker.is_file() and marker.read_text().strip() == PIN


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One installer at a time (a bench and a test may start together)."""
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run(argv: list[str], what: str, timeout: float) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReferenceUnavailable(f"{what}: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).decode(errors="replace")[-1500:]
        raise ReferenceUnavailable(f"{what} failed (exit {done.returncode}):\n{tail}")


def ensure_installed(log: Callable[[str], None] = print) -> Path:
    """The reference environment's Python, creating the environment first if needed."""
    venv = venv_dir()
    if _installed(venv):
        return _python(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with _locked(venv.parent / f"{venv.name}.lock"):
        if not _installed(venv):
            shutil.rmtree(venv, ignore_errors=True)  # a half-made one from an interrupted run
            log(f"installing {PIN} into {venv} (once)")
            _run([sys.executable, "-m", "venv", str(venv)], "python -m venv", 120)
            pip = [str(_python(venv)), "-m", "pip", "install", "--quiet"]
            _run([*pip, "--disable-pip-version-check", PIN], f"pip install {PIN}", INSTALL_TIMEOUT)
            (venv / "bench-installed").write_text(PIN + "\n")
    return _python(venv)


def start(bench: w.Bench, python: Path) -> Proc:
    """The echo handler on the reference, on a free port, its state in the work dir."""
    state = bench.workdir / "reference-state"
    argv = [str(python), str(HANDLER), "--port", "{port}", "--state", str(state)]
    proc = Proc(argv, bench.workdir / "reference.log", name=f"the reference ({PIN})")
    bench.servers.append(proc)
    try:
        return proc.start(START_DEADLINE)
    except RuntimeError as exc:
        log = proc.log_path.read_text(errors="replace")[-1500:] if proc.log_path.exists() else ""
        raise ReferenceUnavailable(f"{exc}\n{log}") from exc


def _sides(workload: str, ceiling: bool) -> list[str]:
    return [OURS, REFERENCE] + ([CEILING] if ceiling and workload in WITH_CEILING else [])


def compare(bench: w.Bench, chosen: set[str]) -> w.Result:
    """Every chosen workload on this server, the reference and (for poll and
    background) the ceiling, in alternating rounds; the rounds' ratios and targets."""
    python = ensure_installed(bench.log)
    # No log line per request or response on either side: the reference's library logs
    # at WARNING (echo_server.py), and this server's one line per finished response is INFO.
    ours = bench.server("main", "--log-level", "warning")
    ref = start(bench, python)
    ceiling = bench.ceiling() if chosen & WITH_CEILING else None
    procs = {OURS: ours, REFERENCE: ref, CEILING: ceiling}
    ids = {CEILING: ["resp_ceiling"]}
    if "poll" in chosen:
        for side, proc in ((OURS, ours), (REFERENCE, ref)):
            ids[side] = bench.load("fill", proc.url, count=bench.size.poll_ids, timeout=300)["ids"]

    def measure(workload: str, side: str) -> dict[str, Any]:
        proc = procs[side]
        if workload == "poll" or side == CEILING:  # the ceiling answers `poll` only
            return bench.timed("poll", proc, ids=ids[side])
        if workload == "background":
            return bench.timed("background", proc, poll_interval=w.BACKGROUND_POLL_INTERVAL)
        if workload == "stream":
            return bench.timed("stream", proc, background=False)
        return bench.timed("create", proc)

    rounds: list[Round] = []
    for number in range(bench.size.runs):
        got: Round = {}
        for workload in (x for x in WORKLOADS if x in chosen):
            sides = _sides(workload, ceiling is not None)
            order = sides if number % 2 == 0 else sides[::-1]
            got[workload] = {side: measure(workload, side) for side in order}
        rounds.append(got)
        bench.log(f"  round {number + 1}: {_summary(got)}")
    found = ratios(rounds)
    details = {
        "package": PIN,
        "venv": str(venv_dir()),
        "rounds": rounds,  # workload -> side -> the load's result, per round
        "ratios": found,  # workload -> ratio -> its value per round
        "medians": {x: {name: median(v) for name, v in got.items()} for x, got in found.items()},
    }
    return details, rows(rounds)


def _summary(got: Round) -> str:
    """A round's ratios in a line: `poll 3.10x (3.52x per CPU-s), ..., poll/ceiling 0.81`."""
    parts = []
    for (workload, name), value in round_ratios(got).items():
        if name == f"{OURS}/{REFERENCE}":
            parts.append(f"{workload} {value:.2f}x")
        elif name == PER_CPU:
            parts[-1] += f" ({value:.2f}x per CPU-s)"
        else:
            parts.append(f"{name} {value:.2f}")
    return ", ".join(parts)


def _rate(result: dict[str, Any] | None) -> float:
    return float("nan") if result is None else float(result["ops_per_s"])


def _per_cpu(result: dict[str, Any]) -> float:
    """Operations per second of the server's CPU time (see PER_CPU)."""
    return _divide(_rate(result), float(result.get("server_cpu") or 0.0))


def _divide(a: float, b: float) -> float:
    return a / b if b else float("nan")


def round_ratios(got: Round) -> dict[tuple[str, str], float]:
    """One round's ratios, by (workload, ratio): this server over the reference for
    each workload (by rate, and by rate per CPU-second), and the ceiling targets' two."""
    found: dict[tuple[str, str], float] = {}
    for workload, sides in got.items():
        ours, ref = sides[OURS], sides[REFERENCE]
        found[workload, f"{OURS}/{REFERENCE}"] = _divide(_rate(ours), _rate(ref))
        found[workload, PER_CPU] = _divide(_per_cpu(ours), _per_cpu(ref))
    if CEILING in got.get("poll", {}):
        poll = got["poll"]
        found["poll", "poll/ceiling"] = _divide(_rate(poll[OURS]), _rate(poll[CEILING]))
    if CEILING in got.get("background", {}):
        background = got["background"]
        half = _rate(background[CEILING]) / 2
        found["background", "background/(ceiling/2)"] = _divide(_rate(background[OURS]), half)
    return found


def ratios(rounds: list[Round]) -> dict[str, dict[str, list[float]]]:
    """Each ratio's value in every round: workload -> ratio -> values."""
    found: dict[str, dict[str, list[float]]] = {}
    for got in rounds:
        for (workload, name), value in round_ratios(got).items():
            found.setdefault(workload, {}).setdefault(name, []).append(value)
    return found


def _target_text(name: str) -> str:
    if name not in TARGETS:
        return ""
    bound = TARGETS[name]
    return f">= {bound:g}x" if name == f"{OURS}/{REFERENCE}" else f">= {bound:.2f}"


def _unit(workload: str, side: str) -> str:
    return "req/s" if side == CEILING else UNITS[workload]


def rows(rounds: list[Round]) -> list[Row]:
    """The table: each side's medians, and each ratio's median with its target (judged
    only on at least MIN_ROUNDS rounds)."""
    found = ratios(rounds)
    enough = len(rounds) >= MIN_ROUNDS
    table: list[Row] = []
    for workload in WORKLOADS:
        runs = [got[workload] for got in rounds if workload in got]
        if not runs:
            continue
        for side in _sides(workload, CEILING in runs[0]):
            results = [r[side] for r in runs]
            rate = w._med(results, "ops_per_s")
            table += [
                Row(workload, f"{side}: {_unit(workload, side)}", rate, "/s"),
                Row(workload, f"{side}: latency p50", w._med(results, "latency_ms", "p50"), "ms"),
                Row(workload, f"{side}: CPU (cores)", w._med(results, "server_cpu")),
            ]
        for name, values in found.get(workload, {}).items():
            ratio = median(values)
            target = _target_text(name)
            judged = enough and name in TARGETS
            if target and not enough:
                target += f" ({MIN_ROUNDS}+ rounds)"
            met = at_least(ratio, TARGETS[name]) if judged else None
            table.append(Row(workload, f"ratio {name}", ratio, "", target, met))
    return table


def rounds_table(details: dict[str, Any]) -> str:
    """Every round's figures: each side's rate and each ratio, and their medians."""
    rounds: list[Round] = details["rounds"]
    header = ("workload", "figure", *(f"round {n + 1}" for n in range(len(rounds))), "median")
    lines: list[tuple[str, ...]] = []
    for workload in WORKLOADS:
        runs = [got[workload] for got in rounds if workload in got]
        if not runs:
            continue
        for side in _sides(workload, CEILING in runs[0]):
            values = [_rate(r.get(side)) for r in runs]
            lines.append(_line(workload, f"{side}: {_unit(workload, side)}", values, "/s"))
        for name, values in details["ratios"].get(workload, {}).items():
            lines.append(_line(workload, f"ratio {name}", values, ""))
    return grid(header, lines)


def _line(workload: str, figure: str, values: list[float], unit: str) -> tuple[str, ...]:
    return (workload, figure, *(fmt(v, unit) for v in values), fmt(median(values), unit))
