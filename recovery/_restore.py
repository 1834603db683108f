"""Rebuilding a runner's view of a response from its last checkpoint and the events
committed after it (G7): a message the crash cut off stays open for the next model call
to continue (see `Emitter.resume_message`); any other item left open is closed
`incomplete`, and the closing events continue the sequence numbers after the last
committed event. A reasoning item left open is closed `incomplete` with the reasoning
(and summary parts) streamed so far, and no encrypted content: the next model call
reasons again, in a new item. (That holds for reasoning the model had finished, too: its
`output_item.done` waits for what it led to, so a crash before that left it open.)"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from store import EventRow

from ._emitter import Emitter, Event
from ._parts import DELTA_EVENTS
from ._reasoning import OpenReasoning


def restore(emitter: Emitter, rows: Sequence[EventRow]) -> list[Event]:
    """Apply committed events after the checkpoint to `emitter`; return the events that
    close whatever was left open (`incomplete`)."""
    output = emitter.output
    texts: dict[str, list[str]] = {}  # of each item's content part, by item id
    logprobs: dict[str, list[Any]] = {}
    parts: dict[str, str] = {}  # item id -> the kind of its content part
    arguments: dict[str, list[str]] = {}
    open_items: dict[int, dict[str, Any]] = {}
    reasoning: dict[int, OpenReasoning] = {}  # the open reasoning items, by output index
    for row in rows:
        event = json.loads(row.data)
        kind = event["type"]
        emitter.next_seq = event["sequence_number"] + 1
        if kind == "response.output_item.added":
            index, item = event["output_index"], event["item"]
            while len(output) <= index:
                output.append({})
            output[index] = item
            open_items[index] = item
            if item["type"] == "reasoning":
                reasoning[index] = OpenReasoning(index, item)
        elif kind == "response.output_item.done":
            output[event["output_index"]] = event["item"]
            open_items.pop(event["output_index"], None)
            reasoning.pop(event["output_index"], None)
        elif event.get("output_index") in reasoning:
            reasoning[event["output_index"]].replay(event)
        elif kind == "response.content_part.added":
            parts[event["item_id"]] = event["part"]["type"]
        elif kind in DELTA_EVENTS:
            texts.setdefault(event["item_id"], []).append(event["delta"])
            logprobs.setdefault(event["item_id"], []).extend(event.get("logprobs") or ())
        elif kind == "response.function_call_arguments.delta":
            arguments.setdefault(event["item_id"], []).append(event["delta"])
        elif kind in ("response.in_progress", "response.created", "response.queued"):
            emitter.response["status"] = event["response"]["status"]
    closing: list[Event] = []
    last = max(open_items, default=None)
    if (
        last is not None
        and open_items[last]["type"] == "message"
        and open_items[last]["id"] in parts
    ):
        # The message the crash cut stays open: the next model call continues it.
        item = open_items.pop(last)
        text = "".join(texts.get(item["id"], []))
        emitter.resume_message(last, item, text, logprobs.get(item["id"]), parts[item["id"]])
    for index, item in sorted(open_items.items()):
        if index in reasoning:
            closing += reasoning[index].close(emitter._event, "incomplete")
            continue
        item = dict(item, status="incomplete")
        if item["type"] == "message":
            if item["id"] in parts:
                text = "".join(texts.get(item["id"], []))
                kept = logprobs.get(item["id"], [])
                closing += emitter.close_part(index, item, parts[item["id"]], text, kept)
        elif item["type"] == "function_call":
            item["arguments"] = "".join(arguments.get(item["id"], []))
            closing.append(
                emitter._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    arguments=item["arguments"],
                    name=item["name"],
                )
            )
        output[index] = item
        closing.append(emitter._event("response.output_item.done", output_index=index, item=item))
    return closing
