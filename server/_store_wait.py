"""A server whose PostgreSQL cannot be reached at start-up serves anyway, and retries.

`create_app`'s lifespan opens the store once. If the database server cannot be reached
(`StoreUnreachableError`: refused, a timeout, a name that does not resolve, a server
starting up or out of connections), it hands the store's whole lifetime to a `StoreWait`
and lets the app start: /healthz answers 200 (a restart would not help), /readyz 503
`store_unavailable` with the last error, every other route 503 with `Retry-After`
(server/_context.py). One task retries opening the store with capped exponential
backoff, one warning per failed attempt; once it opens, the same task runs the runtime on
it, exactly as the lifespan does when the store opens at once (the runtime's task group
must be entered and left by one task), until the app shuts down.

A permanent error met on a later attempt (a wrong password, a missing database, a schema
newer than the code) ends the wait for good: the server stops and exits 2, as it does
when the first attempt meets it. A stop while waiting cancels the wait at once.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from recovery import StoreOpenError, StoreUnreachableError

log = logging.getLogger("server")

FIRST_DELAY = 0.5  # seconds before the second attempt, doubling up to MAX_DELAY
MAX_DELAY = 5.0

# Opens the store and runs the runtime on it for the block; calls its argument once the
# store is open (what fails after that is not an open error).
Serving = Callable[[Callable[[], None]], AbstractAsyncContextManager[None]]


class StoreWait:
    """The store and runtime of an app whose store was unreachable at start-up: one task
    retries `serving` until the store opens, then runs it until `stop`."""

    def __init__(self, serving: Serving, first: StoreUnreachableError) -> None:
        self.reason = str(first)  # the last attempt's error, for /readyz
        self.failure: StoreOpenError | None = None  # a permanent error: the server stops
        self.delay = FIRST_DELAY  # until the next attempt
        self._serving = serving
        self._opened = False
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._ended = asyncio.Event()

    @property
    def opened(self) -> bool:
        """Whether the store has opened (the runtime then starts, or has started)."""
        return self._opened

    @property
    def retry_after(self) -> int:
        """Whole seconds a client should wait before sending its request again."""
        return max(1, math.ceil(self.delay))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="store-wait")

    async def wait_ended(self) -> None:
        """Return once the wait has ended for good (a permanent error), or the runtime it
        started has stopped (for good, or at shutdown)."""
        await self._ended.wait()

    def halt(self) -> None:
        """A shutdown began: retry no more. The lifespan's `stop` comes only after the
        server's graceful wait for requests, and a runtime started meanwhile would recover
        turns only to hand them back. A store already open is left to `stop`, so that its
        runtime drains after that wait, as it does when the store opened at once."""
        if not self._opened and self._task is not None:
            self._stop.set()
            self._task.cancel()

    async def stop(self) -> None:
        """Stop: cancel the wait at once if the store is not open yet, else let the
        runtime shut down as the lifespan's would. What stopped the runtime for good is
        raised again here, as it leaves the lifespan when the store opened at once."""
        if self._task is None:
            return
        self._stop.set()
        if not self._opened:
            self._task.cancel()
        try:
            await self._task  # a cancel of this task reaches it too, as in the lifespan
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # this task was cancelled, not (only) the wait

    async def _run(self) -> None:
        try:
            while not await self._attempt():
                self.delay = min(self.delay * 2, MAX_DELAY)
        finally:
            self._ended.set()

    async def _attempt(self) -> bool:
        """Wait, then try to open the store and serve it; False if it is still unreachable."""
        log.warning("%s; retrying in %g s; /readyz answers 503 until then", self.reason, self.delay)
        await asyncio.sleep(self.delay)
        try:
            async with self._serving(self._open):
                await self._stop.wait()
        except StoreUnreachableError as exc:
            if self._opened:
                raise
            self.reason = str(exc)
            return False
        except StoreOpenError as exc:
            if self._opened:
                raise
            self.failure = exc
            self.reason = str(exc)
            log.error("%s; this does not pass by itself: the server stops", exc)
        return True

    def _open(self) -> None:
        self._opened = True
        log.info("the store is reachable now; starting the runtime")
