"""A socket's lanes (docs/protocol.md section 13): the work of one `stream_id`, one job at a
time, in the order the client sent it; different stream_ids run side by side (a create
without a `stream_id` is on the lane of none).

A job is a `response.create` or a `response.follow`. It holds one of the tenant's stream
slots (`--max-streams-per-tenant`, shared with SSE streams) while it streams, and it ends
only when the responses it streams have ended: its response, then, if that response was
steered on this socket, the outcomes of those steers (`_websocket_steer.py`) and the
successor responses they created, each followed from its log's start.

`Targets` remembers which responses this socket streams, and on which lane, so that a
steer of one of them is tied to its stream and its events carry the lane's `stream_id`
and the last sequence number sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from recovery import TERMINAL_EVENTS, EventRow

from ._errors import APIError
from ._sse import Pacer, StreamSlot
from ._websocket_events import Outbox

log = logging.getLogger("server")

Job = Callable[[], Awaitable[None]]

MAX_WAITING = 64  # jobs a socket's lanes may hold that have not started
REMEMBERED = 1024  # finished responses a socket remembers, for steers that come late


@dataclass(eq=False)
class Target:
    """A response this socket streams or streamed, on the lane `stream_id`."""

    id: str
    stream_id: str | None
    last_seq: int = 0  # of the last event of it sent on this socket (0: none yet)
    steer_ids: list[str] = field(default_factory=list)  # steers accepted here while it ran
    all_steers: bool = False  # a `response.follow`: every steer of it, wherever accepted


class Targets:
    """The responses streaming on this socket, and the last ones that finished."""

    def __init__(self) -> None:
        self._open: dict[str, Target] = {}
        self._finished: OrderedDict[str, Target] = OrderedDict()
        self.followed: set[str] = set()  # successors already followed here

    def start(self, target: Target) -> None:
        self._open[target.id] = target

    def end(self, target: Target) -> None:
        if self._open.get(target.id) is target:
            del self._open[target.id]
        self._finished[target.id] = target
        self._finished.move_to_end(target.id)
        while len(self._finished) > REMEMBERED:
            self._finished.popitem(last=False)

    def streaming(self, response_id: str) -> Target | None:
        return self._open.get(response_id)

    def known(self, response_id: str) -> Target | None:
        return self._open.get(response_id) or self._finished.get(response_id)


# What a lane does once a target's stream has ended: the successors to follow next.
AfterEnd = Callable[[Target], Awaitable[list[str]]]
# The events of a successor, from its log's start.
Follow = Callable[[str], AsyncIterator[list[EventRow]]]


class Lanes:
    def __init__(
        self,
        tg: asyncio.TaskGroup,
        out: Outbox,
        pacer: Pacer,
        targets: Targets,
        after_end: AfterEnd,
        follow: Follow,
    ) -> None:
        self._tg = tg
        self._out = out
        self._pacer = pacer
        self._targets = targets
        self._after_end = after_end
        self._follow = follow
        self._queues: dict[str | None, deque[Job]] = {}
        self._waiting = 0

    @property
    def busy(self) -> bool:
        return bool(self._queues)

    def submit(self, stream_id: str | None, job: Job) -> None:
        """Queue `job` on its lane; a 429 if too many wait on this socket already."""
        if self._waiting >= MAX_WAITING:
            raise APIError(
                429,
                f"Too many requests ({MAX_WAITING}) wait on this socket's lanes; wait for"
                " their responses to end, or use another stream_id.",
                code="queue_full",
                headers={"retry-after": "1"},
            )
        self._waiting += 1
        queue = self._queues.get(stream_id)
        if queue is not None:
            queue.append(job)
            return
        self._queues[stream_id] = deque([job])
        self._tg.create_task(self._run(stream_id))

    async def _run(self, stream_id: str | None) -> None:
        queue = self._queues[stream_id]
        try:
            while queue:
                job = queue.popleft()
                self._waiting -= 1
                try:
                    await job()
                except Exception as exc:  # a bug: this job fails, the socket goes on
                    await self._out.error(exc, stream_id)
        finally:
            del self._queues[stream_id]

    async def stream(
        self,
        target: Target,
        rows: AsyncIterator[list[EventRow]],
        slot: StreamSlot,
        on_close: Callable[[bool], None] | None = None,
    ) -> None:
        """Stream `target`'s events, then its steers' outcomes and the successors they
        created, each in turn, holding `slot` throughout."""
        try:
            chain: list[tuple[Target, AsyncIterator[list[EventRow]]]] = [(target, rows)]
            while chain:
                target, rows = chain.pop(0)
                self._targets.start(target)
                try:
                    await self._stream_one(target, rows, on_close)
                finally:
                    self._targets.end(target)  # a steer from now on is one that came late
                on_close = None
                for successor in await self._after_end(target):
                    if successor not in self._targets.followed:
                        self._targets.followed.add(successor)
                        chain.append((Target(successor, target.stream_id), self._follow(successor)))
        finally:
            slot.release()

    async def _stream_one(
        self,
        target: Target,
        rows: AsyncIterator[list[EventRow]],
        on_close: Callable[[bool], None] | None,
    ) -> None:
        finished = False
        written = 0
        try:
            while True:
                await self._pacer.turn(written)  # let the rest of the server run
                batch = await anext(rows, None)
                if batch is None:
                    break  # a followed log ends once its response has ended
                if not batch:
                    continue
                # Set before the send: a steer event built from now on waits for the send
                # lock behind this batch, so its sequence number is of the last event
                # before it (one built earlier took the lock first, before the batch).
                target.last_seq = batch[-1].seq
                written = await self._out.rows(batch, target.stream_id)
                if batch[-1].type in TERMINAL_EVENTS:
                    break
            finished = True
        finally:
            if on_close is not None:
                on_close(finished)
            close = getattr(rows, "aclose", None)
            if close is not None:
                await close()
