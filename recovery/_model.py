"""What a model is to the runtime: something that streams one step's output.

A step's output is a sequence of events: reasoning deltas (one `reasoning` item, before
the answer), text or refusal deltas (one assistant message) and function-call argument
deltas (one item per `call_id`), then optionally usage and an `Incomplete` marker;
`ModelInfo` (at any point) says which model answered. The runtime turns them into
Responses items and stream events.

`ModelRequest` carries what the create request asked of the model, by its Responses
names; a model honours each field or, when it cannot, the server refuses the request
before it runs (docs/protocol.md section 3): nothing asked for is dropped silently.
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
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    # `text.format` when not plain text: {"type": "json_schema", "name", "schema",
    # "strict"?, "description"?} or {"type": "json_object"}; and `text.verbosity`.
    text_format: dict[str, Any] | None = None
    verbosity: str | None = None
    reasoning_effort: str | None = None
    # The rest of `reasoning` (`summary`, or its old name `generate_summary`; `context`;
    # `mode`), and whether `include` asks for `reasoning.encrypted_content`.
    reasoning_summary: str | None = None
    reasoning_context: str | None = None
    reasoning_mode: str | None = None
    encrypted_reasoning: bool = False
    logprobs: bool = False  # return each text delta's logprobs (TextDelta.logprobs)
    top_logprobs: int | None = None  # with logprobs: alternatives per token
    truncation: str = "disabled"  # "auto": drop the oldest turns rather than overflow
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    safety_identifier: str | None = None
    user: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


# A token's log probability as a Responses `output_text` part carries it:
# {"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}.
LogProb = dict[str, Any]


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    logprobs: tuple[LogProb, ...] = ()  # of the tokens of `text`, when asked for


@dataclass(frozen=True, slots=True)
class RefusalDelta:
    """A piece of the model's refusal to answer (a `refusal` content part)."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """A piece of the model's reasoning (a `reasoning_text` part of a `reasoning` item)."""

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


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """Which model answered the step (`model`, e.g. the upstream's own name for it) and
    at which service tier, as far as the model says: the Response reports these instead
    of the names the request asked for."""

    model: str | None = None
    service_tier: str | None = None


ModelEvent = (
    TextDelta | RefusalDelta | ReasoningDelta | FunctionCallDelta | Usage | Incomplete | ModelInfo
)


class Model(Protocol):
    """A streaming model. Raise `recovery.ModelError` for a failure the client should see."""

    name: str

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]: ...
