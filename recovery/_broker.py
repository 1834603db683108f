"""Hands the events committed in this process to its live streams.

Correctness never depends on it (docs/guarantees.md, Where state lives): a stream that
misses a hand-over, or follows a response driven by another process, still finds the
events by polling the log every `poll_interval` seconds. What it hands over was
committed already (it runs after the commit), so a stream may send it at once (G7).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence

from store import EventRow


class Broker:
    def __init__(self, remember: int = 4096) -> None:
        self._latest: OrderedDict[str, int] = OrderedDict()
        self._waiters: dict[str, list[asyncio.Future[Sequence[EventRow]]]] = {}
        self._remember = remember

    def notify(self, response_id: str, rows: Sequence[EventRow]) -> None:
        self._latest[response_id] = rows[-1].seq
        self._latest.move_to_end(response_id)
        while len(self._latest) > self._remember:
            self._latest.popitem(last=False)
        for fut in self._waiters.pop(response_id, ()):
            if not fut.done():
                fut.set_result(rows)

    async def wait(self, response_id: str, after: int, seconds: float) -> Sequence[EventRow] | None:
        """Wait for events after `after` to be committed here: the rows of the commit
        that woke us (empty if they were committed before the call: read the log), or
        None after `seconds` (another process may still have written some)."""
        if self._latest.get(response_id, -1) > after:
            return ()
        fut: asyncio.Future[Sequence[EventRow]] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(response_id, [])
        waiters.append(fut)
        try:
            return await asyncio.wait_for(fut, seconds)
        except TimeoutError:
            return None
        finally:
            if fut in waiters:
                waiters.remove(fut)
            if not waiters and self._waiters.get(response_id) is waiters:
                del self._waiters[response_id]
