"""What a model is to the runtime: something that streams one step's output.

A step's output is a sequence of events: text deltas (one assistant message) and
function-call argument deltas (one item per `call_id`), then optionally usage and an
`Incomplete` marker. The runtime turns them into Responses items and stream events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class ModelRequest:
    model: str
    instructions: str | None
    input: list[dict[str, Any]]  # Responses input items, tool-consistent
    tools: list[dict[str, Any]]  # function tools the model may call
    tool_choice: Any = "auto"
    parallel_tool_calls: bool = True
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class FunctionCallDelta:
    """A piece of a function call's arguments; the first piece for a call_id opens it."""

    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Incomplete:
    """The model stopped early, e.g. `max_output_tokens`."""

    reason: str


ModelEvent = TextDelta | FunctionCallDelta | Usage | Incomplete


class Model(Protocol):
    """A streaming model. Raise `recovery.ModelError` for a failure the client should see."""

    name: str

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]: ...
