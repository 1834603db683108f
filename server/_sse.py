"""Server-sent events: each stored event is framed once, as `event:` + one `data:` line.

Keep-alives are comment lines (`: keep-alive`), the only kind the openai SDK ignores
safely (docs/protocol.md section 7). Each open stream holds one of its tenant's stream slots
(`--max-streams-per-tenant`) until the response ends, however it ends.

A stream is paced by its client and shares the event loop (issue 12, item 5):

- it pulls its next batch (for a replay, the next page of the log) only once the last
  one was written: Hypercorn's `send` returns when its buffer for the connection is
  below its 64 KB high-water mark. Writes are at most `WRITE_BYTES`, so a stalled stream
  holds one page and one write, whatever the size of the log;
- Hypercorn drops the writes of a client that has gone, without an error and without
  yielding, so a stream stops pulling once its client has gone (`http.disconnect`);
  before this, each closed replay read and framed the rest of its log in one go;
- between batches it waits for its turn (`Pacer`): all streams together write about
  `BYTES_PER_TURN` per turn of the loop, so that hundreds of replays with a backlog
  leave /healthz and every other request their turns.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from recovery import TERMINAL_EVENTS, EventRow

from ._context import context, tenant
from ._errors import APIError

WRITE_BYTES = 16 * 1024  # the most one write hands to Hypercorn
BYTES_PER_TURN = 64 * 1024  # about what all streams together write per turn of the loop


def frame(row: EventRow) -> bytes:
    return f"event: {row.type}\ndata: {row.data}\n\n".encode()


def writes(batch: Sequence[EventRow], limit: int = WRITE_BYTES) -> Iterator[bytes]:
    """The frames of `batch` in writes of at most `limit` bytes: small frames share one
    (a burst goes out in one write), a larger frame is cut across several."""
    pending: list[bytes] = []
    size = 0
    for row in batch:
        data = frame(row)
        if pending and size + len(data) > limit:
            yield b"".join(pending)
            pending, size = [], 0
        if len(data) > limit:
            for start in range(0, len(data), limit):
                yield data[start : start + limit]
            continue
        pending.append(data)
        size += len(data)
    if pending:
        yield b"".join(pending)


class Pacer:
    """Turns of the streams of this process at the event loop: together they write
    about `per_turn` bytes per turn of the loop, the other streams waiting in line, so
    that a crowd of streams with a backlog (replays of a large log) leaves every turn
    time for the rest of the server (/healthz, polls) instead of a batch each."""

    def __init__(self, per_turn: int = BYTES_PER_TURN) -> None:
        self._per_turn = per_turn
        self._used = 0  # bytes let go in this turn of the loop
        self._line: deque[tuple[asyncio.Future[None], int]] = deque()
        self._reset_soon = False

    async def turn(self, cost: int) -> None:
        """Wait for the caller's turn to write its next batch, having just written `cost`
        bytes (its next batch will likely cost about as much). Always a yield."""
        self._schedule_reset()
        if self._used < self._per_turn and not self._line:
            self._used += cost
            await asyncio.sleep(0)
            return
        waiter = asyncio.get_running_loop().create_future()
        self._line.append((waiter, cost))
        await waiter  # a cancelled waiter is skipped when its turn comes

    def _schedule_reset(self) -> None:
        if not self._reset_soon:
            self._reset_soon = True
            asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._reset_soon = False
        self._used = 0
        while self._line and self._used < self._per_turn:
            waiter, cost = self._line.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._used += cost
        if self._line:
            self._schedule_reset()


class StreamSlots:
    """Open streams per tenant on this process, bounded; and their turns (`pacer`)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: Counter[str] = Counter()
        self.pacer = Pacer()

    def acquire(self, who: str) -> StreamSlot:
        """One of `who`'s slots, or the 429 `too_many_streams`. A create takes its slot
        before anything is stored, so that a refusal stores and runs nothing."""
        if self._open[who] >= self.limit:
            raise APIError(
                429,
                f"Too many open streams ({self.limit}) for this API key; close one or retry.",
                code="too_many_streams",
                headers={"retry-after": "1"},
            )
        self._open[who] += 1
        return StreamSlot(self, who)

    def _release(self, who: str) -> None:
        self._open[who] -= 1
        if self._open[who] <= 0:
            del self._open[who]


class StreamSlot:
    """A held slot; `release` gives it back once, however often it is called."""

    def __init__(self, slots: StreamSlots, who: str) -> None:
        self._slots: StreamSlots | None = slots
        self._who = who

    def release(self) -> None:
        if self._slots is not None:
            self._slots._release(self._who)
            self._slots = None


class _Client:
    """What a stream knows of its client: whether it has gone (`http.disconnect`)."""

    __slots__ = ("gone",)

    def __init__(self) -> None:
        self.gone = False


class _EventStream(EventSourceResponse):
    def __init__(
        self,
        content: AsyncIterator[bytes],
        client: _Client,
        keepalive: float,
        on_end: Callable[[], None],
    ):
        super().__init__(content, ping=keepalive, ping_message_factory=_keepalive, sep="\n")
        self._client = client
        self._on_end = on_end

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def watched() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                self._client.gone = True
            return message

        try:
            await super().__call__(scope, watched, send)
        finally:
            self._on_end()


async def _frames(
    batches: AsyncIterator[list[EventRow]],
    client: _Client,
    pacer: Pacer,
    on_close: Callable[[bool], None] | None,
) -> AsyncIterator[bytes]:
    finished = False
    written = 0
    try:
        while True:
            await pacer.turn(written)  # let the rest of the server run, a disconnect arrive
            if client.gone:
                return
            batch = await anext(batches, None)
            if batch is None:
                break
            written = 0
            for data in writes(batch):
                yield data  # resumed once it was written: the next batch waits for that
                written += len(data)
            if batch and batch[-1].type in TERMINAL_EVENTS:
                break  # all sent, whether the client stays for the end of the body or not
        finished = True
    finally:
        if on_close is not None:
            on_close(finished)


def _keepalive() -> ServerSentEvent:
    return ServerSentEvent(comment="keep-alive")


def stream_to(
    request: Request,
    batches: AsyncIterator[list[EventRow]],
    *,
    on_close: Callable[[bool], None] | None = None,
    slot: StreamSlot | None = None,
) -> EventSourceResponse:
    """Stream `batches` of events to the client. `on_close(finished)` runs when the
    stream ends, with False when the client went away before the last event. The stream
    holds `slot` (taken here when None: 429 if the caller's tenant has too many streams
    open) and releases it when it ends."""
    ctx = context(request)
    held = slot or ctx.streams.acquire(tenant(request))
    client = _Client()
    content = _frames(batches, client, ctx.streams.pacer, on_close)
    return _EventStream(content, client, ctx.settings.keepalive, held.release)
