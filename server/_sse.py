"""Server-sent events: each stored event is framed once, as `event:` + one `data:` line.

Keep-alives are comment lines (`: keep-alive`), the only kind the openai SDK ignores
safely (docs/protocol.md section 7). Each open stream holds one of its tenant's stream slots
(`--max-streams-per-tenant`) until the response ends, however it ends.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from store import EventRow

from ._context import context, tenant
from ._errors import APIError


def frame(row: EventRow) -> bytes:
    return f"event: {row.type}\ndata: {row.data}\n\n".encode()


class StreamSlots:
    """Open streams per tenant on this process, bounded."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._open: Counter[str] = Counter()

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


class _EventStream(EventSourceResponse):
    def __init__(self, content: AsyncIterator[bytes], keepalive: float, on_end: Callable[[], None]):
        super().__init__(content, ping=keepalive, ping_message_factory=_keepalive, sep="\n")
        self._on_end = on_end

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_end()


async def _frames(
    batches: AsyncIterator[list[EventRow]], on_close: Callable[[bool], None] | None
) -> AsyncIterator[bytes]:
    finished = False
    try:
        async for batch in batches:
            yield b"".join(frame(row) for row in batch)  # one write per batch
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
    return _EventStream(_frames(batches, on_close), ctx.settings.keepalive, held.release)
