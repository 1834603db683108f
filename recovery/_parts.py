"""The streamed content parts of output items, by kind, and the events that stream them.

A message's part is `output_text` (the answer) or `refusal` (the model declined); a
reasoning item's content part is `reasoning_text` (its summary parts: `_reasoning.py`).
Each streams the same way (content_part.added,
deltas, a done event with the whole text, content_part.done) under its own event names
and fields, which live here so that the emitter and the restore agree on them.
"""

from __future__ import annotations

from typing import Any, Literal

from ._model import LogProb

PartKind = Literal["output_text", "refusal", "reasoning_text"]

# kind -> (delta event, done event, the done event's field holding the whole text)
_EVENTS: dict[str, tuple[str, str, str]] = {
    "output_text": ("response.output_text.delta", "response.output_text.done", "text"),
    "refusal": ("response.refusal.delta", "response.refusal.done", "refusal"),
    "reasoning_text": ("response.reasoning_text.delta", "response.reasoning_text.done", "text"),
}
DELTA_EVENTS = {delta: kind for kind, (delta, _, _) in _EVENTS.items()}


def part(kind: str, text: str = "", logprobs: list[LogProb] | None = None) -> dict[str, Any]:
    """The content part itself, as an item (and content_part events) carry it."""
    if kind == "output_text":
        return {"type": kind, "text": text, "annotations": [], "logprobs": list(logprobs or ())}
    if kind == "refusal":
        return {"type": kind, "refusal": text}
    return {"type": kind, "text": text}


def delta_event(
    kind: str, text: str, logprobs: tuple[LogProb, ...] = ()
) -> tuple[str, dict[str, Any]]:
    """(type, fields) of the event streaming a piece of a part."""
    fields: dict[str, Any] = {"delta": text}
    if kind == "output_text":
        fields["logprobs"] = list(logprobs)
    return _EVENTS[kind][0], fields


def done_event(
    kind: str, text: str, logprobs: list[LogProb] | None = None
) -> tuple[str, dict[str, Any]]:
    """(type, fields) of the event giving a part's whole text once it is done."""
    _, done, key = _EVENTS[kind]
    fields: dict[str, Any] = {key: text}
    if kind == "output_text":
        fields["logprobs"] = list(logprobs or ())
    return done, fields
