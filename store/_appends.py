"""Appends of one event sink that join each other while they wait for the database.

A runner's sink emits events faster than a disk commits them. With `join`, the events of
an emit join the append of the same response that is queued and has not started yet, and
share its outcome, so a fast stream costs one write per commit, not one per emit. A
backend may also let a checkpoint queued behind such an append carry its rows (`carry`). Both
backends use this; the lock is here because SQLite's writer thread takes the rows while
the event loop may be adding to them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ._records import EventRow, Fence


@dataclass(slots=True)
class QueuedAppend:
    fence: Fence
    rows: list[EventRow]
    future: asyncio.Future[None] = field(init=False)
    carried: bool = False  # its rows go with a later write of the response (`carry`)


class JoinableAppends:
    def __init__(self) -> None:
        self._open: dict[str, QueuedAppend] = {}  # response id -> append open to join
        self._lock = threading.Lock()

    def append(
        self,
        response_id: str,
        fence: Fence,
        events: Sequence[EventRow],
        join: bool,
        submit: Callable[[QueuedAppend], asyncio.Future[None]],
    ) -> asyncio.Future[None]:
        """Join the open append of `response_id` (with `join`, and the same fence), or
        queue a new one with `submit`, whose operation must call `take` when it runs."""
        with self._lock:
            queued = self._open.get(response_id) if join else None
            if queued is not None and queued.fence == fence:
                queued.rows.extend(events)
                return queued.future
            append = QueuedAppend(fence, list(events))
            if join:
                self._open[response_id] = append
        append.future = submit(append)
        return append.future

    def take(self, response_id: str, append: QueuedAppend) -> list[EventRow]:
        """As the append's operation runs: its rows, closed to joining from now on; none
        if a later write carries them."""
        with self._lock:
            if self._open.get(response_id) is append:
                del self._open[response_id]
            return [] if append.carried else append.rows

    def carry(self, response_id: str, fence: Fence) -> QueuedAppend | None:
        """The open append of `response_id` under `fence`, if one has not started, closed to
        joining and marked carried: a write queued behind it takes its rows into its own
        statement, and must settle its future (the append's own operation writes nothing)."""
        with self._lock:
            queued = self._open.get(response_id)
            if queued is None or queued.fence != fence:
                return None
            del self._open[response_id]
            queued.carried = True
            return queued
