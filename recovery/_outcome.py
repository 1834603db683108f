"""How a turn ends: its terminal status and, for a failed one, the response's `error`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._status import ResponseStatus


@dataclass(frozen=True, slots=True)
class Outcome:
    status: ResponseStatus
    error: dict[str, Any] | None = None
    incomplete_reason: str | None = None


# `response.error` carries `type` and `param` as the HTTP error envelope does
# (server/_errors.py), which some clients require (the Vercel AI SDK): what the request
# itself got wrong is an `invalid_request_error` (with the parameter, if one is to blame);
# anything else, the upstream's rate limit included, is a `server_error`.
_REQUEST_ERRORS: dict[str, str | None] = {
    "invalid_prompt": None,  # the model refused the request (an upstream 400)
    "invalid_request": "input",
    "tool_output_missing": "input",
    "tool_call_not_found": "input",
    "duplicate_tool_output": "input",
    "duplicate_tool_call": "input",
    "duplicate_item": "input",
}


def response_error(code: str, message: str) -> dict[str, Any]:
    """A failed response's `error`: {code, message, type, param}."""
    if code in _REQUEST_ERRORS:
        return {
            "code": code,
            "message": message,
            "type": "invalid_request_error",
            "param": _REQUEST_ERRORS[code],
        }
    return {"code": code, "message": message, "type": "server_error", "param": None}


def failed(code: str, message: str) -> Outcome:
    return Outcome(ResponseStatus.FAILED, error=response_error(code, message))


def stopped(reason: str) -> Outcome:
    """How a turn asked to stop ends: `interrupt` and `steer` keep its partial output in
    the lane's history (incomplete, steered); `cancelled` and `rollback` end it cancelled."""
    if reason in ("interrupt", "steer"):
        return Outcome(ResponseStatus.INCOMPLETE, incomplete_reason="steered")
    return Outcome(ResponseStatus.CANCELLED)
