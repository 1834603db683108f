"""The runtime's background chores (recovery scan, heartbeat, retention purge), each a
loop that outlives the store's failures.

A store that cannot be read or written (a full disk, an I/O error, a vanished file) is a
condition to wait out, never a reason for the runtime to stop: a chore that meets a
StoreError logs it and tries again after a backoff that doubles up to `retry_max`, and
says so when it works again. Anything else a chore raises is a bug, and stops the
runtime (`Runtime.running` logs it; the server process then exits for its supervisor to
restart it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from store import StoreError

log = logging.getLogger("recovery.runtime")


def backoff(failures: int, first: float, most: float) -> float:
    """The pause after `failures` failures in a row: `first`, doubling up to `most`,
    less up to a fifth at random so that processes sharing a store do not retry in step."""
    delay = min(most, first * 2.0 ** min(failures - 1, 32))
    return delay * random.uniform(0.8, 1.0)


@dataclass(slots=True)
class Chore:
    name: str  # for the log: "recovery scan"
    run: Callable[[], Awaitable[None]]
    interval: float  # seconds between runs that succeed
    retry_max: float  # the longest pause after failures
    failures: int = 0  # in a row, until one succeeds
    _woken: asyncio.Event = field(default_factory=asyncio.Event)

    def wake(self) -> None:
        """Run again now rather than after the pause (another process said there is
        work); a wake during a run makes the next run start at once."""
        self._woken.set()

    async def forever(self) -> None:
        while True:
            self._woken.clear()
            pause = await self.once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), pause)

    async def once(self) -> float:
        """Run once; return the pause before the next run."""
        try:
            await self.run()
        except StoreError as exc:
            self.failures += 1
            delay = backoff(self.failures, min(self.interval, 1.0), self.retry_max)
            log.warning(
                "%s failed (%s; %d in a row); trying again in %.1fs",
                self.name,
                exc,
                self.failures,
                delay,
            )
            return delay
        if self.failures:
            log.info("%s works again, after %d failures", self.name, self.failures)
            self.failures = 0
        return self.interval
