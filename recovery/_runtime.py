"""The runtime: the one object the server holds. It accepts turns, runs them, follows
their events and cancels them, by composing one part per question:

    _admission.py   how is a request admitted?             create
    _runs.py        how are turns claimed and driven?      start_foreground, stop_local
    _following.py   how do clients read and follow?        get, snapshot, follow, wait_final
    _control.py     how are responses cancelled, deleted?  cancel, delete
    _steering.py    how is a running response steered?     steer, steer_outcomes
    _compacting.py  how is a history compacted on request? compact
    _upkeep.py      what runs in the background?           scan, purge, heartbeat, drain

This module keeps the runtime's life: `running` owns one task group for the chores and
every runner of this process. Everything that coordinates runs (status, lease, cancel
flag, events) is in the store; the in-process state only makes things faster.

The runtime outlives its store's failures (a full disk, a vanished file): its chores
retry with backoff (_chores.py), and a turn that cannot be claimed or recovered is left
for the next scan. Anything else that escapes one of its tasks is a bug it does not try
to survive: it logs it and stops for good (`failure`, `wait_stopped`), and the server
exits so that its supervisor starts it again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from store import EventRow, ResponseRecord, Store, StoreError

from ._admission import Admissions
from ._agent import Agent
from ._broker import Broker
from ._compacting import Compactions
from ._control import Control
from ._following import Following
from ._ids import new_id
from ._leases import LeaseKeeper
from ._model import Model
from ._observer import Observer
from ._roster import Roster
from ._runner import TurnRunner
from ._runs import Runs
from ._settings import RuntimeSettings
from ._sinks import MemorySink
from ._steering import SteerAccepted, Steering, SteerOutcome
from ._upkeep import Upkeep
from ._workflow import Workflow

log = logging.getLogger("recovery.runtime")


class Runtime:
    def __init__(
        self,
        store: Store,
        agent: Agent | Workflow | None,
        model: Model,
        settings: RuntimeSettings | None = None,
        observer: Observer | None = None,
        *,
        agents: Mapping[str, Agent | Workflow] | None = None,
    ) -> None:
        """Serve `agent` for every model name, and each of `agents` for its own name
        (_roster.py); `model` runs the agents that have none of their own."""
        self.store = store
        self.roster = roster = Roster(agent, agents or {}, model)
        self.settings = settings = settings or RuntimeSettings()
        observer = observer or Observer()
        broker = Broker()
        store.on_events_committed(broker.notify)
        # Renews the leases of the turns being driven, from a thread (G8; _leases.py).
        self._leases = LeaseKeeper(
            store, settings.lease_ttl, blocked_after=settings.loop_blocked_warning
        )
        self._runs = Runs(
            store=store,
            roster=roster,
            settings=settings,
            observer=observer,
            owner=new_id("proc"),
            leases=self._leases,
            guard=self._fatal_if_raises,
        )
        self._admissions = Admissions(store, roster, settings, self._runs)
        self._steering = steering = Steering(store, settings, self._runs)
        self._admissions.pending_steers = steering.take_pending
        self._runs.on_steered_end = steering.settle
        self._following = Following(store, settings, broker, self._runs)
        self._control = Control(store, settings, self._runs, self._following)
        self._upkeep = Upkeep(store, settings, self._runs)
        self._compactions = Compactions(store, roster, observer, settings)
        self._upkeep.settle_steers = steering.settle_orphans
        store.on_signal(self._upkeep.on_signal)
        self._failure: BaseException | None = None  # what stopped the runtime for good
        self._stopped = asyncio.Event()  # `running` has ended, however it ended

    # -- the runtime's life -------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Runtime]:
        """Run the runtime's background work (recovery scans, heartbeats, runners) for the
        duration of the block; serving does not wait for the first scan. An exception
        that escapes one of its tasks stops it for good: it is logged at once, the block
        is cancelled, and the group's exception leaves `running` (see `failure`)."""
        scan, purge, heartbeat = self._upkeep.chores()
        try:
            async with asyncio.TaskGroup() as tg:
                self._runs.tg = tg
                self._leases.start()
                scanner = tg.create_task(self._fatal_if_raises(scan.forever()))
                purger = tg.create_task(self._fatal_if_raises(purge.forever()))
                beating = tg.create_task(self._fatal_if_raises(heartbeat.forever()))
                try:
                    yield self
                finally:
                    scanner.cancel()
                    purger.cancel()
                    try:
                        await self._upkeep.drain()  # leases are renewed until it released them
                    finally:
                        beating.cancel()
                        await self._leases.stop()
                        self._runs.tg = None
        except BaseExceptionGroup as group:
            self._stopped_by(group)  # the block's own exception, if no task's came first
            raise
        finally:
            self._stopped.set()

    async def _fatal_if_raises(self, work: Coroutine[Any, Any, None]) -> None:
        """Run one task of the runtime's group; what escapes it stops the runtime, and is
        logged now rather than after the drain that follows."""
        try:
            await work
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self._stopped_by(exc)
            raise

    def _stopped_by(self, exc: BaseException) -> None:
        if self._failure is not None:
            return
        self._failure = exc
        log.critical(
            "the runtime stopped for good: %s: %s; no turn runs in this process any more, "
            "and the server exits so that its supervisor restarts it",
            type(exc).__name__,
            exc,
            exc_info=exc,
        )

    @property
    def alive(self) -> bool:
        """True while the runtime runs (between `running`'s start and end, not stopped)."""
        return self._runs.tg is not None and self._failure is None

    @property
    def failure(self) -> BaseException | None:
        """What stopped the runtime for good (an exception a task did not handle)."""
        return self._failure

    async def wait_stopped(self) -> None:
        """Return once `running` has ended: for good (`failure`), or at shutdown."""
        await self._stopped.wait()

    @property
    def ready(self) -> asyncio.Event:
        """Set when the first recovery scan is done."""
        return self._upkeep.ready

    @property
    def draining(self) -> bool:
        """Shutting down: no new work is taken."""
        return self._runs.draining

    @draining.setter
    def draining(self, value: bool) -> None:
        self._runs.draining = value

    @property
    def active_runs(self) -> int:
        return self._runs.active

    async def readiness(self) -> tuple[str, str | None]:
        """("ready", None), or (state, why) this process should not be sent requests:
        "starting" until the first recovery scan is done, "stopping" while shutting down,
        "stopped" once the runtime stopped for good, "store_unavailable" while the store
        cannot be read or written (a full disk: this passes by itself when space frees
        up; a database file deleted or replaced under the server: it does not)."""
        if not self.alive:
            return "stopped", "the runtime is not running"
        if self.draining:
            return "stopping", "the server is shutting down"
        try:
            await self.store.check_writable()
            await self.store.ping()
        except StoreError as exc:
            return "store_unavailable", str(exc)
        if not self.ready.is_set():
            return "starting", "the first recovery scan has not finished"
        return "ready", None

    # -- admission (_admission.py) ------------------------------------------------------

    async def create(
        self,
        params: dict[str, Any],
        *,
        tenant: str,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
    ) -> tuple[ResponseRecord, bool]:
        """Validate a turn against its history and its lane, and commit it (G2); return
        (record, True). A retried create (same `idempotency_key` and `request_hash`)
        returns (the first response, False) and starts nothing (G11)."""
        return await self._admissions.create(
            params, tenant=tenant, idempotency_key=idempotency_key, request_hash=request_hash
        )

    async def check_create(
        self, params: dict[str, Any], *, tenant: str
    ) -> tuple[Agent | Workflow, list[dict[str, Any]], list[dict[str, Any]]]:
        """Refuse what `create(params)` would refuse, storing nothing; return the turn's
        agent, the history it would continue, and its input with references resolved."""
        return await self._admissions.check(params, tenant=tenant)

    # -- compaction on request (_compacting.py) ------------------------------------------

    async def compact(self, params: dict[str, Any], *, tenant: str) -> dict[str, Any]:
        """The compacted response of the history `params` names (POST /v1/responses/compact):
        its user messages, then a compaction item holding the model's summary."""
        return await self._compactions.compact(params, tenant=tenant)

    # -- running (_runs.py) -------------------------------------------------------------

    def start_foreground(
        self, record: ResponseRecord, *, stream: bool
    ) -> tuple[TurnRunner, MemorySink]:
        """Run a foreground turn; its events go to the returned sink (kept only if `stream`)."""
        return self._runs.start_foreground(record, stream=stream)

    def stop_local(self, response_id: str, reason: str = "cancelled") -> None:
        """Stop the turn at its next safe point, if this process drives it."""
        self._runs.stop(response_id, reason)

    # -- following (_following.py) ------------------------------------------------------

    async def get(self, response_id: str, tenant: str) -> ResponseRecord:
        """A stored response; NotFound for none (or one created with `store: false`)."""
        return await self._following.get(response_id, tenant)

    async def snapshot(self, response_id: str, tenant: str) -> tuple[str, bool]:
        """(snapshot JSON, background) of a response, for the GET that polls it."""
        return await self._following.snapshot(response_id, tenant)

    def follow(self, response_id: str, tenant: str, after: int) -> AsyncIterator[list[EventRow]]:
        """The response's events after `after`, then live until the terminal one (G7)."""
        return self._following.follow(response_id, tenant, after)

    async def wait_final(self, response_id: str, tenant: str) -> dict[str, Any]:
        """The response once it is terminal."""
        return await self._following.wait_final(response_id, tenant)

    # -- control (_control.py) ----------------------------------------------------------

    async def cancel(self, response_id: str, tenant: str) -> ResponseRecord:
        """Cancel a background response (G9): idempotent, durable."""
        return await self._control.cancel(response_id, tenant)

    async def delete(self, response_id: str, tenant: str) -> None:
        """Delete a finished response."""
        await self._control.delete(response_id, tenant)

    # -- steering over WebSocket (_steering.py) -------------------------------------------

    async def steer(
        self, target_id: str, items: list[dict[str, Any]], *, tenant: str
    ) -> SteerAccepted:
        """Commit a `response.steer` of `target_id` before returning (SteerRefused if it
        is not accepted); the target stops at its next safe point and a successor holding
        the input follows it."""
        return await self._steering.steer(target_id, items, tenant=tenant)

    async def steer_outcomes(
        self, target_id: str, *, tenant: str, steer_ids: Sequence[str] | None = None
    ) -> list[SteerOutcome]:
        """Once the target has ended: what became of its steers (default: all of them),
        in submission order."""
        return await self._steering.outcomes(target_id, tenant=tenant, steer_ids=steer_ids)
