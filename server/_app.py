"""The ASGI application: routes under /v1 and at the root, the store and runtime
opened for the app's lifetime, and errors in the OpenAI envelope."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from recovery import Agent, Model, Runtime, RuntimeSettings
from store import open_store

from . import _conversations_routes, _responses_routes
from ._context import AppContext, context
from ._embedded_model import EmbeddedModel
from ._errors import EXCEPTION_HANDLERS
from ._middleware import RequestIdMiddleware
from ._settings import Settings


def default_model(settings: Settings) -> Model:
    return EmbeddedModel(words=settings.embedded_words, delay_ms=settings.embedded_delay_ms)


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    ctx = context(request)
    await ctx.runtime.store.ping()
    return JSONResponse({"status": "ready"})


def create_app(
    agent: Agent | None = None,
    *,
    settings: Settings | None = None,
    model: Model | None = None,
) -> Starlette:
    """The ASGI app serving `agent` (the built-in agent when None).

    `settings` default to the environment (`DURABLE_RESPONSES_*`) and built-in defaults;
    `model` is used when the agent has none (default: the embedded model).
    """
    config = settings or Settings()
    hosted = agent or Agent()
    fallback = model or default_model(config)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with open_store(config.db) as store:
            runtime = Runtime(
                store,
                hosted,
                fallback,
                RuntimeSettings(
                    lease_ttl=config.lease_ttl,
                    poll_interval=config.poll_interval,
                    cancel_wait=config.cancel_wait,
                ),
            )
            async with runtime.running():
                app.state.context = AppContext(runtime=runtime, settings=config)
                yield

    api: list[BaseRoute] = [*_responses_routes.ROUTES, *_conversations_routes.ROUTES]
    routes: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Mount("/v1", routes=api),
        *api,
    ]
    handlers: Any = EXCEPTION_HANDLERS
    return Starlette(
        routes=routes,
        middleware=[Middleware(RequestIdMiddleware)],
        exception_handlers=handlers,
        lifespan=lifespan,
    )
