"""What a model is to the runtime: something that streams one step's output.

A step's output is a sequence of events: reasoning deltas (a `reasoning` item, before
the answer), text or refusal deltas (an assistant message) and function-call argument
deltas (one item per `call_id`), then optionally usage and an `Incomplete` marker;
`ModelInfo` (at any point) says which model answered. The runtime turns them into
Responses items and stream events.

Deltas continue the item open before them. A model that knows where its items begin says
so: `MessageStart` begins a new message (a step may say several, each with its `phase`),
`ReasoningStart` a new reasoning item, and `ReasoningDone` ends one with what it carries
beyond its text (`encrypted_content`). A model that does not (a Chat Completions upstream)
gets one reasoning item and one message a step.

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
    """A piece of the model's reasoning: raw reasoning (the item's `reasoning_text`
    content) or, with `summary` set, a piece of a summary of it (a `summary_text` part of
    the item's `summary`; a new part whenever `summary` changes, e.g. the model's
    `summary_index`)."""

    text: str
    summary: int | None = None


@dataclass(frozen=True, slots=True)
class ReasoningStart:
    """A new reasoning item begins. `id` is the model's own id for it: the item keeps it
    when the request asked for `reasoning.encrypted_content`, which names it."""

    id: str | None = None


@dataclass(frozen=True, slots=True)
class ReasoningDone:
    """The open reasoning item is finished. `encrypted_content` (asked for with `include`)
    is the reasoning, sealed by the model, that a later call can be given back."""

    encrypted_content: str | None = None


@dataclass(frozen=True, slots=True)
class MessageStart:
    """A new assistant message begins: the text and refusal deltas after it are its own.
    `phase` labels it as the model did (`commentary` or `final_answer`)."""

    phase: str | None = None


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
    cache_write_tokens: int = 0


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
    TextDelta
    | RefusalDelta
    | ReasoningDelta
    | ReasoningStart
    | ReasoningDone
    | MessageStart
    | FunctionCallDelta
    | Usage
    | Incomplete
    | ModelInfo
)


class Model(Protocol):
    """A streaming model. Raise `recovery.ModelError` for a failure the client should see."""

    name: str

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]: ...
