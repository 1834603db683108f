"""Hooks the runtime calls as things happen, for metrics and logs. The default observer
does nothing; the server plugs in its Prometheus metrics. Observers must not block."""

from __future__ import annotations

import contextvars

# The response a log line is about (set while a runner runs, and by request handlers).
current_response_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "current_response_id", default=None
)


class Observer:
    def response_finished(self, status: str) -> None:
        """A response reached a terminal status."""

    def recovery_started(self) -> None:
        """A response whose process died is being resumed (or failed) by this one."""

    def tool_call(self, outcome: str) -> None:
        """A server tool call ended: completed, errored, reused (recorded before),
        reconciled, rerun (idempotent, ambiguous) or unknown (ambiguous, failed closed)."""
