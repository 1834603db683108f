"""Prometheus metrics (text format on /metrics), one registry per app."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from recovery import Observer, Runtime

PREFIX = "durable_responses"


class Metrics(Observer):
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            f"{PREFIX}_http_requests",
            "HTTP requests by route (endpoint name), method and status.",
            ["route", "method", "status"],
            registry=r,
        )
        self.finished = Counter(
            f"{PREFIX}_responses_finished", "Responses by final status.", ["status"], registry=r
        )
        self.recoveries = Counter(
            f"{PREFIX}_recoveries", "Responses taken over from a dead process.", registry=r
        )
        self.tool_calls = Counter(
            f"{PREFIX}_tool_calls", "Server tool calls by outcome.", ["outcome"], registry=r
        )
        self.commit_seconds = Histogram(
            f"{PREFIX}_store_commit_seconds",
            "Duration of one group commit (events, checkpoints, journal) to SQLite.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )
        self.active_runs = Gauge(f"{PREFIX}_active_runs", "Turns this process drives.", registry=r)
        self.queue_depth = Gauge(
            f"{PREFIX}_queued_responses",
            "Responses waiting to run, in the whole store.",
            registry=r,
        )

    # Observer hooks (called by the runtime)
    def response_finished(self, status: str) -> None:
        self.finished.labels(status).inc()

    def recovery_started(self) -> None:
        self.recoveries.inc()

    def tool_call(self, outcome: str) -> None:
        self.tool_calls.labels(outcome).inc()

    def commit(self, seconds: float, operations: int) -> None:
        self.commit_seconds.observe(seconds)

    async def render(self, runtime: Runtime) -> bytes:
        self.active_runs.set(runtime.active_runs)
        self.queue_depth.set(await runtime.store.count_queued())
        return generate_latest(self.registry)


async def metrics_endpoint(request: Request) -> Response:
    metrics: Metrics = request.app.state.metrics
    body = await metrics.render(request.app.state.context.runtime)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


class MetricsMiddleware:
    """Counts requests by the endpoint that served them (bounded label values)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            endpoint = scope.get("endpoint")
            route = getattr(endpoint, "__name__", "unmatched")
            self.metrics.requests.labels(route, scope["method"], str(status)).inc()
