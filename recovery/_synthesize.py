"""A stream rebuilt from a finished response's final object, for a retried foreground
create (G11): foreground responses keep no event log, so the events a streaming client
would have seen are derived from what the response became. They follow the orderings of
docs/protocol.md section 7 and carry the final items' ids."""

from __future__ import annotations

from typing import Any

from . import _parts as parts
from ._emitter import Emitter, Event
from ._json import copied
from ._model import ReasoningDelta, Usage
from ._reasoning import MakeEvent, OpenReasoning, new_item
from ._response import usage_object

_TERMINAL = {"completed": "response.completed", "incomplete": "response.incomplete"}


def synthesize(final: dict[str, Any]) -> list[Event]:
    start = copied(final)
    start.update(
        status="in_progress",
        output=[],
        usage=usage_object(Usage(0, 0)),
        completed_at=None,
        error=None,
        incomplete_details=None,
    )
    emitter = Emitter(start, 0)
    events = [emitter.lifecycle("response.created"), emitter.lifecycle("response.in_progress")]
    event = emitter._event
    for index, item in enumerate(final["output"]):
        kind = item.get("type")
        if kind == "message":
            events += _message(event, index, item)
        elif kind == "reasoning":
            events += _reasoning(event, index, item)
            continue  # its close gave its output_item.done
        elif kind == "function_call":
            events.append(
                event(
                    "response.output_item.added",
                    output_index=index,
                    item=dict(item, status="in_progress", arguments=""),
                )
            )
            common = {"item_id": item["id"], "output_index": index}
            events.append(
                event("response.function_call_arguments.delta", **common, delta=item["arguments"])
            )
            events.append(
                event(
                    "response.function_call_arguments.done",
                    **common,
                    arguments=item["arguments"],
                    name=item["name"],
                )
            )
        else:
            events.append(event("response.output_item.added", output_index=index, item=item))
        events.append(event("response.output_item.done", output_index=index, item=item))
    events.append(terminal_event(final, emitter.next_seq))
    return events


def _message(event: MakeEvent, index: int, item: dict[str, Any]) -> list[Event]:
    """A message's events up to its done: each part streamed whole, as the live stream
    names it (`_parts.py`: text with its logprobs, or a refusal)."""
    added = dict(item, status="in_progress", content=[])
    events = [event("response.output_item.added", output_index=index, item=added)]
    for part_index, part in enumerate(item.get("content", [])):
        common = {"item_id": item["id"], "output_index": index, "content_index": part_index}
        kind = part.get("type")
        if kind not in ("output_text", "refusal"):
            events.append(event("response.content_part.added", **common, part=part))
        else:
            text = part.get("text" if kind == "output_text" else "refusal", "")
            logprobs = part.get("logprobs") or []
            events.append(event("response.content_part.added", **common, part=parts.part(kind)))
            type_, fields = parts.delta_event(kind, text, tuple(logprobs))
            events.append(event(type_, **common, **fields))
            type_, fields = parts.done_event(kind, text, logprobs)
            events.append(event(type_, **common, **fields))
        events.append(event("response.content_part.done", **common, part=part))
    return events


def _reasoning(event: MakeEvent, index: int, item: dict[str, Any]) -> list[Event]:
    """A reasoning item's events, through the live stream's own `OpenReasoning`: its
    summary parts, then its raw reasoning, then its done carrying the item as it ended."""
    reasoning = OpenReasoning(index, new_item(item["id"]))
    events = [event("response.output_item.added", output_index=index, item=new_item(item["id"]))]
    for number, summary in enumerate(item.get("summary") or []):
        events += reasoning.delta(event, ReasoningDelta(summary.get("text", ""), number))
    for content in item.get("content") or []:
        events += reasoning.delta(event, ReasoningDelta(content.get("text", "")))
    events += reasoning.close(event, item.get("status", "completed"))
    events[-1]["item"] = copied(item)  # as stored: encrypted_content and all
    return events


def terminal_event(final: dict[str, Any], seq: int) -> Event:
    """The event, numbered `seq`, that ends a stream with the finished response `final`."""
    kind = _TERMINAL.get(final["status"], "response.failed")
    return {"type": kind, "sequence_number": seq, "response": copied(final)}
