"""Check that a Responses SSE stream obeys the ordering rules.

``check_stream`` enforces docs/protocol.md section 7 (what the openai SDK's
``responses.stream()`` state machine needs) and docs/guarantees.md G7 (what a replay
must look like after any number of crashes). ``parse_sse`` decodes a raw
``text/event-stream`` body the way the SDK does, but strictly: anything the SDK
would choke on is an ``AssertionError`` here.

A window (``starting_after=N``) only shows events ``N+1...``; items added before
it are unknown, so rules that need their earlier events are skipped for them,
while everything that can be checked from inside the window still is.

A stream may also consist of one flat ``error`` event and nothing else: that is
how a response whose creation failed is reported (docs/protocol.md section 10, item 2).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

__all__ = ["LIFECYCLE_TYPES", "TERMINAL_TYPES", "check_stream", "parse_sse"]

TERMINAL_TYPES: Final = frozenset({"response.completed", "response.failed", "response.incomplete"})
LIFECYCLE_TYPES: Final = TERMINAL_TYPES | {
    "response.created",
    "response.queued",
    "response.in_progress",
}
# The response.status each lifecycle event may carry. A cancelled stream ends with
# response.failed whose status is "cancelled" (docs/protocol.md section 12).
_LIFECYCLE_STATUS: Final[Mapping[str, frozenset[str]]] = {
    "response.created": frozenset({"queued", "in_progress"}),
    "response.queued": frozenset({"queued"}),
    "response.in_progress": frozenset({"in_progress"}),
    "response.completed": frozenset({"completed"}),
    "response.failed": frozenset({"failed", "cancelled"}),
    "response.incomplete": frozenset({"incomplete"}),
}
_ARGUMENT_EVENTS: Final = frozenset(
    {"response.function_call_arguments.delta", "response.function_call_arguments.done"}
)
_TEXT_EVENTS: Final = frozenset({"response.output_text.delta", "response.output_text.done"})
_SUMMARY_EVENTS: Final = frozenset(
    {
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
    }
)


@dataclass
class _Part:
    """One content part of a message (or reasoning) item, by content_index."""

    type: str
    deltas: list[str] = field(default_factory=list)
    logprobs: list[Any] = field(default_factory=list)  # of the deltas, in order
    text_done: str | None = None
    done: bool = False


@dataclass
class _Item:
    """What the stream has said so far about one output_index."""

    added: Mapping[str, Any] | None  # None: added before the window (unknown)
    parts: dict[int, _Part] = field(default_factory=dict)
    summaries: dict[int, _Part] = field(default_factory=dict)  # by summary_index
    argument_deltas: list[str] = field(default_factory=list)
    arguments_done: str | None = None
    done: Mapping[str, Any] | None = None

    @property
    def known(self) -> bool:
        return self.added is not None


class _Checker:
    def __init__(self, starting_after: int | None, complete: bool) -> None:
        self.first_seq = 0 if starting_after is None else starting_after + 1
        self.full = self.first_seq == 0
        self.complete = complete
        self.items: dict[int, _Item] = {}
        self.next_index: int | None = 0 if self.full else None
        self.first_window_index: int | None = None  # first index added inside a window
        self.response_id: str | None = None
        self.terminal: Mapping[str, Any] | None = None
        self.created_seen = False
        self.where = ""

    def fail(self, rule: str) -> NoReturn:
        raise AssertionError(f"{self.where}: {rule}")

    # -- entry point -------------------------------------------------------

    def run(self, events: Sequence[Mapping[str, Any]]) -> None:
        if self.full and len(events) == 1 and events[0].get("type") == "error":
            self.where = "event[0] (seq=?, type='error')"
            self.check_envelope(0, events[0])
            self.check_flat_error(events[0])
            return
        for index, event in enumerate(events):
            self.where = (
                f"event[{index}] (seq={event.get('sequence_number')!r}, type={event.get('type')!r})"
            )
            self.check_envelope(index, event)
            self.check_event(index, event)
        self.where = f"end of stream after {len(events)} events"
        self.check_end()

    # -- per event ---------------------------------------------------------

    def check_envelope(self, index: int, event: Mapping[str, Any]) -> None:
        if not isinstance(event, Mapping):
            self.fail(f"payload is not an object: {event!r}")
        if not isinstance(event.get("type"), str):
            self.fail("payload has no string 'type'")
        seq = event.get("sequence_number")
        if not isinstance(seq, int) or isinstance(seq, bool):
            self.fail(f"sequence_number must be an integer, got {seq!r}")
        expected = self.first_seq + index
        if seq != expected:
            kind = "repeat or step back" if seq < expected else "gap"
            self.fail(f"sequence_number {seq}, expected {expected} ({kind})")
        if "error" in event:
            self.fail(
                "payload has a top-level 'error' key; the openai SDK raises APIError on it "
                "(docs/protocol.md section 10, item 5)"
            )

    def check_flat_error(self, event: Mapping[str, Any]) -> None:
        if not isinstance(event.get("message"), str):
            self.fail("flat error event needs a string 'message'")
        for key in ("code", "param"):
            if key not in event:
                self.fail(f"flat error event needs '{key}' (string or null)")

    def check_event(self, index: int, event: Mapping[str, Any]) -> None:
        event_type: str = event["type"]
        if self.terminal is not None:
            self.fail(f"event after the terminal {self.terminal['type']}")
        if index == 0 and self.full and event_type != "response.created":
            self.fail("the first event of a stream from sequence 0 must be response.created")
        if event_type == "error":
            self.fail(
                "an 'error' event is only allowed alone, when creation failed; "
                "after response.created end with response.failed"
            )
        if event_type in LIFECYCLE_TYPES:
            self.check_lifecycle(event_type, event)
        elif event_type == "response.output_item.added":
            self.check_item_added(event)
        elif event_type == "response.output_item.done":
            self.check_item_done(event)
        elif "output_index" in event:
            self.check_item_event(event_type, event)

    def check_lifecycle(self, event_type: str, event: Mapping[str, Any]) -> None:
        response = event.get("response")
        if not isinstance(response, Mapping):
            self.fail("lifecycle event has no 'response' object")
        response_id = response.get("id")
        if not isinstance(response_id, str):
            self.fail("lifecycle event's response has no string 'id'")
        if self.response_id is None:
            self.response_id = response_id
        elif response_id != self.response_id:
            self.fail(f"response.id changed from {self.response_id!r} to {response_id!r}")
        status = response.get("status")
        if status not in _LIFECYCLE_STATUS[event_type]:
            allowed = sorted(_LIFECYCLE_STATUS[event_type])
            self.fail(f"response.status is {status!r}, expected one of {allowed}")
        if event_type == "response.created":
            if self.created_seen or not self.full:
                self.fail("response.created may only be the first event (sequence 0)")
            self.created_seen = True
        if event_type in TERMINAL_TYPES:
            self.check_terminal(event_type, response)
            self.terminal = event

    def output_index(self, event: Mapping[str, Any]) -> int:
        index = event.get("output_index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            self.fail(f"output_index must be a non-negative integer, got {index!r}")
        return int(index)

    def check_item_added(self, event: Mapping[str, Any]) -> None:
        index = self.output_index(event)
        item = event.get("item")
        if not isinstance(item, Mapping) or not isinstance(item.get("type"), str):
            self.fail("output_item.added has no 'item' object with a string 'type'")
        if index in self.items:
            state = self.items[index]
            if state.known:
                self.fail(f"output_item.added repeated for output_index {index}")
            self.fail(f"output_item.added for output_index {index} after events for that index")
        if self.next_index is None:
            # First item added inside a window: earlier ones were all lower.
            unknown = [i for i, s in self.items.items() if not s.known]
            if unknown and index <= max(unknown):
                self.fail(
                    f"output_item.added for output_index {index}, but index {max(unknown)} "
                    "was already in use"
                )
            self.first_window_index = index
        elif index != self.next_index:
            self.fail(f"output_item.added for output_index {index}, expected {self.next_index}")
        self.next_index = index + 1
        self.items[index] = _Item(added=item)
        if item["type"] == "message":
            for part in item.get("content") or ():
                self.check_part_shape(part)

    def item_for(self, event: Mapping[str, Any]) -> tuple[int, _Item]:
        """The item an item-scoped event refers to, registering unknown ones."""
        index = self.output_index(event)
        state = self.items.get(index)
        if state is None:
            if self.full:
                self.fail(f"event for output_index {index} before its output_item.added")
            if self.first_window_index is not None and index >= self.first_window_index:
                self.fail(f"event for output_index {index} before its output_item.added")
            state = self.items[index] = _Item(added=None)
        if state.done is not None:
            self.fail(f"event for output_index {index} after its output_item.done")
        if (
            state.added is not None
            and "item_id" in event
            and event["item_id"] != state.added.get("id")
        ):
            self.fail(
                f"item_id {event['item_id']!r} does not match the id "
                f"{state.added.get('id')!r} of output_index {index}"
            )
        return index, state

    def check_item_event(self, event_type: str, event: Mapping[str, Any]) -> None:
        _, state = self.item_for(event)
        item_type = state.added.get("type") if state.added is not None else None
        if event_type in _ARGUMENT_EVENTS:
            if state.known and item_type != "function_call":
                self.fail(f"{event_type} for a {item_type!r} item, expected function_call")
            self.check_arguments(event_type, event, state)
        elif event_type.startswith("response.content_part."):
            if state.known and item_type not in ("message", "reasoning"):
                self.fail(f"{event_type} for a {item_type!r} item, expected a message")
            self.check_content_part(event_type, event, state)
        elif event_type in _TEXT_EVENTS:
            if state.known and item_type != "message":
                self.fail(f"{event_type} for a {item_type!r} item, expected a message")
            self.check_text(event_type, event, state)
        elif event_type in _SUMMARY_EVENTS:
            if state.known and item_type != "reasoning":
                self.fail(f"{event_type} for a {item_type!r} item, expected reasoning")
            self.check_summary(event_type, event, state)

    def content_index(self, event: Mapping[str, Any]) -> int:
        content_index = event.get("content_index")
        if not isinstance(content_index, int) or isinstance(content_index, bool):
            self.fail(f"content_index must be an integer, got {content_index!r}")
        return int(content_index)

    def check_part_shape(self, part: Any) -> None:
        if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
            self.fail(f"content part is not an object with a string 'type': {part!r}")
        if part["type"] == "output_text" and not isinstance(part.get("annotations"), list):
            self.fail("output_text part has no 'annotations' list")

    def check_content_part(self, event_type: str, event: Mapping[str, Any], state: _Item) -> None:
        content_index = self.content_index(event)
        part = event.get("part")
        self.check_part_shape(part)
        assert isinstance(part, Mapping)
        current = state.parts.get(content_index)
        if event_type == "response.content_part.added":
            if current is not None:
                self.fail(f"content_part.added repeated for content_index {content_index}")
            if state.known and content_index != len(state.parts):
                self.fail(
                    f"content_part.added for content_index {content_index}, "
                    f"expected {len(state.parts)}"
                )
            state.parts[content_index] = _Part(type=part["type"])
            return
        if current is None:
            if state.known:
                self.fail(f"content_part.done for content_index {content_index} never added")
            return
        if current.done:
            self.fail(f"content_part.done repeated for content_index {content_index}")
        if part["type"] != current.type:
            self.fail(f"content_part.done type {part['type']!r}, added as {current.type!r}")
        if current.text_done is not None and part.get("text") != current.text_done:
            self.fail("content_part.done part.text differs from output_text.done text")
        current.done = True

    def check_text(self, event_type: str, event: Mapping[str, Any], state: _Item) -> None:
        content_index = self.content_index(event)
        # `[]` unless the request asked for logprobs (include, top_logprobs): then entries.
        logprobs = event.get("logprobs")
        if not isinstance(logprobs, list) or not all(isinstance(p, dict) for p in logprobs):
            self.fail(f"{event_type} must carry a list of logprobs, got {logprobs!r}")
        part = state.parts.get(content_index)
        if part is None:
            if state.known:
                self.fail(
                    f"{event_type} before content_part.added for content_index {content_index}"
                )
            return
        if part.type != "output_text":
            self.fail(f"{event_type} for a {part.type!r} part, expected output_text")
        if part.done or part.text_done is not None:
            self.fail(f"{event_type} after the text of content_index {content_index} was done")
        if event_type == "response.output_text.delta":
            delta = event.get("delta")
            if not isinstance(delta, str):
                self.fail(f"delta must be a string, got {delta!r}")
            part.deltas.append(delta)
            part.logprobs.extend(logprobs)
            return
        text = event.get("text")
        if text != "".join(part.deltas):
            self.fail(
                f"output_text.done text {text!r} != concatenated deltas {''.join(part.deltas)!r}"
            )
        if logprobs != part.logprobs:
            self.fail("output_text.done logprobs differ from the deltas' logprobs")
        part.text_done = str(text)

    def check_summary(self, event_type: str, event: Mapping[str, Any], state: _Item) -> None:
        """A reasoning summary's parts: added in order, each after the one before it is
        done, their text done as its deltas say, and each part done with that text."""
        index = event.get("summary_index")
        if not isinstance(index, int) or isinstance(index, bool):
            self.fail(f"summary_index must be an integer, got {index!r}")
        part = state.summaries.get(index)
        if event_type == "response.reasoning_summary_part.added":
            if part is not None:
                self.fail(f"reasoning_summary_part.added repeated for summary_index {index}")
            if state.known and index != len(state.summaries):
                self.fail(f"summary part {index} added, expected {len(state.summaries)}")
            if any(not each.done for each in state.summaries.values()):
                self.fail(f"summary part {index} added before the one before it was done")
            state.summaries[index] = _Part(type="summary_text")
            return
        if part is None:
            if state.known:
                self.fail(f"{event_type} for summary_index {index} never added")
            return
        if part.done or (part.text_done is not None and not event_type.endswith("part.done")):
            self.fail(f"{event_type} after the text of summary_index {index} was done")
        if event_type == "response.reasoning_summary_text.delta":
            if not isinstance(event.get("delta"), str):
                self.fail(f"delta must be a string, got {event.get('delta')!r}")
            part.deltas.append(event["delta"])
        elif event_type == "response.reasoning_summary_text.done":
            if event.get("text") != "".join(part.deltas):
                self.fail("reasoning_summary_text.done text != concatenated deltas")
            part.text_done = str(event.get("text"))
        else:
            said = event.get("part")
            if not isinstance(said, Mapping) or said.get("type") != "summary_text":
                self.fail(f"reasoning_summary_part.done part is not summary_text: {said!r}")
            if part.text_done is None:
                self.fail("reasoning_summary_part.done before its reasoning_summary_text.done")
            if said.get("text") != part.text_done:
                self.fail("reasoning_summary_part.done part.text differs from its text.done")
            part.done = True

    def check_arguments(self, event_type: str, event: Mapping[str, Any], state: _Item) -> None:
        if state.arguments_done is not None:
            self.fail(f"{event_type} after function_call_arguments.done")
        if event_type == "response.function_call_arguments.delta":
            delta = event.get("delta")
            if not isinstance(delta, str):
                self.fail(f"delta must be a string, got {delta!r}")
            state.argument_deltas.append(delta)
            return
        arguments = event.get("arguments")
        if not isinstance(arguments, str):
            self.fail(f"arguments must be a string, got {arguments!r}")
        name = event.get("name")
        if not isinstance(name, str):
            self.fail("function_call_arguments.done has no string 'name'")
        if state.added is not None:
            joined = "".join(state.argument_deltas)
            if arguments != joined:
                self.fail(f"arguments {arguments!r} != concatenated deltas {joined!r}")
            if name != state.added.get("name"):
                self.fail(f"name {name!r} differs from the item's {state.added.get('name')!r}")
        state.arguments_done = arguments

    def check_item_done(self, event: Mapping[str, Any]) -> None:
        index, state = self.item_for(event)
        item = event.get("item")
        if not isinstance(item, Mapping) or not isinstance(item.get("type"), str):
            self.fail("output_item.done has no 'item' object with a string 'type'")
        added = state.added
        if added is not None:
            keys = ["type", "id"] + (["call_id"] if added["type"] == "function_call" else [])
            for key in keys:
                if item.get(key) != added.get(key):
                    self.fail(
                        f"output_item.done changed {key} of output_index {index} "
                        f"from {added.get(key)!r} to {item.get(key)!r}"
                    )
        if item["type"] == "message":
            content = item.get("content")
            if not isinstance(content, list):
                self.fail("done message has no 'content' list")
            for part in content:
                self.check_part_shape(part)
            if item.get("status") == "completed":
                self.check_message_closed(index, content, state)
        if item["type"] == "reasoning" and item.get("status") == "completed":
            self.check_summary_closed(index, item.get("summary"), state)
        if (
            item["type"] == "function_call"
            and state.arguments_done is not None
            and item.get("arguments") != state.arguments_done
        ):
            self.fail("done function_call arguments differ from function_call_arguments.done")
        state.done = item

    def check_summary_closed(self, index: int, summary: Any, state: _Item) -> None:
        if not isinstance(summary, list):
            self.fail("done reasoning item has no 'summary' list")
        for summary_index, part in state.summaries.items():
            if not part.done:
                self.fail(f"completed reasoning {index} has summary_index {summary_index} not done")
            final = summary[summary_index] if summary_index < len(summary) else None
            if not isinstance(final, Mapping) or final.get("text") != part.text_done:
                self.fail(f"done reasoning summary[{summary_index}] differs from the streamed text")

    def check_message_closed(self, index: int, content: list[Any], state: _Item) -> None:
        for content_index, part in state.parts.items():
            if not part.done:
                self.fail(f"completed message {index} has content_index {content_index} not done")
            if part.text_done is not None:
                final = content[content_index] if content_index < len(content) else None
                if not isinstance(final, Mapping) or final.get("text") != part.text_done:
                    self.fail(
                        f"done message content[{content_index}] text differs from the streamed text"
                    )

    # -- terminal ----------------------------------------------------------

    def check_terminal(self, event_type: str, response: Mapping[str, Any]) -> None:
        open_items = sorted(i for i, s in self.items.items() if s.done is None)
        if open_items:
            self.fail(
                f"terminal {event_type} while output_index {open_items} has no output_item.done"
            )
        if event_type != "response.completed":
            return
        self.check_usage(response.get("usage"))
        output = response.get("output")
        if not isinstance(output, list):
            self.fail("response.completed has no 'output' list")
        if self.full and len(output) != len(self.items):
            self.fail(
                f"response.completed output has {len(output)} items, "
                f"the stream added {len(self.items)}"
            )
        for index, state in sorted(self.items.items()):
            if index >= len(output):
                self.fail(f"response.completed output has no output_index {index}")
            if state.done is not None and output[index] != state.done:
                self.fail(
                    f"response.completed output[{index}] differs from its output_item.done item"
                )

    def check_usage(self, usage: Any) -> None:
        if not isinstance(usage, Mapping):
            self.fail(f"response.completed has no usage object, got {usage!r}")
        details = usage.get("input_tokens_details")
        if not isinstance(details, Mapping):
            self.fail("usage has no input_tokens_details")
        for key in ("cached_tokens", "cache_write_tokens"):
            if not isinstance(details.get(key), int):
                self.fail(f"usage.input_tokens_details has no integer {key}")
        output_details = usage.get("output_tokens_details")
        if not isinstance(output_details, Mapping) or not isinstance(
            output_details.get("reasoning_tokens"), int
        ):
            self.fail("usage.output_tokens_details has no integer reasoning_tokens")

    def check_end(self) -> None:
        if self.complete and self.terminal is None:
            self.fail(f"no terminal event (one of {sorted(TERMINAL_TYPES)})")


def check_stream(
    events: Sequence[Mapping[str, Any]],
    *,
    starting_after: int | None = None,
    complete: bool = True,
) -> None:
    """Raise AssertionError unless ``events`` is a well-formed Responses stream.

    ``events`` are decoded payloads in arrival order. With ``starting_after=N`` they
    are the window a resume returns (sequence numbers from N+1). With
    ``complete=True`` the terminal event must be present (pass ``complete=False``
    for a stream cut off early, or an empty replay past its end).
    """
    _Checker(starting_after, complete).run(events)


_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")


def _decode_block(number: int, fields: list[tuple[str, str]]) -> dict[str, Any]:
    where = f"SSE block {number}"
    data = [value for name, value in fields if name == "data"]
    if not data:
        raise AssertionError(f"{where}: has fields {fields!r} but no data line")
    text = "\n".join(data)
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"{where}: data is not JSON ({exc}): {text!r}") from exc
    if not isinstance(payload, dict):
        raise AssertionError(f"{where}: data is not a JSON object: {text!r}")
    names = [value for name, value in fields if name == "event"]
    if names and names[-1] != payload.get("type"):
        raise AssertionError(
            f"{where}: event: {names[-1]!r} but payload type {payload.get('type')!r}"
        )
    return payload


def parse_sse(text: str, *, allow_partial: bool = False) -> list[dict[str, Any]]:
    """Decode a raw ``text/event-stream`` body into its JSON payloads.

    LF, CRLF and CR line ends are accepted; ``:`` comment lines are skipped;
    several ``data:`` lines are joined with ``\\n``; when a block has ``event:`` it
    must equal the payload's ``type``. A block without ``data:`` (the SDK fails on
    it), non-JSON data, or a last block without its closing blank line (unless
    ``allow_partial``, for a body cut off by a crash) is an ``AssertionError``.
    """
    payloads: list[dict[str, Any]] = []
    fields: list[tuple[str, str]] = []
    lines = _LINE_BREAK.split(text)
    # split() leaves "" after a final line break; a body ending in a blank line
    # therefore ends in ["", ""], whose first "" dispatches the last block.
    terminated = lines[-1] == ""
    for line in lines[:-1] if terminated else lines:
        if line == "":
            if fields:
                payloads.append(_decode_block(len(payloads), fields))
                fields = []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        fields.append((name, value[1:] if value.startswith(" ") else value))
    if fields and not allow_partial:
        raise AssertionError(
            f"SSE block {len(payloads)}: body ends without the blank line: {fields!r}"
        )
    return payloads
