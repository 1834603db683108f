"""One record per HTTP request, taken when its response has ended (a stream: when it
closes): the request counter and latency histogram by route, and the access log line

    GET /v1/responses/resp_... 200 12.3ms route=get_response tenant=acme

on the logger `server.access` (its request id is added by the log format). The method,
path (without the query string), route, status, duration and tenant are all it says:
never a body, a header or a key. `--no-access-log` turns the line off, not the metrics.
"""

from __future__ import annotations

import logging

from starlette.types import Scope

from ._metrics import Metrics

log = logging.getLogger("server.access")

# A client may send any method: others are counted as one label value, so that made-up
# methods cannot grow the metrics without bound.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class AccessLog:
    def __init__(self, metrics: Metrics, access_log: bool = True) -> None:
        self.metrics = metrics
        self.access_log = access_log

    def record(self, scope: Scope, status: int, seconds: float) -> None:
        route = getattr(scope.get("endpoint"), "__name__", "unmatched")
        method = scope["method"]
        label = method if method in _METHODS else "OTHER"
        self.metrics.child(self.metrics.requests, route, label, str(status)).inc()
        self.metrics.child(self.metrics.request_seconds, route, label).observe(seconds)
        if not self.access_log:
            return
        tenant = scope.get("state", {}).get("tenant")
        milliseconds = round(seconds * 1000, 1)
        # The path as sent, still percent-encoded: a decoded one could break the line.
        path = scope.get("raw_path", b"").decode("latin-1") or scope["path"]
        log.info(
            "%s %s %d %.1fms route=%s tenant=%s",
            method,
            path,
            status,
            milliseconds,
            route,
            "-" if tenant is None else tenant or '""',
            extra={
                "fields": {
                    "method": method,
                    "path": path,
                    "route": route,
                    "status": status,
                    "duration_ms": milliseconds,
                    "tenant": tenant,
                }
            },
        )
