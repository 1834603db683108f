"""Wakes live streams in this process when their events commit.

Correctness never depends on it (durability.md, Where state lives): a stream that
misses a wake-up, or follows a response driven by another process, still finds the
events by polling the log every `poll_interval` seconds.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict


class Broker:
    def __init__(self, remember: int = 4096) -> None:
        self._latest: OrderedDict[str, int] = OrderedDict()
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._remember = remember

    def notify(self, response_id: str, seq: int) -> None:
        self._latest[response_id] = seq
        self._latest.move_to_end(response_id)
        while len(self._latest) > self._remember:
            self._latest.popitem(last=False)
        for fut in self._waiters.pop(response_id, ()):
            if not fut.done():
                fut.set_result(None)

    async def wait(self, response_id: str, after: int, seconds: float) -> bool:
        """Return True when an event after `after` was committed here, or False after
        `seconds` (an event may still have been written by another process)."""
        if self._latest.get(response_id, -1) > after:
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(response_id, [])
        waiters.append(fut)
        try:
            await asyncio.wait_for(fut, seconds)
            return True
        except TimeoutError:
            return False
        finally:
            if fut in waiters:
                waiters.remove(fut)
            if not waiters and self._waiters.get(response_id) is waiters:
                del self._waiters[response_id]
