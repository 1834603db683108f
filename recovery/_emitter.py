"""Turns a turn's progress into Responses stream events (docs/protocol.md section 7).

The emitter owns the in-progress Response object and the next sequence number. Each
method returns the events to publish, in order; it never does I/O. Items are opened
lazily by the first delta that needs them (or by the model's `MessageStart` and
`ReasoningStart`) and closed (`output_item.done`) when another item starts or the step
ends. A step's reasoning (a `reasoning` item, `_reasoning.py`) comes before what it led
to, and stays open, even once the model finished it (`ReasoningDone`), until that begins:
a model call cut before then (a crash, a failed call) leaves reasoning that led to
nothing, which closes `incomplete` (the next attempt reasons again). A message's one
part is `output_text`, or `refusal` when the model declined (the part kinds and their
events: `_parts.py`). A step may say several messages, each with the `phase` its model
gave it.
"""

from __future__ import annotations

import time
from typing import Any

from . import _parts as parts
from ._ids import new_id
from ._json import copied
from ._model import FunctionCallDelta, LogProb, ReasoningDelta, RefusalDelta, TextDelta
from ._reasoning import OpenReasoning, new_item

Event = dict[str, Any]


class _OpenMessage:
    __slots__ = ("heard", "index", "item", "kind", "logprobs", "text")

    def __init__(self, index: int, item: dict[str, Any], kind: str = "output_text") -> None:
        self.index = index
        self.item = item
        self.kind = kind  # of its one content part: output_text or refusal
        self.text: list[str] = []
        self.logprobs: list[LogProb] = []  # of the text, when the request asked for them
        # While resuming after a cut: the new attempt's text not yet matched against
        # what was streamed before it (None once the message goes on live).
        self.heard: str | None = None


class _OpenCall:
    __slots__ = ("arguments", "index", "item")

    def __init__(self, index: int, item: dict[str, Any]) -> None:
        self.index = index
        self.item = item
        self.arguments: list[str] = []


class Emitter:
    def __init__(self, response: dict[str, Any], next_seq: int) -> None:
        self.response = response
        self.next_seq = next_seq
        self._message: _OpenMessage | None = None
        self._phase: str | None = None  # of the next message to open (`MessageStart`)
        self._reasoning: OpenReasoning | None = None
        self._calls: dict[str, _OpenCall] = {}

    @property
    def output(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.response["output"]
        return items

    def _event(self, type_: str, **fields: Any) -> Event:
        event = {"type": type_, "sequence_number": self.next_seq, **fields}
        self.next_seq += 1
        return event

    # -- lifecycle ----------------------------------------------------------------------

    def lifecycle(self, type_: str) -> Event:
        """`response.created`, `.queued` or `.in_progress`, carrying the response as it is."""
        return self._event(type_, response=self._response_copy())

    def _response_copy(self) -> dict[str, Any]:
        # Shallow: sinks encode an event when it is emitted, before the next change; only
        # the output list grows in place.
        return {**self.response, "output": list(self.response["output"])}

    def set_status(self, status: str) -> None:
        self.response["status"] = status

    def finish(
        self,
        status: str,
        *,
        error: dict[str, Any] | None = None,
        incomplete_reason: str | None = None,
        usage: dict[str, Any] | None = None,
    ) -> Event:
        """The one terminal event. Cancelled responses end with `response.failed` whose
        status is `cancelled` (docs/protocol.md section 12: there is no cancelled event)."""
        response = self.response
        response["status"] = status
        response["error"] = error
        response["incomplete_details"] = (
            {"reason": incomplete_reason} if incomplete_reason is not None else None
        )
        if usage is not None:
            response["usage"] = usage
        response["completed_at"] = int(time.time()) if status == "completed" else None
        type_ = {
            "completed": "response.completed",
            "incomplete": "response.incomplete",
        }.get(status, "response.failed")
        return self._event(type_, response=self._response_copy())

    # -- model output -------------------------------------------------------------------

    def text_delta(self, delta: TextDelta) -> list[Event]:
        return self._message_delta("output_text", delta.text, delta.logprobs)

    def refusal_delta(self, delta: RefusalDelta) -> list[Event]:
        return self._message_delta("refusal", delta.text)

    def _message_delta(
        self, kind: str, text: str, logprobs: tuple[LogProb, ...] = ()
    ) -> list[Event]:
        events = self._close_calls("completed") + self._close_reasoning("completed")
        message = self._message
        if message is not None and message.heard is not None:
            if message.kind == kind:
                return events + self._resume_text(message, text)
            events += self._drop_message(message)  # the new attempt answers otherwise
        elif message is not None and message.kind != kind:
            events += self._close_message("completed")
        if self._message is None:
            events += self._open_message(kind)
        assert self._message is not None
        return events + self._append_text(self._message, text, logprobs)

    def message_start(self, phase: str | None = None) -> list[Event]:
        """The model begins a new message: the open one is finished, and the next text
        opens a message with `phase`. While a cut message is being resumed and the new
        attempt has said nothing of it yet, its first message is matched against it."""
        self._phase = phase
        if self._message is not None and self._message.heard == "":
            return []
        return self._close_message("completed")

    @property
    def _resuming(self) -> bool:
        return self._message is not None and self._message.heard is not None

    def reasoning_start(self, item_id: str | None = None) -> list[Event]:
        """A new `reasoning` item opens, closing what was open before it; it takes the
        model's `item_id` when given (unless this output has an item of that id). While
        a cut message is being resumed, the new attempt's reasoning is not streamed: the
        reasoning that led to the cut message was."""
        if self._resuming:
            return []
        events = self._close_reasoning("completed") + self._close_message("completed")
        events += self._close_calls("completed")
        if item_id is None or any(item.get("id") == item_id for item in self.output):
            item_id = new_id("rs")
        reasoning = self._reasoning = OpenReasoning(len(self.output), new_item(item_id))
        self.output.append(reasoning.item)
        added = copied(reasoning.item)
        return [
            *events,
            self._event("response.output_item.added", output_index=reasoning.index, item=added),
        ]

    def reasoning_delta(self, delta: ReasoningDelta) -> list[Event]:
        """Reasoning continues the open `reasoning` item, or opens one (Chat Completions
        upstreams never say where an item begins)."""
        if not delta.text or self._resuming:
            return []
        events = self.reasoning_start() if self._reasoning_ended else []
        assert self._reasoning is not None
        return events + self._reasoning.delta(self._event, delta)

    def reasoning_done(self, encrypted_content: str | None = None) -> list[Event]:
        """The open reasoning item is finished, with the model's `encrypted_content` if
        the request asked for it (an item the model gave whole opens here). It closes
        `completed` when what it led to begins, in the same events: a cut before that
        closes it `incomplete` (`suspend_message`, `_restore.py`), as cut reasoning."""
        if self._resuming:
            return []
        events = self.reasoning_start() if self._reasoning_ended else []
        assert self._reasoning is not None
        self._reasoning.end(encrypted_content)
        return events

    @property
    def _reasoning_ended(self) -> bool:
        """No reasoning item is open that more reasoning would continue."""
        return self._reasoning is None or self._reasoning.ended

    def _append_text(
        self, message: _OpenMessage, text: str, logprobs: tuple[LogProb, ...] = ()
    ) -> list[Event]:
        """Stream `text`. (Text that continues a cut message after a retry carries no
        logprobs: those of the new attempt need not line up with the cut.)"""
        if not text:
            return []
        message.text.append(text)
        message.logprobs.extend(logprobs)
        type_, fields = parts.delta_event(message.kind, text, logprobs)
        return [
            self._event(
                type_,
                item_id=message.item["id"],
                output_index=message.index,
                content_index=0,
                **fields,
            )
        ]

    # -- a message cut off, and its next attempt -----------------------------------------

    def suspend_message(self) -> list[Event]:
        """The model call streaming the open message failed and will be tried again:
        keep the message open, and match the next attempt's text against it. Reasoning
        it cut is closed `incomplete`, finished or not (it led to nothing): the next
        attempt reasons again, in a new item."""
        if self._message is not None:
            self._message.heard = ""
        return self._close_reasoning("incomplete")

    def resume_message(
        self,
        index: int,
        item: dict[str, Any],
        text: str,
        logprobs: list[LogProb] | None = None,
        kind: str = "output_text",
    ) -> None:
        """Reopen a message a crash cut off (rebuilt from the log) so that the next
        model call continues it instead of starting the answer again."""
        message = _OpenMessage(index, item, kind)
        message.text.append(text)
        message.logprobs.extend(logprobs or ())
        message.heard = ""
        self._message = message

    def _resume_text(self, message: _OpenMessage, text: str) -> list[Event]:
        """Text of a new attempt at a cut message. While it repeats what was streamed
        before the cut nothing is sent; past that, it continues the same item. If it
        says something else, the cut message is dropped and the new text starts a new
        one, so the answer is read once either way (`output_text`)."""
        assert message.heard is not None
        heard, streamed = message.heard + text, "".join(message.text)
        if streamed.startswith(heard):
            message.heard = heard if len(heard) < len(streamed) else None
            self._phase = None  # the cut message goes on, with its own phase
            return []
        if heard.startswith(streamed):
            message.heard = None
            self._phase = None  # the cut message goes on, with its own phase
            return self._append_text(message, heard[len(streamed) :])
        events = self._drop_message(message)
        events += self._open_message(message.kind)
        assert self._message is not None
        return events + self._append_text(self._message, heard)

    def _drop_message(self, message: _OpenMessage) -> list[Event]:
        """Close a cut message `incomplete` with no content: its text events stay as
        they were streamed, but it is no part of the answer."""
        events = self._close_message("incomplete")
        message.item["content"] = []
        events[-1]["item"]["content"] = []
        return events

    def function_call_delta(self, delta: FunctionCallDelta) -> list[Event]:
        events = self._close_message("completed") + self._close_reasoning("completed")
        call = self._calls.get(delta.call_id)
        if call is None:
            item = {
                "type": "function_call",
                "id": new_id("fc"),
                "call_id": delta.call_id,
                "name": delta.name,
                "arguments": "",
                "status": "in_progress",
            }
            call = _OpenCall(len(self.output), item)
            self._calls[delta.call_id] = call
            self.output.append(item)
            events.append(
                self._event(
                    "response.output_item.added",
                    output_index=call.index,
                    item=copied(item),
                )
            )
        if delta.arguments:
            call.arguments.append(delta.arguments)
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=call.item["id"],
                    output_index=call.index,
                    delta=delta.arguments,
                )
            )
        return events

    def function_calls(self, deltas: list[FunctionCallDelta]) -> list[Event]:
        """A step's function calls, whole: the model streamed them (`deltas`, in order)
        and they are published only once its stream ended, in one batch with the step
        record, so that no call is ever seen (or logged) before the step's decision is
        durable. Each call's arguments go out as one delta."""
        merged: dict[str, FunctionCallDelta] = {}
        for delta in deltas:
            seen = merged.get(delta.call_id)
            if seen is None:
                merged[delta.call_id] = delta
            else:
                merged[delta.call_id] = FunctionCallDelta(
                    delta.call_id, seen.name, seen.arguments + delta.arguments
                )
        events = self.close_open()
        for delta in merged.values():
            events += self.function_call_delta(delta)
        return events + self._close_calls("completed")

    def drop_open(self) -> list[Event]:
        """Close whatever is open as cut off, a message with no content: the turn failed,
        so its partial text is no answer (its text events stay as streamed)."""
        events = self._close_reasoning("incomplete")
        events += self._drop_message(self._message) if self._message is not None else []
        return events + self._close_calls("incomplete")

    def close_open(self, status: str = "completed") -> list[Event]:
        """Close every open item (`incomplete` when the step was cut off)."""
        return (
            self._close_reasoning(status) + self._close_message(status) + self._close_calls(status)
        )

    def add_item(self, item: dict[str, Any]) -> list[Event]:
        """Add a finished item (e.g. a server tool's `function_call_output`)."""
        events = self.close_open()
        index = len(self.output)
        self.output.append(item)
        events.append(
            self._event("response.output_item.added", output_index=index, item=copied(item))
        )
        events.append(
            self._event("response.output_item.done", output_index=index, item=copied(item))
        )
        return events

    # -- items --------------------------------------------------------------------------

    def _open_message(self, kind: str = "output_text") -> list[Event]:
        item: dict[str, Any] = {
            "type": "message",
            "id": new_id("msg"),
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        if self._phase is not None:
            item["phase"], self._phase = self._phase, None
        self._message = _OpenMessage(len(self.output), item, kind)
        return self._open_item(self._message.index, item, kind)

    def _open_item(self, index: int, item: dict[str, Any], kind: str) -> list[Event]:
        """Add `item` to the output with one empty content part of `kind`."""
        self.output.append(item)
        events = [
            self._event("response.output_item.added", output_index=index, item=copied(item)),
            self._event(
                "response.content_part.added",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=parts.part(kind),
            ),
        ]
        item["content"].append(parts.part(kind))
        return events

    def close_part(
        self,
        index: int,
        item: dict[str, Any],
        kind: str,
        text: str,
        logprobs: list[LogProb] | None = None,
    ) -> list[Event]:
        """The events that end an item's one content part (its whole text, then the
        part); the item's content becomes that part."""
        type_, fields = parts.done_event(kind, text, logprobs)
        common = {"item_id": item["id"], "output_index": index, "content_index": 0}
        item["content"] = [parts.part(kind, text, logprobs)]
        return [
            self._event(type_, **common, **fields),
            self._event(
                "response.content_part.done", **common, part=parts.part(kind, text, logprobs)
            ),
        ]

    def _close_reasoning(self, status: str) -> list[Event]:
        reasoning, self._reasoning = self._reasoning, None
        if reasoning is None:
            return []
        return reasoning.close(self._event, status)

    def _close_message(self, status: str) -> list[Event]:
        message = self._message
        if message is None:
            return []
        if message.heard is not None and status == "completed":
            # The new attempt ended before it said all that the cut one had: its text
            # so far is the answer, in a message of its own.
            heard, message.heard = message.heard, None
            events = self._drop_message(message)
            if heard:
                events += self._open_message(message.kind)
                assert self._message is not None
                events += self._append_text(self._message, heard)
                events += self._close_message("completed")
            return events
        message.heard = None
        self._message = None
        text = "".join(message.text)
        events = self.close_part(message.index, message.item, message.kind, text, message.logprobs)
        message.item["status"] = status
        done = self._event(
            "response.output_item.done",
            output_index=message.index,
            item=copied(message.item),
        )
        return [*events, done]

    def _close_calls(self, status: str) -> list[Event]:
        events: list[Event] = []
        for call in sorted(self._calls.values(), key=lambda c: c.index):
            arguments = "".join(call.arguments)
            call.item["arguments"] = arguments
            call.item["status"] = status
            events.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=call.item["id"],
                    output_index=call.index,
                    arguments=arguments,
                    name=call.item["name"],
                )
            )
            events.append(
                self._event(
                    "response.output_item.done",
                    output_index=call.index,
                    item=copied(call.item),
                )
            )
        self._calls.clear()
        return events
