"""Prometheus metrics, one registry per app, served on a listener of their own.

`/metrics` is not a route of the API: the figures are global (every tenant's requests,
models and tools), so no tenant key may read them. `--metrics-port` opens a second
listening port on which `MetricsListener` answers `GET /metrics` without a key, for a
scraper on a network the operator controls; the API port answers /metrics 404.

Label values are bounded: routes are endpoint names, tools are the agent's, and model
names (which a tenant chooses when the upstream passes the request's model through) are
capped at `MAX_MODELS` distinct values, then counted as "other".
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from recovery import Inspector, Model, ModelCall, ModelRequest, Observer, ResponseEnd

from ._upstream_http import HTTPUpstream

PREFIX = "durable_responses"
MAX_MODELS = 32
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_FAST = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_SLOW = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)


class Metrics(Observer):
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self._models: set[str] = set()
        self._children: dict[tuple[object, tuple[str, ...]], Any] = {}
        self.requests = Counter(
            f"{PREFIX}_http_requests",
            "HTTP requests by route (endpoint name), method and status.",
            ["route", "method", "status"],
            registry=r,
        )
        self.request_seconds = Histogram(
            f"{PREFIX}_http_request_duration_seconds",
            "HTTP request durations by route, until the last byte (a stream: its whole life).",
            ["route", "method"],
            buckets=_FAST,
            registry=r,
        )
        self.finished = Counter(
            f"{PREFIX}_responses_finished", "Responses by final status.", ["status"], registry=r
        )
        self.response_seconds = Histogram(
            f"{PREFIX}_response_duration_seconds",
            "Time from a response's creation to its end, by final status.",
            ["status"],
            buckets=_SLOW,
            registry=r,
        )
        self.recoveries = Counter(
            f"{PREFIX}_recoveries", "Responses taken over from a dead process.", registry=r
        )
        self.tool_calls = Counter(
            f"{PREFIX}_tool_calls", "Server tool calls by outcome.", ["outcome"], registry=r
        )
        self.tool_seconds = Histogram(
            f"{PREFIX}_tool_call_duration_seconds",
            "How long server tool bodies ran, by tool and outcome.",
            ["tool", "outcome"],
            buckets=_FAST,
            registry=r,
        )
        self.model_calls = Counter(
            f"{PREFIX}_model_calls",
            "Model calls (attempts of a step) by model and outcome.",
            ["model", "outcome"],
            registry=r,
        )
        self.model_seconds = Histogram(
            f"{PREFIX}_model_call_duration_seconds",
            "Model call durations, from the request to the end of its stream.",
            ["model"],
            buckets=_FAST,
            registry=r,
        )
        self.first_event_seconds = Histogram(
            f"{PREFIX}_model_time_to_first_event_seconds",
            "Time from a model call to its first streamed event.",
            ["model"],
            buckets=_FAST,
            registry=r,
        )
        self.model_retries = Counter(
            f"{PREFIX}_model_retries",
            "Failed model calls retried, by model.",
            ["model"],
            registry=r,
        )
        self.input_tokens = Counter(
            f"{PREFIX}_input_tokens",
            "Input tokens models reported, by model.",
            ["model"],
            registry=r,
        )
        self.output_tokens = Counter(
            f"{PREFIX}_output_tokens",
            "Output tokens models reported, by model.",
            ["model"],
            registry=r,
        )
        self.upstream = Counter(
            f"{PREFIX}_upstream_responses",
            "Upstream model answers by HTTP status (or timeout, connection_error).",
            ["status"],
            registry=r,
        )
        self.commit_seconds = Histogram(
            f"{PREFIX}_store_commit_seconds",
            "Duration of one group commit (events, checkpoints, journal) to SQLite.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )
        self.active_runs = Gauge(
            f"{PREFIX}_active_runs", "Turns this process drives, each under its lease.", registry=r
        )
        self.queue_depth = Gauge(
            f"{PREFIX}_queued_responses",
            "Responses waiting to run, in the whole store.",
            registry=r,
        )
        self.awaiting_recovery = Gauge(
            f"{PREFIX}_awaiting_recovery",
            "Running responses whose lease expired or was released, not yet taken over"
            " (whole store).",
            registry=r,
        )
        self.ready = Gauge(
            f"{PREFIX}_ready", "1 once this process finished its first recovery scan.", registry=r
        )

    def watch(self, *models: Model | None) -> None:
        """Count the HTTP statuses of these models' upstream calls."""
        for model in models:
            if isinstance(model, HTTPUpstream):
                model.on_status = self.upstream_status

    def upstream_status(self, status: str) -> None:
        self.child(self.upstream, status).inc()

    def _model(self, name: str) -> str:
        if name not in self._models and len(self._models) >= MAX_MODELS:
            return "other"
        self._models.add(name)
        return name

    def child(self, metric: Any, *labels: str) -> Any:
        """`metric.labels(*labels)`, kept: `labels()` takes a lock and checks its
        arguments on every call, and a response calls it about ten times."""
        key = (metric, labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    # Observer hooks (called by the runtime)
    def response_finished(self, end: ResponseEnd) -> None:
        super().response_finished(end)
        self.child(self.finished, end.status).inc()
        self.child(self.response_seconds, end.status).observe(end.seconds)

    def recovery_started(self) -> None:
        self.recoveries.inc()

    def tool_call(self, outcome: str, tool: str = "", seconds: float | None = None) -> None:
        self.child(self.tool_calls, outcome).inc()
        if seconds is not None:
            self.child(self.tool_seconds, tool, outcome).observe(seconds)

    def model_called(self, call: ModelCall) -> None:
        model = self._model(call.model)
        self.child(self.model_calls, model, call.outcome).inc()
        self.child(self.model_seconds, model).observe(call.seconds)
        if call.first_event_seconds is not None:
            self.child(self.first_event_seconds, model).observe(call.first_event_seconds)
        self.child(self.input_tokens, model).inc(call.input_tokens)
        self.child(self.output_tokens, model).inc(call.output_tokens)

    def model_retried(self, model: Model, request: ModelRequest) -> None:
        self.child(self.model_retries, self._model(self.model_label(model, request))).inc()

    def commit(self, seconds: float, operations: int) -> None:
        self.commit_seconds.observe(seconds)

    async def render(self, inspector: Inspector | None) -> bytes:
        """The page; without an inspector (the store not reachable yet) the store's
        gauges keep their values and `ready` is 0."""
        if inspector is None:
            self.ready.set(0)
            return generate_latest(self.registry)
        gauges = await inspector.gauges()
        self.active_runs.set(gauges.active_runs)
        self.queue_depth.set(gauges.queued)
        self.awaiting_recovery.set(gauges.awaiting_recovery)
        self.ready.set(1 if gauges.ready else 0)
        return generate_latest(self.registry)


class MetricsListener:
    """The served app when `--metrics-port` is set: requests that arrived on that port
    get `GET /metrics` (nothing else, and no key is asked); all others, and the lifespan,
    go to the API app."""

    def __init__(self, api: Starlette, port: int) -> None:
        self.api = api
        self.port = port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server")
        if scope["type"] != "lifespan" and server is not None and server[1] == self.port:
            await self._metrics(scope)(scope, receive, send)
        else:
            await self.api(scope, receive, send)

    def _metrics(self, scope: Scope) -> ASGIApp:
        if scope["type"] != "http" or scope["path"] != "/metrics":
            return PlainTextResponse("Not Found", status_code=404)
        if scope["method"] not in ("GET", "HEAD"):
            return PlainTextResponse("Method Not Allowed", status_code=405)
        return _MetricsPage(self.api)


class _MetricsPage:
    def __init__(self, api: Starlette) -> None:
        self.api = api

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        metrics: Metrics = self.api.state.metrics
        context = getattr(self.api.state, "context", None)  # none while the store is waited for
        body = await metrics.render(None if context is None else context.inspector)
        await Response(body, media_type=CONTENT_TYPE)(scope, receive, send)
