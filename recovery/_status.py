"""The response lifecycle (docs/guarantees.md, Terms)."""

from __future__ import annotations

from enum import StrEnum


class ResponseStatus(StrEnum):
    QUEUED = "queued"  # accepted and durable, waiting for a runner (background only)
    IN_PROGRESS = "in_progress"  # a runner holds the lease and is running steps
    COMPLETED = "completed"  # the model finished the turn
    INCOMPLETE = "incomplete"  # stopped early: token or step budget, or steered
    FAILED = "failed"  # the model, a tool or the server failed; `error` says how
    CANCELLED = "cancelled"  # cancelled by the client, or rolled back

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset(
    {
        ResponseStatus.COMPLETED,
        ResponseStatus.INCOMPLETE,
        ResponseStatus.FAILED,
        ResponseStatus.CANCELLED,
    }
)

# Stream events that end a response's event log.
TERMINAL_EVENTS = frozenset({"response.completed", "response.failed", "response.incomplete"})
