"""Errors of the durable runtime.

RecoveryError                 a request the runtime refuses, or a failure inside it
+-- InvalidRequest            bad input from the client (HTTP 400); carries param and code
+-- NotFound                  no such response or conversation for this tenant (HTTP 404)
+-- ModelError                the model failed; carries the Responses error code

BaseException
+-- TurnStopped               control flow: the turn must stop (cancel, steer, lease lost);
                              a BaseException so that a tool's `except Exception` cannot
                              swallow it
"""

from __future__ import annotations


class RecoveryError(Exception):
    """Base of the runtime's ordinary errors."""


class InvalidRequest(RecoveryError):
    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


class NotFound(RecoveryError):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unavailable(RecoveryError):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class LaneLocked(RecoveryError):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


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


class TurnStopped(BaseException):
    """The running turn must stop at once without writing (lease lost) or at the next safe
    point (cancel). `reason` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
