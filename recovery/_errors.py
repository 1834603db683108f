"""Errors of the durable runtime.

RecoveryError                 a request the runtime refuses, or a failure inside it
+-- InvalidRequest            bad input from the client (HTTP 400); carries param and code
+-- NotFound                  no such response or conversation for this tenant, or no agent
|                             serves the model a request names (HTTP 404)
+-- Unavailable               the runtime cannot take the request now: it is shutting down,
|                             or its store cannot be written (HTTP 503)
+-- LaneLocked                a `reject` turn found its lane busy (HTTP 409)
+-- QueueFull                 its lane or its tenant has the most queued turns allowed
|                             (HTTP 429, with `retry_after`)
+-- SteerRefused              a `response.steer` was not accepted; `code` is the SDK's
|                             (`response_not_found`, `response_already_completed`, ...)
+-- ModelError                the model failed; carries the Responses error code
+-- StepFailed                a workflow step raised: recorded `errored`, and raised again
|                             on every replay (the handler may catch it)
+-- ToolOutcomeUnknown        internal: an ambiguous call that must fail closed (G4); the
|                             turn ends failed with `tool_outcome_unknown`
+-- ToolArgumentsError        internal: the model's arguments do not match a tool's schema;
|                             the call is answered with the error instead of running
+-- ToolTimedOut              internal: an async tool body passed its timeout and was
                              cancelled; the call is answered "timed out"

BaseException
+-- TurnStopped               control flow: the turn must stop (cancel, steer, shutdown,
                              lease lost); a BaseException so that a tool's or a workflow's
                              `except Exception` cannot swallow it

The internal ones never leave a turn: the runner and the tool phase turn them into the
response's `error` or a call's output. The store's `LeaseLost`, met by a fenced write of
a turn, becomes `TurnStopped("lease_lost")` there (`lease_held`, _turn.py), before any
code of the turn (a workflow handler's included) can see it.
"""

from __future__ import annotations

from typing import Any


class RecoveryError(Exception):
    """Base of the runtime's ordinary errors."""


class InvalidRequest(RecoveryError):
    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class SteerRefused(RecoveryError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class NotFound(RecoveryError):
    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class Unavailable(RecoveryError):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class LaneLocked(RecoveryError):
    """A turn of the lane that has not ended stands in the way (HTTP 409)."""

    def __init__(self, message: str, *, param: str = "multitask_strategy") -> None:
        super().__init__(message)
        self.message = message
        self.param = param


class QueueFull(RecoveryError):
    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class ModelError(RecoveryError):
    """The model could not produce a step. `code` is a Responses `error.code`;
    `retryable` failures (429, 5xx, connection errors, timeouts) are retried with backoff,
    after `retry_after` seconds when the model said so."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "server_error",
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.retryable = retryable
        self.retry_after = retry_after


class StepFailed(RecoveryError):
    """A step raised: recorded as `errored`, and raised again on every replay."""


_INTERRUPTED = (
    "the server stopped while it ran, and the tool is neither idempotent nor reconcilable, "
    "so it was not run again."
)


class ToolOutcomeUnknown(RecoveryError):
    """An ambiguous call of a tool that is neither idempotent nor reconcilable (G4).
    `outputs` holds the outputs of the step's calls that did finish."""

    def __init__(
        self,
        tool: str,
        call_id: str,
        key: str,
        outputs: list[dict[str, Any]],
        *,
        why: str = _INTERRUPTED,
    ) -> None:
        super().__init__(
            f"The outcome of tool '{tool}' (call_id '{call_id}', idempotency key '{key}') is "
            f"unknown: {why} Check whether its effect happened."
        )
        self.outputs = outputs


class ToolArgumentsError(RecoveryError):
    """The model's arguments do not match the tool's schema."""


class ToolTimedOut(RecoveryError):
    """An async body did not finish within its tool's timeout, and was cancelled."""


class TurnStopped(BaseException):
    """The running turn must stop at once without writing (lease lost) or at the next safe
    point (cancel, steer, shutdown). `reason` says which: "cancelled", "interrupt",
    "rollback", "shutdown" or "lease_lost"."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
