"""Hooks the runtime calls as things happen, for metrics and logs. The default observer
logs one line when a response ends and otherwise does nothing; the server's adds its
Prometheus metrics. Observers must not block, and must not raise.

Log lines carry their values for structured logs in `extra={"fields": {...}}`; the
server's JSON formatter puts them beside the message.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from store import ResponseRecord

from ._errors import ModelError
from ._model import Model, ModelEvent, ModelRequest, Usage

log = logging.getLogger("recovery.responses")

# The response a log line is about (set while a runner runs, and by request handlers).
current_response_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "current_response_id", default=None
)


@dataclass(frozen=True, slots=True)
class ResponseEnd:
    """A response that reached a terminal status, as an operator sees it."""

    response_id: str
    status: str
    error_code: str | None
    seconds: float  # since the response was created, queueing and recoveries included
    steps: int  # tool steps taken (what an agent's max_steps counts)
    tool_calls: int  # function calls in its output, server and client tools alike
    recoveries: int  # times another process took it over

    @classmethod
    def of(cls, record: ResponseRecord, response: dict[str, Any], *, steps: int) -> ResponseEnd:
        error = response.get("error") or {}
        output = response.get("output") or []
        return cls(
            response_id=record.id,
            status=str(response.get("status")),
            error_code=error.get("code"),
            seconds=max(0.0, time.time() - record.created_at),
            steps=steps,
            tool_calls=sum(1 for item in output if item.get("type") == "function_call"),
            recoveries=record.recoveries,
        )


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One call of a model: one attempt of a step."""

    model: str  # Observer.model_label()
    seconds: float
    first_event_seconds: float | None  # None: it ended before its first event
    outcome: str  # ok, error, retryable_error, cancelled
    input_tokens: int
    output_tokens: int


class Observer:
    @staticmethod
    def model_label(model: Model, request: ModelRequest) -> str:
        """The model's name; the request's model for a model that passes it through (an
        upstream without a pinned model), which says so with `passes_model_through`."""
        return request.model if getattr(model, "passes_model_through", False) else model.name

    def response_finished(self, end: ResponseEnd) -> None:
        """A response reached a terminal status: one log line (a warning if it failed)."""
        error = f" ({end.error_code})" if end.error_code else ""
        log.log(
            logging.WARNING if end.status == "failed" else logging.INFO,
            "response %s ended %s%s after %.3fs: %d steps, %d tool calls, %d recoveries",
            end.response_id,
            end.status,
            error,
            end.seconds,
            end.steps,
            end.tool_calls,
            end.recoveries,
            extra={
                "fields": {
                    "response_status": end.status,
                    "error_code": end.error_code,
                    "duration_ms": round(end.seconds * 1000, 1),
                    "steps": end.steps,
                    "tool_calls": end.tool_calls,
                    "recoveries": end.recoveries,
                }
            },
        )

    def recovery_started(self) -> None:
        """A response whose process died is being resumed (or failed) by this one."""

    def tool_call(self, outcome: str, tool: str = "", seconds: float | None = None) -> None:
        """A server tool call ended: completed, errored, reused (recorded before),
        reconciled, rerun (idempotent, ambiguous) or unknown (ambiguous, failed closed).
        `seconds` is how long its body ran, when it ran here."""

    def model_called(self, call: ModelCall) -> None:
        """A model call ended, however it ended."""

    def model_retried(self, model: Model, request: ModelRequest) -> None:
        """A failed call of `model` is retried after a backoff."""

    async def watch_model(self, model: Model, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """`model.stream(request)`, timed and counted into one `model_called`."""
        started = time.monotonic()
        first: float | None = None
        tokens = [0, 0]
        outcome = "cancelled"  # unless it ends below: cut by a stop, or abandoned
        try:
            async for event in model.stream(request):
                if first is None:
                    first = time.monotonic() - started
                if isinstance(event, Usage):
                    tokens[0] += event.input_tokens
                    tokens[1] += event.output_tokens
                yield event
            outcome = "ok"
        except ModelError as exc:
            outcome = "retryable_error" if exc.retryable else "error"
            raise
        except Exception:
            outcome = "error"
            raise
        finally:
            self.model_called(
                ModelCall(
                    model=self.model_label(model, request),
                    seconds=time.monotonic() - started,
                    first_event_seconds=first,
                    outcome=outcome,
                    input_tokens=tokens[0],
                    output_tokens=tokens[1],
                )
            )
