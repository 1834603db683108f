"""Where a runner's events go.

`DurableSink` (background responses) appends every event to the event log through the
store's group commit; live streams read the log, so nothing is seen before it is
committed (G7). `MemorySink` (foreground responses) hands events straight to the one
client that is waiting, or drops them when that client asked for JSON.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from store import EventRow, Fence, Store

from ._json import dumps
from ._status import TERMINAL_EVENTS

Event = dict[str, Any]


def encode(event: Event) -> EventRow:
    return EventRow(seq=event["sequence_number"], type=event["type"], data=dumps(event))


def encode_lifecycle(type_: str, seq: int, snapshot: str) -> EventRow:
    """`encode(emitter.lifecycle(type_))` built around the response's JSON text
    (`dumps(response)`), byte for byte: the response is encoded once, not once per event."""
    data = f'{{"type":{dumps(type_)},"sequence_number":{seq},"response":{snapshot}}}'
    return EventRow(seq=seq, type=type_, data=data)


class Sink(Protocol):
    durable: bool

    def emit(self, events: Sequence[Event]) -> None: ...

    async def flush(self) -> None: ...

    def abandon(self) -> None:
        """No end will be emitted: the turn lost its response to another process."""


class DurableSink:
    """Events go to the store's group commit. Events emitted while an append waits for the
    writer join that append (the store's `join`), so a fast stream costs one operation
    per commit, not one per event."""

    durable = True

    def __init__(self, store: Store, response_id: str, fence: Fence) -> None:
        self._store = store
        self._response_id = response_id
        self._fence = fence
        self._pending: dict[asyncio.Future[None], None] = {}  # in order, each once
        self._failed: BaseException | None = None  # an append failed: the log has a gap

    def emit(self, events: Sequence[Event]) -> None:
        if not events or self._failed is not None:
            return
        rows = [encode(e) for e in events]
        append = self._store.append_events(self._response_id, self._fence, rows, join=True)
        if append not in self._pending:
            append.add_done_callback(self._appended)
            self._pending[append] = None

    def abandon(self) -> None:
        return None  # followers read the log, where the response's new owner ends it

    def _appended(self, append: asyncio.Future[None]) -> None:
        if not append.cancelled() and append.exception() is not None and self._failed is None:
            self._failed = append.exception()

    async def flush(self) -> None:
        pending = list(self._pending)
        self._pending.clear()
        # Every pending append must be awaited so no failure goes unseen; the first raises.
        results = await asyncio.gather(*pending, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        if self._failed is not None:  # nothing emitted after a failed append is appended
            raise self._failed


class MemorySink:
    """Events for the client of a foreground response, in memory only."""

    durable = False

    def __init__(self, *, keep: bool) -> None:
        self._keep = keep
        self._queue: asyncio.Queue[EventRow | None] = asyncio.Queue()  # None: abandoned
        self._open: dict[int, dict[str, Any]] = {}  # output_index -> item as added, until done
        self._shown: dict[int, dict[str, Any]] = {}  # output_index -> item as last sent
        self._next_seq = 0

    def emit(self, events: Sequence[Event]) -> None:
        if self._keep:
            for event in events:
                self._track(event)
                self._queue.put_nowait(encode(event))

    def _track(self, event: Event) -> None:
        self._next_seq = event["sequence_number"] + 1
        if event["type"] == "response.output_item.added":
            self._open[event["output_index"]] = self._shown[event["output_index"]] = event["item"]
        elif event["type"] == "response.output_item.done":
            self._open.pop(event["output_index"], None)
            self._shown[event["output_index"]] = event["item"]

    async def flush(self) -> None:
        return None

    def abandon(self) -> None:
        """Close the items the client saw opened as cut off (a message with no content, as
        a failure leaves it), whatever close the runner held back, so that the stream stays
        well-formed up to the end appended after it (server/_responses_routes.py)."""
        for index, item in sorted(self._open.items()):
            done = {**item, "status": "incomplete"} | (
                {"content": []} if item["type"] == "message" else {}
            )
            event = {"type": "response.output_item.done", "sequence_number": self._next_seq}
            self._queue.put_nowait(encode({**event, "output_index": index, "item": done}))
            self._shown[index] = done
            self._next_seq += 1
        self._open.clear()
        self._queue.put_nowait(None)

    def shown(self) -> list[dict[str, Any]]:
        """The output items as the client last saw them (after `abandon`, all closed)."""
        return [self._shown[index] for index in sorted(self._shown)]

    async def rows(self) -> AsyncIterator[list[EventRow]]:
        """The events in batches: all those emitted since the last batch, so that a
        burst goes out in one write; they end with the terminal event, or without one
        where the turn was abandoned."""
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty():
                batch.append(self._queue.get_nowait())
            rows = [row for row in batch if row is not None]
            if rows:
                yield rows
            if len(rows) < len(batch) or rows[-1].type in TERMINAL_EVENTS:
                return
