"""`python -m server` / `durable-responses`: run the server with Hypercorn.

Start-up problems (a bad setting, an agent that does not import, a store that cannot be
opened, a port already taken) are one line on stderr and exit status 2, never a
traceback. The listening sockets are bound before the app starts, so a second server on a
taken port exits before its runtime could recover anybody's responses.

A PostgreSQL server that cannot be reached yet is not a start-up problem: the server
starts, answers 503 and retries (server/_store_wait.py). A permanent error met by a later
attempt (a wrong password, say) is logged, and the process exits 2 then.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import gc
import importlib
import logging
import math
import os
import signal
import sys
from pathlib import Path
from typing import Any

from hypercorn.asyncio import serve
from hypercorn.config import Config
from starlette.applications import Starlette
from starlette.types import ASGIApp

from recovery import (
    Agent,
    StoreOpenError,
    StoreUnreachableError,
    Workflow,
    open_store,
    redacted,
    sqlite_path,
)

from ._app import (
    create_app,
    default_model,
    halt_store_wait,
    load_keys,
    store_failure,
    wait_stopped,
)
from ._flags import parse_settings
from ._logging import configure_logging
from ._metrics import MetricsListener
from ._settings import Settings, named_agents
from ._workers import Supervisor, WorkerSockets

log = logging.getLogger("server")

# Added to the shutdown grace and the longest tool timeout to bound the app's shutdown:
# the drain's store writes and lease release, with room to spare.
SHUTDOWN_MARGIN = 10.0
ORPHAN_CHECK_INTERVAL = 0.5


class StartupError(Exception):
    """A setting or file the server cannot start with; printed without a traceback."""


def load_agent(spec: str, agent_path: str | None = None) -> Agent | Workflow:
    """Import `module:attribute`: an Agent, a Workflow, or a callable returning either.
    The module is searched for in the `agent_path` folders, then the working directory
    (as uvicorn does: the console script, unlike `python -m`, does not search it), then
    the installed packages."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise StartupError(f"--agent must look like module:attribute, got {spec!r}")
    _search_first([*(agent_path or "").split(os.pathsep), os.getcwd()])
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise StartupError(f"cannot import the agent module {module_name!r}: {exc}") from exc
    try:
        value: Any = getattr(module, attribute)
    except AttributeError:
        raise StartupError(f"module {module_name!r} has no attribute {attribute!r}") from None
    if callable(value) and not isinstance(value, Agent | Workflow):
        value = value()
    if not isinstance(value, Agent | Workflow):
        raise StartupError(
            f"{spec} is a {type(value).__name__}, not a recovery.Agent or recovery.Workflow"
        )
    return value


def _search_first(folders: list[str]) -> None:
    for folder in reversed([f for f in folders if f]):
        if not Path(folder).is_dir():
            raise StartupError(f"--agent-path: {folder} is not a folder")
        resolved = str(Path(folder).resolve())
        if resolved not in sys.path:
            sys.path.insert(0, resolved)


async def check_store(settings: Settings) -> None:
    """A store that cannot be opened is a StartupError, unless its server cannot be
    reached now: the app then starts and retries (server/_store_wait.py), logging it."""
    path = sqlite_path(settings.db)
    if path is not None:
        check_writable(path)
    try:
        async with open_store(settings.db):
            pass
    except StoreUnreachableError:
        return
    except StoreOpenError as exc:
        raise StartupError(str(exc)) from exc


def check_writable(db: Path) -> None:
    """A store folder (or file) this process cannot write, named with the uids involved:
    the usual cause is a bind mount owned by the host user, not the container's."""
    target = db if db.exists() else db.parent
    if not target.exists() or os.access(target, os.W_OK):
        return
    owner = target.stat().st_uid
    raise StartupError(
        f"cannot write {target} (owned by uid {owner}) as uid {os.getuid()}: give it to this"
        f" user (chown -R {os.getuid()}:{os.getgid()} on the host for a bind mount), or run"
        f" the container as its owner (docker run --user {owner})"
    )


def check_keys(settings: Settings, *, warn: bool = True) -> None:
    try:
        keys = load_keys(settings)
    except ValueError as exc:
        raise StartupError(str(exc)) from exc
    if keys.open and settings.require_keys:
        raise StartupError(
            "no API keys are configured and --require-keys is set; give --api-keys or "
            "--keys-file, or set DURABLE_RESPONSES_REQUIRE_KEYS=false to run open on purpose"
        )
    if keys.open and warn:
        log.warning("no API keys configured: anyone who can reach this server can use it")


def shutdown_timeout(settings: Settings, *agents: Agent | Workflow) -> float:
    """How long Hypercorn waits for the app to shut down. The runtime gives turns the
    grace period, then waits for every tool body still running, which is bounded by its
    tool's timeout; a tool without one is waited for as long as it runs, and so is the
    server. A workflow's steps have no timeout: when a workflow is served, the server
    waits as long as they run too. A finite limit would have Hypercorn give up on the
    lifespan and asyncio cancel every task, an async step's included and the task that
    waits for a thread step: the step left `claimed` (a survivor fails closed a step
    that ran, G4) and, were the turn handed over, another process driving it while the
    thread still acts (G3, G8)."""
    if any(isinstance(a, Workflow) for a in agents):
        return math.inf
    timeouts = [t.timeout for a in agents if isinstance(a, Agent) for t in a.tools]
    if any(timeout is None for timeout in timeouts):
        return math.inf
    return (
        settings.shutdown_grace + max((t or 0.0 for t in timeouts), default=0.0) + SHUTDOWN_MARGIN
    )


def hypercorn_config(settings: Settings, *agents: Agent | Workflow) -> Config:
    config = Config()
    config.bind = [f"{settings.host}:{settings.port}"]
    if settings.metrics_port is not None:
        config.bind.append(f"{settings.host}:{settings.metrics_port}")
    config.accesslog = None  # server/_access.py logs requests, with their tenant
    config.errorlog = logging.getLogger("hypercorn.error")
    config.graceful_timeout = settings.shutdown_grace
    config.shutdown_timeout = shutdown_timeout(settings, *agents)
    config.websocket_ping_interval = settings.ws_ping_interval or None
    # A WebSocket message over the limit is refused by the app with an `error` event, the
    # socket staying open (server/_websocket_session.py); Hypercorn stops reading one at
    # twice the limit and closes the socket (1009), so that none is held whole past that.
    config.websocket_max_message_size = 2 * settings.ws_message_limit
    return config


def listen(config: Config) -> None:
    """Bind every address now and hand the sockets to Hypercorn by descriptor, so that
    a taken port is a clear start-up error before the app (and its runtime) starts."""
    config.bind = [f"fd://{fd}" for fd in bind_all(config.bind)]


def bind_all(addresses: list[str]) -> list[int]:
    """A listening socket's descriptor for each `host:port`, or a StartupError naming the
    one that cannot be bound (and none left open)."""
    descriptors: list[int] = []
    try:
        for bind in addresses:
            one = Config()
            one.bind = [bind]
            try:
                [sock] = one.create_sockets().insecure_sockets
            except OSError as exc:
                raise StartupError(f"cannot listen on {bind}: {_why(exc)}") from None
            descriptors.append(sock.detach())
    except BaseException:
        for fd in descriptors:
            os.close(fd)
        raise
    return descriptors


def bind_workers(settings: Settings) -> list[WorkerSockets]:
    """The API socket, shared by every worker, and worker i's metrics socket on
    --metrics-port + i."""
    addresses = [f"{settings.host}:{settings.port}"]
    if settings.metrics_port is not None:
        addresses += [
            f"{settings.host}:{settings.metrics_port + i}" for i in range(settings.workers)
        ]
    api, *metrics = bind_all(addresses)
    parent = os.getpid()
    return [
        WorkerSockets(i, parent, api, metrics[i] if metrics else None)
        for i in range(settings.workers)
    ]


def _why(exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return "the address is already in use (another server? choose another port)"
    if exc.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges)"
    return exc.strerror or str(exc)


def load_agents(settings: Settings) -> tuple[Agent | Workflow | None, dict[str, Agent | Workflow]]:
    """The default agent (the built-in one when no agent at all is given; none when only
    named agents are) and the named agents."""
    named = {
        name: load_agent(spec, settings.agent_path)
        for name, spec in named_agents(settings.agents).items()
    }
    if settings.agent:
        return load_agent(settings.agent, settings.agent_path), named
    return (None if named else Agent()), named


async def run(settings: Settings, worker: WorkerSockets | None = None) -> None:
    """Serve until SIGTERM or SIGINT: alone, binding the ports, or as one of --workers on
    the sockets the parent bound."""
    if worker is not None and settings.metrics_port is not None:
        settings = settings.model_copy(
            update={"metrics_port": settings.metrics_port + worker.index}
        )
    agent, named = load_agents(settings)
    check_keys(settings, warn=worker is None)  # the parent of --workers has warned
    await check_store(settings)
    app = create_app(agent, settings=settings, agents=named)
    hosted = [a for a in (agent, *named.values()) if a is not None]
    config = hypercorn_config(settings, *hosted)
    if worker is None:
        listen(config)
    else:
        config.bind = [f"fd://{fd}" for fd in worker.fds]

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    orphan_watch = (
        None if worker is None else asyncio.create_task(stop_when_orphaned(worker.parent, stop))
    )
    if agent is None:
        model = "none (named agents only)"
    elif isinstance(agent, Workflow):
        model = f"workflow {agent.name}"
    else:
        model = (agent.model or default_model(settings)).name
    log.info(
        "durable-responses listening on http://%s:%d (store: %s, model: %s, agent: %s%s)",
        settings.host,
        settings.port,
        redacted(settings.db),
        model,
        settings.agent or ("none" if agent is None else "built-in"),
        "" if worker is None else f", worker {worker.index + 1} of {settings.workers}",
    )
    if named:
        log.info(
            "named agents: %s",
            ", ".join(f"{n} ({s})" for n, s in named_agents(settings.agents).items()),
        )
    served: ASGIApp = app
    if settings.metrics_port is not None:
        served = MetricsListener(app, settings.metrics_port)
        log.info("metrics on http://%s:%d/metrics", settings.host, settings.metrics_port)
    # The start-up heap (modules, pydantic models, the app) lives as long as the process:
    # frozen, full collections stop walking it (48 ms each here; bench/README.md, "CPU
    # budget per background response"). Collected first, so no garbage is frozen.
    gc.collect()
    gc.freeze()
    try:
        trigger = functools.partial(_until_stopped, stop, app)
        await serve(served, config, shutdown_trigger=trigger)  # type: ignore[arg-type]
    finally:
        if orphan_watch is not None:
            orphan_watch.cancel()
        context = getattr(app.state, "context", None)
        if context is not None and context.runtime.failure is not None:
            raise RuntimeStopped from None  # its cause is logged where it happened
        if store_failure(app) is not None:
            raise StoreFailed from None  # logged where it happened
    log.info("durable-responses stopped")


class RuntimeStopped(Exception):
    """The runtime stopped for good: the process exits non-zero, to be restarted."""


class StoreFailed(Exception):
    """A store unreachable at start-up turned out unusable for good (a wrong password, a
    missing database): the process exits 2, as when that is found at the first try."""


async def stop_when_orphaned(parent: int, stop: asyncio.Event) -> None:
    """A worker whose parent died (SIGKILL, OOM) stops as on SIGTERM rather than serve on
    unsupervised: the parent polls nothing then, and restarts nothing. `parent` is the
    pid the parent wrote down, so a death before this worker got here counts too."""
    while os.getppid() == parent:  # noqa: ASYNC110  (no event says a parent died)
        await asyncio.sleep(ORPHAN_CHECK_INTERVAL)
    log.warning("the parent of --workers died; this worker stops")
    stop.set()


async def _until_stopped(stop: asyncio.Event, app: Starlette) -> None:
    """Hypercorn's shutdown trigger: SIGINT or SIGTERM, or the runtime stopping for good
    (or, while the store is waited for, an error that does not pass by itself)."""
    waits = [
        asyncio.ensure_future(stop.wait()),
        asyncio.ensure_future(wait_stopped(app)),
    ]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
        halt_store_wait(app)


def supervise(settings: Settings, argv: list[str]) -> int:
    """--workers N > 1: check what every worker would check, bind the ports, then run
    the workers (server/_workers.py) until they all stop."""
    load_agents(settings)
    check_keys(settings)
    asyncio.run(check_store(settings))
    sockets = bind_workers(settings)
    log.info(
        "durable-responses starting %d workers on http://%s:%d",
        settings.workers,
        settings.host,
        settings.port,
    )
    return Supervisor(argv, sockets).run()


def main(argv: list[str] | None = None) -> None:
    args = argv if argv is not None else sys.argv[1:]
    settings = parse_settings(args)
    configure_logging(settings.log_level, settings.log_format)
    worker = WorkerSockets.from_environment()
    try:
        if worker is None and settings.workers > 1:
            raise SystemExit(supervise(settings, args))
        asyncio.run(run(settings, worker))
    except StartupError as exc:
        print(f"durable-responses: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except RuntimeStopped:
        raise SystemExit(1) from None
    except StoreFailed:
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        pass
