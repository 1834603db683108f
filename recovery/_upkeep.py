"""The runtime's upkeep: its background chores (the recovery scan, the heartbeat, the
retention purge), each a `Chore` that outlives the store's failures (_chores.py), and
the drain that hands the turns over at shutdown.

The lease keeper, which renews the leases of the turns driven here, is not one of them:
it runs on a thread of its own (_leases.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from store import Store, StoreError

from ._chores import Chore
from ._runs import Runs
from ._settings import RuntimeSettings
from ._status import ResponseStatus

log = logging.getLogger("recovery.runtime")


class Upkeep:
    def __init__(self, store: Store, settings: RuntimeSettings, runs: Runs) -> None:
        self._store = store
        self._settings = settings
        self._runs = runs
        self.ready = asyncio.Event()  # set when the first recovery scan is done
        self._scan: Chore | None = None
        self._heartbeat: Chore | None = None
        # The steers left unsettled by a process that died (_steering.py; set by the runtime).
        self.settle_steers: Callable[[], Awaitable[None]] | None = None

    def chores(self) -> list[Chore]:
        """The scan, the purge and the heartbeat, each to be run `forever`."""
        settings = self._settings
        retry = settings.chore_retry_max
        beat = min(settings.heartbeat_interval, settings.lease_ttl / 4)
        self._scan = Chore("recovery scan", self._scan_once, settings.scan_interval, retry)
        self._heartbeat = Chore("heartbeat", self._heartbeat_once, beat, retry)
        purge = Chore("retention purge", self._purge_once, settings.purge_interval, retry)
        return [self._scan, purge, self._heartbeat]

    def on_signal(self, kind: str, key: str) -> None:
        """Another process wrote something this one acts on (a store shared by several
        hosts says so; nothing depends on it, as the chores also run on their own):
        `stop` (a cancel or steer for a turn perhaps driven here), `free` (a lease was
        released: the turn may be taken now), `lane` (a turn of lane `key` ended)."""
        if kind == "stop" and self._heartbeat is not None:
            self._heartbeat.wake()
        elif kind == "free" and self._scan is not None:
            self._scan.wake()
        elif kind == "lane":
            self._runs.lane_freed(key)

    # -- the recovery scan (G1) -----------------------------------------------------------

    async def _scan_once(self) -> None:
        """One round of the scan chore. A claim or recovery that the last round started
        and that failed for the store fails this round, so the chore backs off."""
        try:
            self._store.check_file()  # a vanished database is noticed even when idle
            failed = self._runs.take_start_failure()
            await self.scan()
            if failed is not None:
                raise failed
        finally:
            self.ready.set()

    async def scan(self) -> int:
        """Start every unfinished response nobody holds, and settle the steers of those
        that ended without it (_steering.py); return how many responses were found."""
        orphans = await self._store.orphans()
        for response_id, status in orphans:
            self._runs.adopt(response_id, queued=status == ResponseStatus.QUEUED)
        if self.settle_steers is not None:
            await self.settle_steers()
        return len(orphans)

    # -- the retention purge --------------------------------------------------------------

    async def _purge_once(self) -> None:
        await self.purge(time.time())

    async def purge(self, now: float) -> tuple[int, int]:
        """Apply the retention period as of `now` (never touching unfinished responses)."""
        responses, keys = await self._store.purge(now - self._settings.retention)
        if responses or keys:
            log.info("retention: purged %d responses and %d idempotency keys", responses, keys)
        return responses, keys

    # -- the heartbeat --------------------------------------------------------------------

    async def _heartbeat_once(self) -> None:
        """Bring in cancel and steer requests made elsewhere. (Leases are not renewed
        here but by the lease keeper's thread, which a blocked event loop cannot stop.)"""
        if self._runs.active:
            for response_id, kind in await self._store.stop_requests(self._runs.owner):
                self._runs.stop(response_id, kind)

    # -- the drain ------------------------------------------------------------------------

    async def drain(self) -> None:
        """Graceful shutdown (G8): running turns finish their step and checkpoint within
        the grace period, then every lease is released so another process resumes at
        once. After the grace period the turns still running are cut off (a model stream
        at once), but a tool body that has started is never abandoned: a cut turn first
        waits for its running bodies to end (an async body is bounded by its timeout; a
        thread cannot be stopped and is waited for until it returns) and records their
        outcomes. Leases are released only when every turn has ended, so no other
        process runs a call whose body may still act here (G3). Cancelling the drain
        itself (a server giving up on it) only ends the grace period early."""
        runners, pending = self._runs.begin_drain()
        interrupted: asyncio.CancelledError | None = None
        if pending:
            try:
                _, pending = await asyncio.wait(pending, timeout=self._settings.shutdown_grace)
            except asyncio.CancelledError as exc:
                interrupted = exc
            for task in pending:
                task.cancel()
            if pending:
                log.warning(
                    "%d turns did not reach a boundary in time; cutting them off, after "
                    "any tool body they are running",
                    len(pending),
                )
        while pending:
            try:
                _, pending = await asyncio.wait(pending)
            except asyncio.CancelledError as exc:
                interrupted = exc  # a body may still act: its lease is not given up yet
        # Only turns handed over (paused at a boundary, or cut after their bodies ended,
        # no body of theirs still running) are released, by their fences: a turn that
        # failed here, whose end could not be saved, or that a thread of its own may still
        # act for (_turn.py, Bodies), keeps its lease until it expires, so its recovery is
        # counted (G1) and nobody takes it while that thread runs (G3, G8).
        handed = [(r.response_id, r.turn.fence) for r in runners if r.handed_over]
        try:
            await asyncio.shield(self._store.release_leases(handed))
        except StoreError as exc:
            log.warning("could not release leases: %s", exc)
        if interrupted is not None:
            raise interrupted
