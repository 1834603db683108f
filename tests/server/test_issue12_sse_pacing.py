"""Issue 12, item 5, in process: how a stream is paced (server/_sse.py).

A stream pulls its next batch only once the previous one was written, in writes of at
most WRITE_BYTES; it stops pulling once its client has gone (Hypercorn drops the writes
of a gone client silently, so nothing else would stop it); and all streams together
write about `per_turn` bytes per turn of the event loop, so that a crowd of replays
leaves the rest of the server its turns. The end-to-end test against a real server is
tests/integration/test_issue12_slow_readers.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from server._sse import Pacer, _Client, _frames, frame, writes
from store import EventRow


def row(seq: int, size: int) -> EventRow:
    return EventRow(seq, "response.output_text.delta", "x" * size)


@pytest.mark.parametrize(
    "sizes",
    [
        pytest.param([100] * 2000, id="many-small"),
        pytest.param([300_000], id="one-larger-than-a-write"),
        pytest.param([10, 200_000, 10, 70_000, 5], id="mixed"),
    ],
)
def test_writes_are_bounded_and_carry_every_frame_in_order(sizes: list[int]) -> None:
    batch = [row(i, size) for i, size in enumerate(sizes)]
    out = list(writes(batch, limit=64 * 1024))
    assert all(0 < len(data) <= 64 * 1024 for data in out)
    assert b"".join(out) == b"".join(frame(r) for r in batch)


def test_a_burst_of_small_events_is_one_write() -> None:
    assert len(list(writes([row(i, 50) for i in range(20)]))) == 1


class Pages:
    """An endless log, one page per pull; counts the pulls."""

    def __init__(self) -> None:
        self.pulled = 0

    async def __aiter__(self) -> AsyncIterator[list[EventRow]]:
        while True:
            self.pulled += 1
            yield [row(self.pulled, 100_000)]


async def test_the_next_page_is_pulled_only_after_the_last_write_of_the_previous() -> None:
    pages, closed = Pages(), []
    per_page = len(list(writes([row(1, 100_000)])))
    assert per_page > 1
    frames = _frames(aiter(pages), _Client(), Pacer(), closed.append)
    for _ in range(per_page):
        await anext(frames)
        assert pages.pulled == 1
    await anext(frames)
    assert pages.pulled == 2
    await frames.aclose()
    assert closed == [False]


async def test_a_stream_whose_client_has_gone_reads_no_further() -> None:
    pages, client, closed = Pages(), _Client(), []
    frames = _frames(aiter(pages), client, Pacer(), closed.append)
    await anext(frames)
    client.gone = True  # what the `http.disconnect` sets
    with pytest.raises(StopAsyncIteration):
        while True:
            await anext(frames)
    assert pages.pulled == 1
    assert closed == [False]


async def test_a_stream_that_wrote_the_terminal_event_has_finished_if_its_client_goes() -> None:
    async def batches() -> AsyncIterator[list[EventRow]]:
        yield [EventRow(0, "response.completed", "{}")]
        raise AssertionError("pulled past the terminal event")

    client, closed = _Client(), []
    frames = _frames(batches(), client, Pacer(), closed.append)
    await anext(frames)
    client.gone = True  # the SDK closes its stream on response.completed
    with pytest.raises(StopAsyncIteration):
        await anext(frames)
    assert closed == [True]  # not a client gone early (a foreground turn is not stopped)


async def test_streams_write_about_per_turn_bytes_per_turn_of_the_loop() -> None:
    batch, per_turn, streams = 1000, 4, 100  # bytes a stream writes between turns
    pacer = Pacer(per_turn=per_turn * batch)
    written = 0

    async def stream() -> None:
        nonlocal written
        for _ in range(1000):
            await pacer.turn(batch)
            written += 1

    async def other_request(hops: int) -> int:
        """Something else the server does, over `hops` turns of the loop; how many
        batches the streams wrote meanwhile."""
        start = written
        for _ in range(hops):
            await asyncio.sleep(0)
        return written - start

    tasks = [asyncio.ensure_future(stream()) for _ in range(streams)]
    try:
        await asyncio.sleep(0)
        meanwhile = await other_request(hops=10)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert meanwhile <= (10 + 1) * per_turn  # unpaced: a batch per stream per turn, 1,000


async def test_every_waiting_stream_gets_its_turn_and_a_cancelled_one_is_skipped() -> None:
    pacer, turns = Pacer(per_turn=2000), []

    async def stream(name: int) -> None:
        await pacer.turn(1000)
        turns.append(name)

    tasks = [asyncio.ensure_future(stream(i)) for i in range(10)]
    await asyncio.sleep(0)
    tasks[5].cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert turns == [0, 1, 2, 3, 4, 6, 7, 8, 9]
