"""A `reasoning` item while it streams, and the events that stream it (OpenAI's names).

Its text comes in two kinds. A reasoning summary (what OpenAI's models show of their
reasoning, when `reasoning.summary` asks) is the item's `summary`: one `summary_text` part
per part the model gives, each streamed as `response.reasoning_summary_part.added`,
`response.reasoning_summary_text.delta` events, `response.reasoning_summary_text.done`
(its whole text) and `response.reasoning_summary_part.done`; a part ends when the next
begins or the item closes. Raw reasoning (vLLM's, or a Chat Completions upstream's
`reasoning_content`) is the item's `content`: one `reasoning_text` part, streamed like a
message's text (`_parts.py`).

`encrypted_content` is kept only on an item closed `completed`: a cut item (closed
`incomplete`) never carries one, so no partial reasoning is ever given back to a model.
An item the model finished (`end`) is closed only when what it led to begins (the
emitter's `_close_reasoning`): cut before that, it led to nothing, and closes `incomplete`
like an item cut while it streams.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import _parts as parts
from ._json import copied
from ._model import ReasoningDelta

Event = dict[str, Any]
# The emitter's `_event`: an event of this type with these fields, numbered.
MakeEvent = Callable[..., Event]


def new_item(item_id: str) -> dict[str, Any]:
    """A reasoning item as it opens."""
    return {
        "type": "reasoning",
        "id": item_id,
        "summary": [],
        "content": [],
        "status": "in_progress",
    }


def summary_part(text: str = "") -> dict[str, Any]:
    return {"type": "summary_text", "text": text}


class OpenReasoning:
    """The reasoning item at `index` of the output, streaming."""

    __slots__ = ("_key", "ended", "index", "item", "sealed", "summaries", "summary_open", "text")

    def __init__(self, index: int, item: dict[str, Any]) -> None:
        self.index = index
        self.item = item
        self.summaries: list[list[str]] = []  # the pieces of each summary part
        self.summary_open = False  # the last summary part is still streaming
        self.text: list[str] | None = None  # the raw reasoning, once its part was added
        self._key: int | None = None  # the model's name for the summary part streaming
        self.ended = False  # the model finished it (`end`); it is not closed yet
        self.sealed: str | None = None  # the model's `encrypted_content`, given at its end

    def end(self, encrypted_content: str | None) -> None:
        """The model finished this item: nothing more streams into it, and it closes
        `completed`, with `encrypted_content`, once what it led to begins."""
        self.ended, self.sealed = True, encrypted_content

    def delta(self, event: MakeEvent, delta: ReasoningDelta) -> list[Event]:
        if delta.summary is None:
            return self._text_delta(event, delta.text)
        events: list[Event] = []
        if not self.summary_open or delta.summary != self._key:
            events = self._end_summary(event)
            self.summaries.append([])
            self.summary_open, self._key = True, delta.summary
            added = "response.reasoning_summary_part.added"
            events.append(event(added, **self._summary_at(), part=summary_part()))
        self.summaries[-1].append(delta.text)
        delta_type = "response.reasoning_summary_text.delta"
        return [*events, event(delta_type, **self._summary_at(), delta=delta.text)]

    def _text_delta(self, event: MakeEvent, text: str) -> list[Event]:
        events: list[Event] = []
        if self.text is None:
            self.text = []
            part = parts.part("reasoning_text")
            events.append(event("response.content_part.added", **self._content_at(), part=part))
        self.text.append(text)
        type_, fields = parts.delta_event("reasoning_text", text)
        return [*events, event(type_, **self._content_at(), **fields)]

    def close(self, event: MakeEvent, status: str) -> list[Event]:
        """The events that end each open part, then the item (`output_item.done`)."""
        events = self._end_summary(event)
        item = self.item
        item["summary"] = [summary_part("".join(pieces)) for pieces in self.summaries]
        if self.text is not None:
            text = "".join(self.text)
            type_, fields = parts.done_event("reasoning_text", text)
            done = parts.part("reasoning_text", text)
            events.append(event(type_, **self._content_at(), **fields))
            events.append(event("response.content_part.done", **self._content_at(), part=done))
            item["content"] = [done]
        if self.sealed and status == "completed":
            item["encrypted_content"] = self.sealed
        item["status"] = status
        done_item = copied(item)
        return [
            *events,
            event("response.output_item.done", output_index=self.index, item=done_item),
        ]

    def replay(self, logged: Event) -> None:
        """Apply one of this item's events, read back from the log (`_restore.py`)."""
        kind = logged["type"]
        if kind == "response.reasoning_summary_part.added":
            self.summaries.append([])
            self.summary_open = True
        elif kind == "response.reasoning_summary_text.delta":
            self.summaries[logged["summary_index"]].append(logged["delta"])
        elif kind == "response.reasoning_summary_part.done":
            self.summary_open = False
        elif kind == "response.content_part.added":
            self.text = []
        elif kind == "response.reasoning_text.delta" and self.text is not None:
            self.text.append(logged["delta"])

    def _end_summary(self, event: MakeEvent) -> list[Event]:
        if not self.summary_open:
            return []
        self.summary_open = False
        text = "".join(self.summaries[-1])
        return [
            event("response.reasoning_summary_text.done", **self._summary_at(), text=text),
            event(
                "response.reasoning_summary_part.done",
                **self._summary_at(),
                part=summary_part(text),
            ),
        ]

    def _summary_at(self) -> dict[str, Any]:
        """The fields that place an event in the last summary part."""
        return {
            "item_id": self.item["id"],
            "output_index": self.index,
            "summary_index": len(self.summaries) - 1,
        }

    def _content_at(self) -> dict[str, Any]:
        return {"item_id": self.item["id"], "output_index": self.index, "content_index": 0}
