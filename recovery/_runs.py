"""The turns this process drives: claiming them, driving them under a held lease, their
lanes, and handing them over at shutdown.

One runner per turn driven here, each a task of the runtime's task group. A turn is
started by its create (claimed in the create transaction, `run_claimed`), by the turn
ahead of it in its lane ending here (`start_next`), by a recovery scan (`adopt`), or, for
a foreground turn, by the request that created it (`start_foreground`). The maps below
only make things faster (a local stop reaches its runner at once); who drives what is
decided in the store, by guarded claims (G8, G10). The drain that hands turns over at
shutdown is in _upkeep.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from store import Fence, ResponseRecord, Store, StoreError

from ._agent import Agent
from ._leases import LeaseKeeper
from ._observer import Observer
from ._roster import Roster
from ._runner import TurnRunner
from ._settings import RuntimeSettings
from ._sinks import DurableSink, MemorySink
from ._turn import Stop, Turn

log = logging.getLogger("recovery.runtime")

# What a stored turn whose agent is not served any more is run with: it only ends failed.
_NOT_SERVED = Agent()
_NOT_SERVED_MESSAGE = (
    "The agent this response's model named is not served by this server any more (it was"
    " restarted with other agents); the response was not run again."
)

Guard = Callable[[Coroutine[Any, Any, None]], Coroutine[Any, Any, None]]


class Runs:
    def __init__(
        self,
        *,
        store: Store,
        roster: Roster,
        settings: RuntimeSettings,
        observer: Observer,
        owner: str,
        leases: LeaseKeeper,
        guard: Guard,
    ) -> None:
        self._store = store
        self._roster = roster  # picks each turn's agent from its stored request
        self._settings = settings
        self._observer = observer
        self.owner = owner
        self._leases = leases  # renews the leases of the turns `_drive` runs (G8)
        self._guard = guard  # wraps each task: what escapes it stops the runtime
        self.tg: asyncio.TaskGroup | None = None  # set while the runtime runs
        self.draining = False  # shutting down: no new work is taken
        self._runners: dict[str, TurnRunner] = {}
        self._starting: set[str] = set()  # claimed or recovered by a scan, not yet running
        self._tasks: set[asyncio.Task[None]] = set()
        self._start_failure: StoreError | None = None  # a claim or recovery that failed
        self._lane_freed: dict[str, asyncio.Event] = {}  # wakes foreground turns waiting
        self._unserved: set[str] = set()  # turns whose agent this process does not serve
        # Settles a steered turn's steers once it has ended (_steering.py; the runtime sets it).
        self.on_steered_end: Callable[[str, str], Coroutine[Any, Any, None]] | None = None

    # -- what is driven here ----------------------------------------------------------------

    def runner(self, response_id: str) -> TurnRunner | None:
        """The runner driving `response_id` in this process, if any."""
        return self._runners.get(response_id)

    @property
    def active(self) -> int:
        return len(self._runners)

    def stop(self, response_id: str, reason: str = "cancelled") -> None:
        """Ask the turn driven here to stop at its next safe point (if it is driven here)."""
        runner = self._runners.get(response_id)
        if runner is not None:
            runner.request_stop(reason)

    def steer(self, lane: str, reason: str) -> None:
        """Stop the running turn of `lane` (not those waiting) for a steer."""
        for runner in list(self._runners.values()):
            if runner.lane == lane and runner.started:
                runner.request_stop(reason)

    def take_start_failure(self) -> StoreError | None:
        """The store failure of a claim or recovery since the last call, if one failed."""
        failed, self._start_failure = self._start_failure, None
        return failed

    # -- starting turns -------------------------------------------------------------------

    def adopt(self, response_id: str, *, queued: bool) -> None:
        """Start an unfinished response nobody holds, found by a recovery scan: claim a
        queued one, recover a running one. One driven here, or about to be, is skipped."""
        if self.tg is None or self.draining:
            return  # shutting down: another process will pick the work up
        if response_id in self._runners or response_id in self._starting:
            return
        self._starting.add(response_id)
        start = self.claim_and_run(response_id) if queued else self._recover(response_id)
        self.spawn(self._starting_done(response_id, start))

    async def _starting_done(self, response_id: str, start: Coroutine[Any, Any, None]) -> None:
        try:
            await start
        finally:
            self._starting.discard(response_id)

    def _start_failed(self, response_id: str, exc: StoreError) -> None:
        """A turn could not be claimed or recovered for the store: the next scan finds it
        again, and the scan chore reports the failure and backs off."""
        log.debug("response %s: not started (%s); the recovery scan retries", response_id, exc)
        self._start_failure = exc

    async def run_claimed(self, claimed: ResponseRecord) -> None:
        """Run a turn its create transaction claimed; or, when shutdown began while that
        transaction committed, hand the turn over at once: the drain may have released
        this process's leases already, and this one would hold the turn unrun until it
        expired."""
        fence = Fence(self.owner, claimed.epoch)
        if self.tg is None or self.draining:
            try:
                await self._store.release_lease(claimed.id, fence)
            except StoreError as exc:
                log.warning("response %s: not handed over (%s); its lease expires", claimed.id, exc)
            return
        sink = DurableSink(self._store, claimed.id, fence)
        self.spawn(self._drive(self._runner(claimed, sink, fence, fresh=True)))

    async def claim_and_run(self, response_id: str) -> None:
        if self.draining:
            return  # shutting down: the turn stays queued for another process
        try:
            record = await self._store.claim(response_id, self.owner, self._settings.lease_ttl)
        except StoreError as exc:
            return self._start_failed(response_id, exc)
        if record is None:
            return  # cancelled while queued, or taken by another process
        fence = Fence(self.owner, record.epoch)
        await self._drive(self._runner(record, DurableSink(self._store, record.id, fence), fence))

    def _steered(self, record: ResponseRecord) -> bool:
        """Whether a `response.steer` of this response was accepted, within the recovery
        budget (a foreground turn that keeps crashing is failed all the same)."""
        # An interrupt after the steer overwrites `steer`; it ends the turn steered too.
        steered = record.steer in ("steer", "interrupt")
        return steered and record.recoveries <= self._settings.max_recoveries

    async def _recover(self, response_id: str) -> None:
        if self.draining:
            return  # shutting down: takes no new work (G8)
        try:
            record = await self._store.recover(response_id, self.owner, self._settings.lease_ttl)
        except StoreError as exc:
            return self._start_failed(response_id, exc)
        if record is None:
            return
        self._observer.recovery_started()
        fence = Fence(self.owner, record.epoch)
        if not record.background and self._steered(record):
            # Nobody waits for it any more, but an accepted steer's input is the server's
            # to apply (G12): it resumes only to end at its first safe point, steered,
            # after the turns ahead of it in its lane.
            runner = self._runner(record, MemorySink(keep=False), fence)
            runner.request_stop("steer")
            await self._drive(runner, wait_for_lane=record.lane)
            return
        if not record.background:
            # Nobody waits for a foreground response any more: it is not run again.
            runner = self._runner(record, MemorySink(keep=False), fence)
            failure = "The server restarted before this response finished."
            await self._drive(runner, fail=("server_error", failure))
            return
        runner = self._runner(record, DurableSink(self._store, record.id, fence), fence)
        if record.recoveries > self._settings.max_recoveries:
            failure = (
                f"The response was recovered {record.recoveries - 1} times and the server "
                "stopped each time; it will not be run again."
            )
            await self._drive(runner, fail=("recovery_exhausted", failure))
            return
        log.info("recovering response %s (recovery %d)", record.id, record.recoveries)
        await self._drive(runner)

    def start_foreground(
        self, record: ResponseRecord, *, stream: bool
    ) -> tuple[TurnRunner, MemorySink]:
        """Run a foreground turn; its events go to the returned sink (kept only if `stream`)."""
        sink = MemorySink(keep=stream)
        # Fresh: its request just created it, so no step of it was recorded; a process
        # that took it over meanwhile fences this runner off at its first write, before
        # any tool runs.
        runner = self._runner(record, sink, Fence(self.owner, record.epoch), fresh=True)
        self.spawn(self._drive(runner, wait_for_lane=record.lane))
        return runner, sink

    def _runner(
        self,
        record: ResponseRecord,
        sink: DurableSink | MemorySink,
        fence: Fence,
        *,
        fresh: bool = False,
    ) -> TurnRunner:
        turn = Turn(record.id, fence, self._store, self._settings, self._observer, Stop())
        agent = self._roster.for_record(record)
        runner = TurnRunner(
            turn=turn,
            agent=agent or _NOT_SERVED,
            model=self._roster.model_of(agent or _NOT_SERVED),
            record=record,
            sink=sink,
            fresh=fresh,
        )
        if agent is None:  # its agent is not served here any more (_roster.py)
            self._unserved.add(record.id)
        if self.draining:  # claimed while shutting down: stop at the first boundary
            runner.request_drain()
        self._runners[record.id] = runner
        return runner

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        if self.tg is None or self.draining:
            coro.close()  # shutting down: another process will pick the work up
            return
        task = self.tg.create_task(self._guard(coro))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- driving a turn -------------------------------------------------------------------

    async def _drive(
        self,
        runner: TurnRunner,
        *,
        fail: tuple[str, str] | None = None,
        wait_for_lane: str | None = None,
    ) -> None:
        lane, fence = runner.lane, runner.turn.fence
        # Only a turn being driven keeps its lease: once this ends, however it ends, the
        # lease is renewed no more, so a turn left without an end is recovered (G1).
        self._leases.hold(runner.response_id, fence)
        if runner.response_id in self._unserved:
            fail = fail or ("server_error", _NOT_SERVED_MESSAGE)
        try:
            if wait_for_lane is not None:
                await self._wait_for_lane(runner)
            await runner.run(fail=fail)
        except StoreError as exc:  # what the runner could not save is left to recovery
            log.warning(
                "response %s: stopped by a store failure (%s); recovered once its lease expires",
                runner.response_id,
                exc,
            )
        finally:
            self._leases.drop(runner.response_id, fence)
            self._unserved.discard(runner.response_id)
            self._runners.pop(runner.response_id, None)
            self._free_lane(lane)
            if runner.steered and self.on_steered_end is not None and self.tg is not None:
                self.spawn(self.on_steered_end(runner.response_id, runner.tenant))

    async def _wait_for_lane(self, runner: TurnRunner) -> None:
        """Hold a foreground turn until every earlier turn of its lane has ended (G10)."""
        if runner.lane == runner.response_id:
            return  # a lane of its own: no turn can be ahead of it
        # A steered turn still waits: it ends at its first safe point once it starts, its
        # input after that of the turns ahead of it.
        while (runner.steered or not runner.stopping) and not await self._is_lane_head(
            runner.response_id
        ):
            freed = self._lane_freed.setdefault(runner.lane, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(freed.wait(), self._settings.poll_interval * 4)

    async def _is_lane_head(self, response_id: str) -> bool:
        try:
            return await self._store.is_lane_head(response_id)
        except StoreError as exc:  # not known: ask again at the next poll
            self._start_failed(response_id, exc)
            return False

    def lane_freed(self, lane: str) -> None:
        """A turn of `lane` ended in another process: the next may start here."""
        if not self.draining:
            self._free_lane(lane)

    def _free_lane(self, lane: str) -> None:
        """A turn of `lane` ended here: wake the turns waiting for it."""
        freed = self._lane_freed.pop(lane, None)
        if freed is not None:
            freed.set()
        if self.tg is not None:
            self.spawn(self._start_next(lane))

    async def _start_next(self, lane: str) -> None:
        try:
            next_id = await self._store.next_in_lane(lane)
        except StoreError as exc:  # the scan starts it instead
            return self._start_failed(lane, exc)
        if next_id is not None and next_id not in self._runners:
            await self.claim_and_run(next_id)

    # -- shutdown ---------------------------------------------------------------------------

    def begin_drain(self) -> tuple[list[TurnRunner], set[asyncio.Task[None]]]:
        """Take no new work, and ask every running turn to pause at its next step
        boundary; return those runners and the tasks to wait for (_upkeep.py, `drain`)."""
        self.draining = True
        runners = list(self._runners.values())
        for runner in runners:
            runner.request_drain()
        return runners, set(self._tasks)
