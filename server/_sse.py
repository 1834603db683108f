"""Server-sent events: each stored event is framed once, as `event:` + one `data:` line.

Keep-alives are comment lines (`: keep-alive`), the only kind the openai SDK ignores
safely (protocol.md section 7).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from sse_starlette import EventSourceResponse, ServerSentEvent

from store import EventRow


def frame(row: EventRow) -> bytes:
    return f"event: {row.type}\ndata: {row.data}\n\n".encode()


async def _frames(
    rows: AsyncIterator[EventRow], on_close: Callable[[bool], None] | None
) -> AsyncIterator[bytes]:
    finished = False
    try:
        async for row in rows:
            yield frame(row)
        finished = True
    finally:
        if on_close is not None:
            on_close(finished)


def _keepalive() -> ServerSentEvent:
    return ServerSentEvent(comment="keep-alive")


def event_stream(
    rows: AsyncIterator[EventRow],
    *,
    keepalive: float,
    on_close: Callable[[bool], None] | None = None,
) -> EventSourceResponse:
    """Stream `rows` to the client. `on_close(finished)` runs when the stream ends, with
    False when the client went away before the last event."""
    return EventSourceResponse(
        _frames(rows, on_close),
        ping=keepalive,
        ping_message_factory=_keepalive,
        sep="\n",
    )
