"""The ASGI application: routes under /v1 and at the root, the store and runtime
opened for the app's lifetime, and errors in the OpenAI envelope."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute

from recovery import (
    Agent,
    Conversations,
    Inspector,
    Model,
    Runtime,
    RuntimeSettings,
    StoreOpenError,
    StoreUnreachableError,
    Workflow,
    open_store,
)

from . import _conversations_routes, _models_routes, _responses_routes, _websocket
from ._access import AccessLog
from ._auth import Keys
from ._context import AppContext, context, store_wait
from ._embedded_model import EmbeddedModel
from ._errors import EXCEPTION_HANDLERS
from ._metrics import Metrics
from ._middleware import EdgeMiddleware
from ._models_routes import ModelCatalog, UpstreamModels
from ._openapi import build_document, openapi_endpoint
from ._poll import PollShortcut
from ._settings import Settings
from ._sse import StreamSlots
from ._store_wait import StoreWait
from ._upstream import UpstreamModel
from ._upstream_http import HTTPUpstream
from ._upstream_responses import ResponsesUpstreamModel

log = logging.getLogger("server")


def default_model(settings: Settings) -> Model:
    """The upstream model when one is configured (speaking `--upstream-api`), else the
    embedded one."""
    if settings.upstream_base_url:
        key = settings.upstream_api_key
        upstream = ResponsesUpstreamModel if settings.upstream_api == "responses" else UpstreamModel
        return upstream(
            settings.upstream_base_url,
            api_key=key.get_secret_value() if key else None,
            model=settings.upstream_model,
            timeout=settings.upstream_timeout,
        )
    return EmbeddedModel(words=settings.embedded_words, delay_ms=settings.embedded_delay_ms)


def served_models(
    agent: Agent | Workflow | None, agents: Mapping[str, Agent | Workflow], fallback: Model
) -> list[str]:
    """The model ids /v1/models lists for this server's own agents (_models_routes.py)."""
    served = list(agents)
    if isinstance(agent, Workflow):
        served.insert(0, agent.name)
    elif agent is not None:
        model = agent.model or fallback
        if not (isinstance(model, HTTPUpstream) and model.passes_model_through):
            served.insert(0, model.name)
    return served


def upstream_models(settings: Settings) -> UpstreamModels | None:
    """The upstream's model list, when there is an upstream."""
    if not settings.upstream_base_url:
        return None
    key = settings.upstream_api_key
    return UpstreamModels(
        settings.upstream_base_url,
        api_key=key.get_secret_value() if key else None,
        ttl=settings.upstream_models_ttl,
        timeout=min(settings.upstream_timeout, _models_routes.LIST_TIMEOUT),
    )


def load_keys(settings: Settings) -> Keys:
    """The configured API keys; ValueError if they cannot be read."""
    listed = settings.api_keys.get_secret_value() if settings.api_keys else None
    try:
        return Keys.load(listed, settings.keys_file)
    except OSError as exc:
        raise ValueError(f"cannot read the keys file {settings.keys_file}: {exc}") from exc


def runtime_settings(settings: Settings) -> RuntimeSettings:
    return RuntimeSettings(
        lease_ttl=settings.lease_ttl,
        poll_interval=settings.poll_interval,
        cancel_wait=settings.cancel_wait,
        model_retries=settings.model_retries,
        retry_base_delay=settings.retry_base_delay,
        retry_max_delay=settings.retry_max_delay,
        ambiguous_calls=settings.ambiguous_calls,
        max_recoveries=settings.max_recoveries,
        scan_interval=settings.scan_interval,
        shutdown_grace=settings.shutdown_grace,
        multitask_strategy=settings.multitask_strategy,
        max_queued=settings.max_queued,
        max_queued_per_tenant=settings.max_queued_per_tenant,
        retention=settings.retention_days * 86400,
        purge_interval=settings.purge_interval,
        max_pending_steers=settings.max_pending_steers,
    )


async def healthz(request: Request) -> Response:
    """Alive while the runtime runs, and while it waits for a store that was unreachable
    at start-up: 503 once it has stopped for good (the process then exits for its
    supervisor to restart it)."""
    wait = store_wait(request)
    if wait is not None and getattr(request.app.state, "context", None) is None:
        alive = wait.failure is None  # waiting for the store, or failed to open it
    else:
        alive = context(request).runtime.alive
    if not alive:
        return JSONResponse({"status": "stopped"}, status_code=503)
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Ready when the runtime runs, the store can be read and written (not a full disk,
    not a deleted database file) and the first recovery scan is done; else 503 with the
    state and the reason (`store_unavailable` while a store that was unreachable at
    start-up is still waited for)."""
    wait = store_wait(request)
    ctx: AppContext | None = getattr(request.app.state, "context", None)
    if wait is not None and ctx is None:
        state, why = _waiting(wait)
        return JSONResponse({"status": state, "reason": why}, status_code=503)
    state, reason = await context(request).runtime.readiness()
    if reason is not None:
        return JSONResponse({"status": state, "reason": reason}, status_code=503)
    return JSONResponse({"status": state})


def _waiting(wait: StoreWait) -> tuple[str, str]:
    """The readiness of an app that waits for its store (it has no runtime yet)."""
    if wait.failure is not None:
        return "stopped", wait.reason
    if wait.opened:
        return "starting", "the store is open; the runtime is starting"
    return "store_unavailable", wait.reason


def under_v1(routes: list[BaseRoute]) -> list[BaseRoute]:
    """The same routes under /v1, flat rather than in a Mount: a Mount matches its prefix
    and then its routes, on every request (a poll is a few hundred microseconds)."""
    flat: list[BaseRoute] = []
    for route in routes:
        if isinstance(route, Route):
            flat.append(
                Route(f"/v1{route.path}", route.endpoint, methods=route.methods, name=route.name)
            )
        elif isinstance(route, WebSocketRoute):
            flat.append(WebSocketRoute(f"/v1{route.path}", route.endpoint, name=route.name))
        else:
            raise TypeError(f"no /v1 copy of {route!r}")
    return flat


def create_app(
    agent: Agent | Workflow | None = None,
    *,
    settings: Settings | None = None,
    model: Model | None = None,
    agents: Mapping[str, Agent | Workflow] | None = None,
) -> Starlette:
    """The ASGI app serving `agent`, an Agent or a durable Workflow, for every model name,
    and each of `agents` for the model name it is keyed by. With neither, the built-in
    agent; with `agents` only, a request naming another model is a 404.

    `settings` default to the environment (`DURABLE_RESPONSES_*`) and built-in defaults;
    `model` is used when an agent has none (default: the embedded model).
    """
    config = settings or Settings()
    named = dict(agents or {})
    hosted = agent if agent is not None or named else Agent()
    fallback = model or default_model(config)
    keys = load_keys(config)
    metrics = Metrics()
    own_models = [a.model for a in (hosted, *named.values()) if isinstance(a, Agent)]
    metrics.watch(fallback, *own_models)

    @asynccontextmanager
    async def serving(opened: Callable[[], None]) -> AsyncIterator[None]:
        """The store and the runtime on it for the block, the routes' context set;
        `opened` is called once the store is open."""
        async with open_store(config.db) as store:
            opened()
            store.on_commit(metrics.commit)
            runtime = Runtime(
                store, hosted, fallback, runtime_settings(config), metrics, agents=named
            )
            # The upstream's models are listed when the default agent may send them there.
            upstream = upstream_models(config) if hosted is not None else None
            catalog = ModelCatalog(served_models(hosted, named, fallback), upstream)
            try:
                async with runtime.running():
                    app.state.context = AppContext(
                        runtime=runtime,
                        conversations=Conversations(runtime),
                        inspector=Inspector(runtime),
                        settings=config,
                        streams=StreamSlots(config.max_streams_per_tenant),
                        models=catalog,
                    )
                    yield
            finally:
                await catalog.aclose()
                for model in runtime.roster.models():
                    close = getattr(model, "aclose", None)
                    if close is not None:
                        await close()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.store_wait = None
        opened = False

        def open_now() -> None:
            nonlocal opened
            opened = True

        try:
            async with serving(open_now):
                yield
            return
        except StoreUnreachableError as exc:
            if opened:
                raise
            unreachable = exc
        except StoreOpenError as exc:
            if not opened:  # refused since the CLI's check (server/_cli.py): it exits 2
                log.error("%s", exc)
                app.state.store_failure = exc
            raise
        # The database server cannot be reached yet: serve 503s while a task retries
        # (server/_store_wait.py).
        wait = StoreWait(serving, unreachable)
        app.state.store_wait = wait
        wait.start()
        try:
            yield
        finally:
            await wait.stop()

    api: list[BaseRoute] = [
        *_responses_routes.ROUTES,
        *_websocket.routes(keys),  # WebSocket mode on /responses (protocol.md section 13)
        *_conversations_routes.ROUTES,
        *_models_routes.ROUTES,
        Route("/openapi.json", openapi_endpoint(build_document(config)), methods=["GET"]),
    ]
    routes: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        *under_v1(api),
        *api,
    ]
    handlers: Any = EXCEPTION_HANDLERS
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(EdgeMiddleware, keys=keys, access=AccessLog(metrics, config.access_log)),
            Middleware(PollShortcut),  # inside the edge: request id, tenant, access record
        ],
        exception_handlers=handlers,
        lifespan=lifespan,
    )
    # No redirect of `/v1/responses/` to `/v1/responses`: a bare 307 with no body is no
    # answer an OpenAI client expects; an unknown path is a 404 in the envelope, as there.
    app.router.redirect_slashes = False
    app.state.metrics = metrics
    app.state.settings = config
    app.state.store_wait = None
    app.state.store_failure = None
    return app


async def wait_stopped(app: Starlette) -> None:
    """Return once the app's runtime has stopped (for good, or at shutdown), or, if it
    waited for its store, once that wait ended for good."""
    wait: StoreWait | None = app.state.store_wait
    if wait is not None:
        await wait.wait_ended()
    else:
        await app.state.context.runtime.wait_stopped()


def halt_store_wait(app: Starlette) -> None:
    """A shutdown began: an app still waiting for its store stops waiting now."""
    wait: StoreWait | None = app.state.store_wait
    if wait is not None:
        wait.halt()


def store_failure(app: Starlette) -> StoreOpenError | None:
    """The permanent error the lifespan, or a later attempt of its wait, met opening the
    store."""
    wait: StoreWait | None = app.state.store_wait
    failure: StoreOpenError | None = getattr(app.state, "store_failure", None)
    return failure if wait is None else wait.failure
