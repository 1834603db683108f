"""`python -m server` / `durable-responses`: run the server with Hypercorn."""

from __future__ import annotations

import asyncio
import importlib
import logging
import signal
import sys
from typing import Any

from hypercorn.asyncio import serve
from hypercorn.config import Config
from pydantic import ValidationError

from recovery import Agent, Workflow
from store import StoreOpenError, open_store

from ._app import create_app, default_model, load_keys
from ._logging import configure_logging
from ._settings import Settings

log = logging.getLogger("server")


class StartupError(Exception):
    """A setting or file the server cannot start with; printed without a traceback."""


def load_agent(spec: str) -> Agent | Workflow:
    """Import `module:attribute`: an Agent, a Workflow, or a callable returning either."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise StartupError(f"--agent must look like module:attribute, got {spec!r}")
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


async def check_store(settings: Settings) -> None:
    try:
        async with open_store(settings.db):
            pass
    except StoreOpenError as exc:
        raise StartupError(str(exc)) from exc


def check_keys(settings: Settings) -> None:
    try:
        keys = load_keys(settings)
    except ValueError as exc:
        raise StartupError(str(exc)) from exc
    if keys.open and settings.require_keys:
        raise StartupError(
            "no API keys are configured and --require-keys is set; give --api-keys or "
            "--keys-file, or set DURABLE_RESPONSES_REQUIRE_KEYS=false to run open on purpose"
        )
    if keys.open:
        log.warning("no API keys configured: anyone who can reach this server can use it")


async def run(settings: Settings) -> None:
    agent = load_agent(settings.agent) if settings.agent else Agent()
    check_keys(settings)
    await check_store(settings)
    app = create_app(agent, settings=settings)
    config = Config()
    config.bind = [f"{settings.host}:{settings.port}"]
    config.accesslog = (
        logging.getLogger("hypercorn.access") if settings.log_level == "debug" else None
    )
    config.errorlog = logging.getLogger("hypercorn.error")
    config.graceful_timeout = settings.shutdown_grace

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if isinstance(agent, Workflow):
        model = f"workflow {agent.name}"
    else:
        model = (agent.model or default_model(settings)).name
    log.info(
        "durable-responses listening on http://%s:%d (store: %s, model: %s, agent: %s)",
        settings.host,
        settings.port,
        settings.db,
        model,
        settings.agent or "built-in",
    )
    await serve(app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]
    log.info("durable-responses stopped")


def main(argv: list[str] | None = None) -> None:
    try:
        settings = Settings(_cli_parse_args=argv if argv is not None else sys.argv[1:])
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)
        )
        print(f"durable-responses: invalid settings: {problems}", file=sys.stderr)
        raise SystemExit(2) from None
    configure_logging(settings.log_level, settings.log_format)
    try:
        asyncio.run(run(settings))
    except StartupError as exc:
        print(f"durable-responses: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        pass
