"""A stream rebuilt from a finished response's final object, for a retried foreground
create (G11): foreground responses keep no event log, so the events a streaming client
would have seen are derived from what the response became. They follow the orderings of
docs/protocol.md section 7 and carry the final items' ids."""

from __future__ import annotations

from typing import Any

from ._emitter import Emitter, Event
from ._json import copied
from ._model import Usage
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
            events.append(
                event(
                    "response.output_item.added",
                    output_index=index,
                    item=dict(item, status="in_progress", content=[]),
                )
            )
            for part_index, part in enumerate(item.get("content", [])):
                common = {"item_id": item["id"], "output_index": index, "content_index": part_index}
                text = part.get("text", "")
                empty = dict(part, text="") if "text" in part else part
                events.append(event("response.content_part.added", **common, part=empty))
                if part.get("type") == "output_text":
                    events.append(
                        event("response.output_text.delta", **common, delta=text, logprobs=[])
                    )
                    events.append(
                        event("response.output_text.done", **common, text=text, logprobs=[])
                    )
                events.append(event("response.content_part.done", **common, part=part))
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


def terminal_event(final: dict[str, Any], seq: int) -> Event:
    """The event, numbered `seq`, that ends a stream with the finished response `final`."""
    kind = _TERMINAL.get(final["status"], "response.failed")
    return {"type": kind, "sequence_number": seq, "response": copied(final)}
