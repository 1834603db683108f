"""Which stage of a background response a sampled stack belongs to (bench/cpu_budget.py).

The samples are those of bench/_cpu_sampler.py: one Python stack each time a thread has
used another few milliseconds of CPU, written by faulthandler ("File ..., line N in
name", innermost first) into one file per thread. Each frame is named here as Python
names its function (`co_qualname`: "TurnRunner._consume", "SQLiteStore.append_events.
<locals>.submit.<locals>.op"), found from its file and line, with its path shortened as
a traceback's reader would ("recovery/_runner.py", "starlette/routing.py",
"asyncio/base_events.py"). The rules of the stack's thread are tried in order, and the
first with a pattern naming a frame of the stack decides, so a specific stage (encoding
inside a checkpoint, the claim inside the create) wins over the broad one around it. A
sample taken inside a collection of the cyclic garbage collector counts as the
collector's, wherever the collection began.
"""

from __future__ import annotations

import ast
import functools
import re
import sysconfig
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

Frame = tuple[str, str]  # (qualified name, shortened path)
Pattern = tuple[str, str]  # (path, or a directory ending in "/"; qualname prefix, "" = any)
Rule = tuple[str, tuple[Pattern, ...]]

# The table's rows, in order: (key, label).
STAGES: tuple[tuple[str, str], ...] = (
    ("parse", "parse and validate (JSON, pydantic models, request rules)"),
    ("admission", "admission (the create transaction)"),
    ("claim", "claim, lease and lane hand-off"),
    ("setup", "turn start and step loop (history, model request)"),
    ("events", "model events (the 10 deltas: model, runner, emitter, sink)"),
    ("encoding", "encoding (JSON of events and snapshots)"),
    ("appends", "commits: event-log appends (fence check, INSERT events)"),
    ("txn", "commits: BEGIN/COMMIT, hand-offs to and from the writer"),
    ("checkpoint", "checkpoint and terminal write"),
    ("poll", "poll GETs (the route: read the snapshot)"),
    ("asgi", "ASGI: Starlette routing, request and response objects, our middleware"),
    ("hypercorn", "HTTP: Hypercorn and h11 (parsing, framing, headers)"),
    ("socket", "HTTP: socket reads and writes (asyncio transports, send/recv)"),
    ("gc", "cyclic garbage collector (wherever a collection began)"),
    ("loop", "event loop (asyncio scheduling, selector)"),
    ("upkeep", "upkeep chores (recovery scan, heartbeat)"),
    ("readers", "aiosqlite reader threads"),
    ("other_threads", "other threads (executor)"),
    ("unaccounted", "threads that ended during the run"),
)


def _in(path: str, *names: str) -> tuple[Pattern, ...]:
    return tuple((path, name) for name in names) if names else ((path, ""),)


_ROUTES = "server/_responses_routes.py"
_RUNNER = "recovery/_runner.py"
_RUNS = "recovery/_runs.py"
_STORE = "store/sqlite/_store.py"

# The event loop's thread.
LOOP_RULES: tuple[Rule, ...] = (
    ("poll", _in(_ROUTES, "get_response") + _in("server/_poll.py", "_snapshot")),
    (
        "parse",
        _in(_ROUTES, "create_params", "_idempotency_key")
        + _in("server/_json_body.py")
        + _in("server/_request_rules.py")
        + _in("server/_request_models.py")
        + _in("server/_validation_base.py")
        + _in("server/_validation_output.py")
        + _in("server/_validation_errors.py")
        + _in("server/_attachments.py")
        + _in("server/_context.py", "read_body")
        + _in("pydantic/")
        + _in("pydantic_core/")
        + _in("recovery/_items.py", "normalize_input"),
    ),
    (
        "encoding",
        _in("json/encoder.py")
        + _in("json/__init__.py", "dumps")
        + _in("recovery/_json.py")
        + _in("recovery/_sinks.py", "encode")
        + _in("server/_sse.py"),
    ),
    ("claim", _in(_RUNS, "Runs.run_claimed", "Runs.claim_and_run", "Runs._runner")),
    ("asgi", _in(_ROUTES, "raw_json")),
    (
        "admission",
        _in(_ROUTES, "create_response", "_create")
        + _in("recovery/_admission.py")
        + _in("recovery/_runtime.py", "Runtime.create")
        + _in("recovery/_references.py")
        + _in(_STORE, "SQLiteStore.create_response"),
    ),
    (
        "checkpoint",
        _in(
            _RUNNER,
            "TurnRunner._finish",
            "TurnRunner._save_terminal",
            "TurnRunner._save_snapshot",
            "TurnRunner._save_checkpoint",
            "TurnRunner._checkpoint",
            "TurnRunner._record_step",
            "TurnRunner._behind_appends",
        )
        + _in(_STORE, "SQLiteStore.save_snapshot")
        + _in("store/sqlite/_journal.py"),
    ),
    (
        "setup",
        _in(_RUNNER, "TurnRunner._start", "TurnRunner._history", "TurnRunner._recorded_step")
        + _in("recovery/_history.py")
        + _in("recovery/_request.py")
        + _in("recovery/_restore.py")
        + _in("recovery/_tool_phase.py"),
    ),
    (
        "events",
        _in(_RUNNER, "TurnRunner._consume", "TurnRunner._stream_model", "TurnRunner._model_step")
        + _in("server/_embedded_model.py")
        + _in("recovery/_observer.py")
        + _in("recovery/_emitter.py")
        + _in("recovery/_parts.py")
        + _in("recovery/_sinks.py")
        + _in("store/_appends.py")
        + _in(_STORE, "SQLiteStore.append_events"),
    ),
    ("setup", _in(_RUNNER)),  # the step loop's own code (`run`, `_run_steps`)
    (
        "claim",
        _in(_RUNS, "Runs._drive", "Runs._free_lane", "Runs._start_next", "Runs.spawn")
        + _in("recovery/_leases.py")
        + _in("recovery/_turn.py"),
    ),
    (
        "upkeep",
        _in("recovery/_upkeep.py") + _in("recovery/_chores.py") + _in("store/sqlite/_health.py"),
    ),
    (
        "txn",
        _in("store/sqlite/_connection.py")
        + _in("store/sqlite/_base.py")
        + _in("recovery/_broker.py")
        + _in("server/_metrics.py", "Metrics.commit"),
    ),
    ("txn", _in("asyncio/selector_events.py", "BaseSelectorEventLoop._read_from_self")),
    ("http", _in("hypercorn/") + _in("h11/") + _in("starlette/") + _in("asyncio/streams.py")),
    ("http", _in("asyncio/selector_events.py", "_SelectorSocketTransport")),
)

# Which part of the HTTP stack an "http" stack is in: its innermost frame of these decides.
HTTP_PARTS: tuple[Rule, ...] = (
    (
        "socket",
        _in("asyncio/selector_events.py", "_SelectorSocketTransport") + _in("asyncio/streams.py"),
    ),
    ("hypercorn", _in("hypercorn/") + _in("h11/") + _in("wsgiref/")),
    ("asgi", _in("starlette/") + _in("anyio/") + _in("server/") + _in("prometheus_client/")),
)

# The store's writer thread (store/sqlite/_connection.py `Writer`): each operation is a
# function defined in the store method that queued it.
WRITER_RULES: tuple[Rule, ...] = (
    (
        "claim",
        _in(
            _STORE,
            "SQLiteStore._claim",
            "SQLiteStore.claim",
            "SQLiteStore.recover",
            "SQLiteStore.renew_leases",
            "SQLiteStore.release_lease",
        ),
    ),
    ("admission", _in(_STORE, "SQLiteStore.create_response") + _in("store/sqlite/_steers.py")),
    (
        "checkpoint",
        _in(_STORE, "SQLiteStore.save_snapshot")
        + _in("store/sqlite/_journal.py")
        + _in("store/sqlite/_items.py"),
    ),
    ("appends", _in(_STORE, "SQLiteStore.append_events") + _in("store/_appends.py")),
    ("upkeep", _in(_STORE, "SQLiteStore.purge", "SQLiteStore.check_writable")),
)

# What each kind of thread's stacks default to when no rule names them.
DEFAULTS = {"loop": "loop", "writer": "txn", "readers": "readers", "lease": "claim"}


@dataclass(frozen=True, slots=True)
class Stack:
    tid: int
    thread: str  # its name
    frames: tuple[Frame, ...]  # outermost first
    gc: int | None  # the generation being collected when it was taken, if any


_LINE = re.compile(r'^  File "(.*)", line (\d+) in (.*)$')


def read_samples(directory: Path, repo: Path) -> Iterator[Stack]:
    """The samples of bench/_cpu_sampler.py's files in `directory` ("TID-NAME.txt")."""
    for path in sorted(directory.glob("*.txt")):
        tid, _, thread = path.stem.partition("-")
        gc: int | None = None  # the generation being collected
        frames: list[Frame] = []
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith(("Stack ", "GC ")):
                if frames:
                    yield Stack(int(tid), thread, tuple(reversed(frames)), gc)
                frames = []
                if line.startswith("GC start"):
                    gc = int(line.split()[-1])
                elif line.startswith("GC stop"):
                    gc = None
            elif match := _LINE.match(line):
                file, number, name = match.groups()
                frames.append((_qualname(file, int(number), name), _short(file, repo)))
        if frames:
            yield Stack(int(tid), thread, tuple(reversed(frames)), gc)


def collections(directory: Path) -> Counter[int]:
    """How many collections of each generation the sampled threads ran."""
    counts: Counter[int] = Counter()
    for path in directory.glob("*.txt"):
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("GC start"):
                counts[int(line.split()[-1])] += 1
    return counts


def _short(file: str, repo: Path) -> str:
    """A frame's path as a traceback's reader shortens it."""
    if "site-packages/" in file:
        return file.split("site-packages/", 1)[1]
    if file.startswith(f"{repo}/"):
        return file[len(str(repo)) + 1 :]
    if file.startswith(f"{_STDLIB}/"):
        return file[len(_STDLIB) + 1 :]
    return file


_STDLIB = sysconfig.get_paths()["stdlib"]


def _qualname(file: str, line: int, name: str) -> str:
    """The qualified name of the function at `line` of `file` (its `co_qualname`), from
    its source; `name` when the source cannot be read. A comprehension or lambda counts as
    the function around it."""
    best: tuple[int, str] | None = None
    for first, last, qualname in _functions(file):
        if first <= line <= last and (best is None or first > best[0]):
            best = (first, qualname)
    return best[1] if best is not None else name


@functools.cache
def _functions(file: str) -> tuple[tuple[int, int, str], ...]:
    try:
        tree = ast.parse(Path(file).read_text())
    except (OSError, SyntaxError, ValueError):
        return ()
    found: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                qualname = prefix + child.name
                found.append((child.lineno, child.end_lineno or child.lineno, qualname))
                visit(child, qualname + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return tuple(found)


def thread_kind(name: str) -> str:
    """loop, writer, readers, lease or other, from the thread's name."""
    if name == "MainThread":
        return "loop"
    if name == "store-writer":
        return "writer"
    if "_connection_worker_thread" in name:
        return "readers"
    if name == "lease-keeper":
        return "lease"
    return "other"


def _matches(frame: Frame, pattern: Pattern) -> bool:
    name, path = frame
    want_path, want_name = pattern
    path_ok = path.startswith(want_path) if want_path.endswith("/") else path == want_path
    if not path_ok:
        return False
    return not want_name or name == want_name or name.startswith(want_name + ".")


def classify(kind: str, stack: Stack) -> str:
    """The stage of one sample of a thread of `kind`."""
    if stack.gc is not None:
        return "gc"
    rules = {"loop": LOOP_RULES, "writer": WRITER_RULES}.get(kind, ())
    stage = DEFAULTS.get(kind, "other_threads")
    for key, patterns in rules:
        if any(_matches(frame, p) for frame in stack.frames for p in patterns):
            stage = key
            break
    return _http_part(stack.frames) if stage == "http" else stage


# Stages spent in libraries: their samples are told apart by the innermost library frame.
LIBRARY_STAGES = frozenset({"asgi", "hypercorn", "socket", "gc", "readers"})
_ENTRY = ("server/_cli.py", "server/__main__.py", "bench/")


def where(stack: Stack, stage: str) -> str:
    """Which function a sample of `stage` points at: for a stage of our own code, the
    innermost frame in server/, recovery/ or store/; for a library's, the innermost frame
    that is not asyncio's; for the event loop's, the innermost."""
    if stage == "loop":  # asyncio's own machinery: its innermost function
        found = list(stack.frames)
    elif stage in LIBRARY_STAGES:
        found = [f for f in stack.frames if not f[1].startswith(("asyncio/", "<frozen"))]
    else:
        found = [
            f
            for f in stack.frames
            if f[1].startswith(("server/", "recovery/", "store/")) and not f[1].startswith(_ENTRY)
        ]
    name, path = (found or list(stack.frames) or [("?", "?")])[-1]
    return f"{name} ({path})"


def _http_part(frames: tuple[Frame, ...]) -> str:
    for frame in reversed(frames):
        for part, patterns in HTTP_PARTS:
            if any(_matches(frame, p) for p in patterns):
                return part
    return "hypercorn"
