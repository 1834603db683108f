"""Lease renewal on a thread of its own, and a watch on the event loop.

Deliberate divergence: everything else in the runtime runs on the event loop; this does
not. Leases are how other processes on the store tell a live driver from a dead one
(G8). Renewed by a task on the event loop, they stopped whenever something blocked the
loop (a tool calling `time.sleep` or a blocking client library), and another process
took over a turn this one was still running.

`LeaseKeeper` renews them from a thread instead. A runner holds its lease here, (response
id, fence), while it runs, and drops it when it ends; every `ttl / 3` the thread hands
the store what is held, and the store's writer thread commits and answers the renewal
without the event loop. So a live process keeps its turns however long its loop is
blocked, and only what is driven is renewed: the lease of a runner that ended without
an end expires, and a recovery scan takes the turn and counts it (G1). The fence is still
checked on every write, so a runner that did lose its lease writes nothing.

A renewal that fails (a full disk) is tried again after a backoff that doubles from one
tick up to `ttl / 3`, each failure logged, and the first success after failures too.

The same thread watches the loop: each tick it schedules a callback on the loop
(`call_soon_threadsafe`) and measures how long the loop takes to run it. A callback still
waiting after `blocked_after` seconds means the loop is blocked; the log says so while it
lasts (with the function the loop is stuck in) and again, with the duration, when it
ends.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import sys
import threading
import time
import traceback
from dataclasses import dataclass

from store import Fence, Store

from ._chores import backoff

log = logging.getLogger("recovery.leases")


@dataclass(slots=True)
class _Probe:
    """One callback scheduled on the loop: when it was sent and when the loop ran it."""

    sent: float
    answered: float | None = None
    warned: bool = False

    def answer(self) -> None:  # on the event loop
        self.answered = time.monotonic()


class LeaseKeeper:
    def __init__(self, store: Store, lease_ttl: float, *, blocked_after: float) -> None:
        self._store = store
        self._ttl = lease_ttl
        self._renew_every = lease_ttl / 3
        self._tick = min(0.25, lease_ttl / 8)
        self._blocked_after = blocked_after
        self._held: dict[str, Fence] = {}
        self._lock = threading.Lock()  # `_held`: runners on the loop, renewals here
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        # Only the keeper's thread touches what follows.
        self._renewal: concurrent.futures.Future[list[str]] | None = None
        self._renewal_sent = 0.0
        self._renewed_at = float("-inf")
        self._failures = 0  # renewals failed in a row
        self._retry_at = float("-inf")
        self._probe: _Probe | None = None

    def hold(self, response_id: str, fence: Fence) -> None:
        """A runner drives `response_id` under `fence`: keep its lease."""
        with self._lock:
            self._held[response_id] = fence

    def drop(self, response_id: str, fence: Fence) -> None:
        """That runner ended: its lease is renewed no more (a later holder's is kept)."""
        with self._lock:
            if self._held.get(response_id) == fence:
                del self._held[response_id]

    def held(self) -> list[tuple[str, Fence]]:
        with self._lock:
            return list(self._held.items())

    def start(self) -> None:
        """Start the thread; call from the event loop it is to watch."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._thread = threading.Thread(target=self._main, name="lease-keeper", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)

    # -- on the keeper's thread -----------------------------------------------------------

    def _main(self) -> None:
        while not self._stopping.wait(self._tick):
            try:
                self._renew_when_due()
                self._watch_loop()
            except Exception:  # the thread must outlive any one failure
                log.exception("lease keeper: unexpected failure")

    def _renew_when_due(self) -> None:
        """One renewal at a time; a failed one is tried again after a backoff."""
        pending = self._renewal
        if pending is not None:
            if not pending.done():
                return
            self._renewal = None
            self._settle(pending.exception())
        now = time.monotonic()
        if now < self._retry_at or now - self._renewed_at < self._renew_every:
            return
        held = self.held()
        if held:
            self._renewal_sent = time.monotonic()
            self._renewal = self._store.renew_leases(held, self._ttl)

    def _settle(self, failure: BaseException | None) -> None:
        if failure is None:
            self._renewed_at = self._renewal_sent
            if self._failures:
                log.info("lease renewal works again, after %d failures", self._failures)
            self._failures = 0
            return
        self._failures += 1
        delay = backoff(self._failures, self._tick, self._renew_every)
        self._retry_at = time.monotonic() + delay
        log.warning(
            "lease renewal failed (%s; %d in a row); trying again in %.1fs",
            failure,
            self._failures,
            delay,
        )

    def _watch_loop(self) -> None:
        probe, now = self._probe, time.monotonic()
        if probe is not None and probe.answered is None:
            waited = now - probe.sent
            if waited >= self._blocked_after and not probe.warned:
                probe.warned = True
                log.warning(
                    "the event loop has been blocked for %.1fs, in %s: blocking code runs on "
                    "it (make it async, or a plain function, which runs in a thread); this "
                    "process still renews its leases, so its turns are not taken over",
                    waited,
                    self._loop_position(),
                )
            return
        if probe is not None:
            assert probe.answered is not None
            waited = probe.answered - probe.sent
            if probe.warned or waited >= self._blocked_after:
                log.warning(
                    "the event loop was blocked for %.1fs (a callback scheduled on it waited "
                    "that long to run)",
                    waited,
                )
        self._probe = _Probe(sent=now)
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to watch
            self._loop.call_soon_threadsafe(self._probe.answer)

    def _loop_position(self) -> str:
        """Where the loop's thread is now: its innermost Python frame."""
        frame = sys._current_frames().get(self._loop_thread)
        if frame is None:
            return "an unknown place"
        where = traceback.extract_stack(frame, limit=1)[-1]
        return f"{where.name} ({where.filename}:{where.lineno})"
