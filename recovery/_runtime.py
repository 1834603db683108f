"""The runtime: accepts turns, runs them, follows their events, cancels them.

It owns one task group for every runner of this process. Everything that coordinates
runs (status, lease, cancel flag, events) is in the store; the in-process maps below
only make things faster (a local cancel reaches its runner at once).

The runtime outlives its store's failures (a full disk, a vanished file): its chores
retry with backoff (_chores.py), and a turn that cannot be claimed or recovered is left
for the next scan. Anything else that escapes one of its tasks is a bug it does not try
to survive: it logs it and stops for good (`failure`, `wait_stopped`), and the server
exits so that its supervisor starts it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import Any

from store import (
    Admission,
    EventRow,
    Fence,
    IdempotencyMismatch,
    ItemRow,
    LaneBusy,
    NewResponse,
    ResponseRecord,
    SQLiteStore,
    StoreError,
    StoreUnavailable,
    StoreVanished,
    TooManyQueued,
)

from . import _failpoints as fp
from ._agent import Agent
from ._broker import Broker
from ._chores import Chore
from ._emitter import Emitter
from ._errors import InvalidRequest, LaneLocked, NotFound, QueueFull, Unavailable
from ._history import check_input
from ._ids import new_id
from ._json import dumps
from ._leases import LeaseKeeper
from ._model import Model
from ._observer import Observer, current_response_id
from ._response import new_response
from ._runner import TurnRunner
from ._settings import RuntimeSettings
from ._sinks import DurableSink, MemorySink, encode
from ._status import TERMINAL_EVENTS, ResponseStatus
from ._turn import Stop, Turn
from ._workflow import Workflow

log = logging.getLogger("recovery.runtime")


class Runtime:
    def __init__(
        self,
        store: SQLiteStore,
        agent: Agent | Workflow,
        model: Model,
        settings: RuntimeSettings | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.store = store
        self.observer = observer or Observer()
        self.agent = agent
        self.model = (agent.model if isinstance(agent, Agent) else None) or model
        self.settings = settings or RuntimeSettings()
        self.owner = new_id("proc")
        self._broker = Broker()
        store.on_events_committed(self._broker.notify)
        self._runners: dict[str, TurnRunner] = {}
        # Renews the leases of the turns `_drive` runs, from a thread (G8; _leases.py).
        self._leases = LeaseKeeper(
            store, self.settings.lease_ttl, blocked_after=self.settings.loop_blocked_warning
        )
        self._starting: set[str] = set()  # claimed or recovered by a scan, not yet running
        self._tasks: set[asyncio.Task[None]] = set()
        self._tg: asyncio.TaskGroup | None = None
        self.ready = asyncio.Event()  # set when the first recovery scan is done
        self.draining = False  # shutting down: no new work is taken
        self._failure: BaseException | None = None  # what stopped the runtime for good
        self._stopped = asyncio.Event()  # `running` has ended, however it ended
        self._start_failure: StoreError | None = None  # a claim or recovery that failed
        self._lane_freed: dict[str, asyncio.Event] = {}  # wakes foreground turns waiting

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Runtime]:
        """Run the runtime's background work (recovery scans, heartbeats, runners) for the
        duration of the block; serving does not wait for the first scan. An exception
        that escapes one of its tasks stops it for good: it is logged at once, the block
        is cancelled, and the group's exception leaves `running` (see `failure`)."""
        settings = self.settings
        retry = settings.chore_retry_max
        scan = Chore("recovery scan", self._scan_once, settings.scan_interval, retry)
        purge = Chore("retention purge", self._purge_once, settings.purge_interval, retry)
        beat = min(settings.heartbeat_interval, settings.lease_ttl / 4)
        heartbeat = Chore("heartbeat", self._heartbeat_once, beat, retry)
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
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
                        await self._drain()  # leases are renewed until it has released them
                    finally:
                        beating.cancel()
                        await self._leases.stop()
                        self._tg = None
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
        return self._tg is not None and self._failure is None

    @property
    def failure(self) -> BaseException | None:
        """What stopped the runtime for good (an exception a task did not handle)."""
        return self._failure

    async def wait_stopped(self) -> None:
        """Return once `running` has ended: for good (`failure`), or at shutdown."""
        await self._stopped.wait()

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

    async def _drain(self) -> None:
        """Graceful shutdown (G8): running turns finish their step and checkpoint within
        the grace period, then every lease is released so another process resumes at
        once. After the grace period the turns still running are cut off (a model stream
        at once), but a tool body that has started is never abandoned: a cut turn first
        waits for its running bodies to end (an async body is bounded by its timeout; a
        thread cannot be stopped and is waited for until it returns) and records their
        outcomes. Leases are released only when every turn has ended, so no other
        process runs a call whose body may still act here (G3). Cancelling the drain
        itself (a server giving up on it) only ends the grace period early."""
        self.draining = True
        runners = list(self._runners.values())
        for runner in runners:
            runner.request_drain()
        interrupted: asyncio.CancelledError | None = None
        pending = set(self._tasks)
        if pending:
            try:
                _, pending = await asyncio.wait(pending, timeout=self.settings.shutdown_grace)
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
        # Only turns handed over (paused at a boundary, or cut after their bodies ended)
        # are released, by their fences: a turn that failed here, or whose end could not
        # be saved, keeps its lease until it expires, so its recovery is counted (G1).
        handed = [(r.response_id, r.turn.fence) for r in runners if r.handed_over]
        try:
            await asyncio.shield(self.store.release_leases(handed))
        except StoreError as exc:
            log.warning("could not release leases: %s", exc)
        if interrupted is not None:
            raise interrupted

    # -- recovery -----------------------------------------------------------------------

    async def _scan_once(self) -> None:
        """One round of the scan chore. A claim or recovery that the last round started
        and that failed for the store fails this round, so the chore backs off."""
        try:
            self.store.check_file()  # a vanished database is noticed even when idle
            failed, self._start_failure = self._start_failure, None
            await self.scan()
            if failed is not None:
                raise failed
        finally:
            self.ready.set()

    async def scan(self) -> int:
        """Start every unfinished response nobody holds; return how many were found."""
        orphans = await self.store.orphans()
        for response_id, status in orphans:
            if response_id in self._runners or response_id in self._starting:
                continue  # driven here, or about to be: not an orphan for this process
            self._starting.add(response_id)
            if status == ResponseStatus.QUEUED:
                self._spawn(self._starting_done(response_id, self._claim_and_run(response_id)))
            else:
                self._spawn(self._starting_done(response_id, self._recover(response_id)))
        return len(orphans)

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

    async def _purge_once(self) -> None:
        await self.purge(time.time())

    async def purge(self, now: float) -> tuple[int, int]:
        """Apply the retention period as of `now` (never touching unfinished responses)."""
        responses, keys = await self.store.purge(now - self.settings.retention)
        if responses or keys:
            log.info("retention: purged %d responses and %d idempotency keys", responses, keys)
        return responses, keys

    async def _recover(self, response_id: str) -> None:
        if self.draining:
            return  # shutting down: takes no new work (G8)
        try:
            record = await self.store.recover(response_id, self.owner, self.settings.lease_ttl)
        except StoreError as exc:
            return self._start_failed(response_id, exc)
        if record is None:
            return
        self.observer.recovery_started()
        fence = Fence(self.owner, record.epoch)
        if not record.background:
            # Nobody waits for a foreground response any more: it is not run again.
            runner = self._runner(record, MemorySink(keep=False), fence)
            failure = "The server restarted before this response finished."
            await self._drive(runner, fail=("server_error", failure))
            return
        runner = self._runner(record, DurableSink(self.store, record.id, fence), fence)
        if record.recoveries > self.settings.max_recoveries:
            failure = (
                f"The response was recovered {record.recoveries - 1} times and the server "
                "stopped each time; it will not be run again."
            )
            await self._drive(runner, fail=("recovery_exhausted", failure))
            return
        log.info("recovering response %s (recovery %d)", record.id, record.recoveries)
        await self._drive(runner)

    async def _heartbeat_once(self) -> None:
        """Bring in cancel and steer requests made elsewhere. (Leases are not renewed
        here but by the lease keeper's thread, which a blocked event loop cannot stop.)"""
        if self._runners:
            for response_id, kind in await self.store.stop_requests(self.owner):
                self.stop_local(response_id, kind)

    # -- create -------------------------------------------------------------------------

    async def create(
        self,
        params: dict[str, Any],
        *,
        tenant: str,
        idempotency_key: str | None = None,
        request_hash: str | None = None,
    ) -> tuple[ResponseRecord, bool]:
        """Validate a turn against its history and its lane, and commit it (G2); return
        (record, True). `params` is the validated create request, with `input` already
        normalized. A retried create (same `idempotency_key` and `request_hash`) returns
        (the first response, False) and starts nothing (G11)."""
        if self.draining:
            raise Unavailable("The server is shutting down; send the request again.")
        if idempotency_key is not None:
            existing = await self._idempotent(tenant, idempotency_key, request_hash)
            if existing is not None:
                return existing, False
        strategy = params.pop("multitask_strategy", None) or self.settings.multitask_strategy
        lane, busy = await self._lane(params, tenant)
        # A busy lane's running turn may still answer its calls: the check that no call is
        # left unanswered is made again when this turn starts (history(turn_input=...)).
        await self.check_input(
            params["input"],
            tenant=tenant,
            previous_response_id=params.get("previous_response_id"),
            conversation_id=params.get("conversation"),
            allow_pending=busy,
        )
        self._check_declared_tools(params)
        new, events = self._new_response(params, tenant, lane)
        admission = Admission(
            reject_if_busy=strategy == "reject",
            steer=strategy if strategy in ("interrupt", "rollback") else None,
            max_queued=self.settings.max_queued,
            max_queued_tenant=self.settings.max_queued_per_tenant,
            idempotency_key=idempotency_key,
            request_hash=request_hash,
        )
        items = [ItemRow(item["id"], dumps(item)) for item in params["input"]]
        claim_for = (self.owner, self.settings.lease_ttl) if new.background else None
        try:
            record, created, claimed = await self.store.create_response(
                new, items, events, admission, claim_for
            )
        except LaneBusy:
            raise LaneLocked(
                "Another turn of this conversation is still running, and this request's "
                "multitask_strategy is 'reject'."
            ) from None
        except TooManyQueued as exc:
            where = "this conversation" if exc.where == "lane" else "this API key"
            raise QueueFull(
                f"{where.capitalize()} already has {exc.queued} queued responses, the most "
                "allowed; try again when one has finished.",
                retry_after=1.0,
            ) from None
        except IdempotencyMismatch:
            raise self._key_reused(idempotency_key) from None
        except StoreUnavailable as exc:
            raise Unavailable(_unwritable(exc)) from exc
        current_response_id.set(record.id)
        if created:
            fp.failpoint(fp.ACCEPTED)
            if claimed is not None:  # claimed in the create transaction: run it now
                await self._run_claimed(claimed)
            elif new.background:
                self._spawn(self._claim_and_run(record.id))
            if admission.steer is not None:  # the lane's running turn, not those waiting
                for runner in list(self._runners.values()):
                    if runner.lane == lane and runner.started:
                        runner.request_stop(admission.steer)
        return record, created

    async def _idempotent(
        self, tenant: str, key: str, request_hash: str | None
    ) -> ResponseRecord | None:
        found = await self.store.idempotency_key(tenant, key)
        if found is None:
            return None
        stored_hash, response_id = found
        if stored_hash != request_hash:
            raise self._key_reused(key)
        return await self.store.get_response(response_id, tenant)

    @staticmethod
    def _key_reused(key: str | None) -> InvalidRequest:
        return InvalidRequest(
            f"Idempotency-Key '{key}' was already used for a different request; use a new "
            "key for a new request.",
            param="Idempotency-Key",
            code="idempotency_key_reused",
        )

    async def _lane(self, params: dict[str, Any], tenant: str) -> tuple[str | None, bool]:
        """The lane a new turn joins (None: a lane of its own) and whether it is busy."""
        previous_id: str | None = params.get("previous_response_id")
        conversation_id: str | None = params.get("conversation")
        if previous_id:
            previous = await self.store.get_response(previous_id, tenant)
            if previous is None or unstored(previous.snapshot):
                raise InvalidRequest(
                    f"Previous response with id '{previous_id}' not found.",
                    param="previous_response_id",
                    code="previous_response_not_found",
                )
            if ResponseStatus(previous.status).is_terminal:
                return None, False
            return previous.lane, True
        if conversation_id:
            if await self.store.get_conversation(conversation_id, tenant) is None:
                raise NotFound(f"Conversation with id '{conversation_id}' not found.")
            return conversation_id, await self.store.lane_busy(conversation_id)
        return None, False

    def _check_declared_tools(self, params: dict[str, Any]) -> None:
        server_tools = (
            {t.name for t in self.agent.tools} if isinstance(self.agent, Agent) else set()
        )
        for index, declared in enumerate(params.get("tools") or []):
            if declared.get("name") in server_tools:
                raise InvalidRequest(
                    f"Tool '{declared['name']}' is provided by the server; do not declare it "
                    "in 'tools'.",
                    param=f"tools[{index}].name",
                    code="invalid_value",
                )

    def _new_response(
        self, params: dict[str, Any], tenant: str, lane: str | None
    ) -> tuple[NewResponse, list[EventRow]]:
        response_id = new_id("resp")
        created_at = time.time()
        background = bool(params.get("background"))
        status = ResponseStatus.QUEUED if background else ResponseStatus.IN_PROGRESS
        response = new_response(response_id, created_at, status, params)
        events: list[EventRow] = []
        if background:
            emitter = Emitter(response, 0)
            events = [encode(emitter.lifecycle("response.created"))]
            events.append(encode(emitter.lifecycle("response.queued")))
        new = NewResponse(
            id=response_id,
            tenant=tenant,
            status=status,
            background=background,
            created_at=created_at,
            params=dumps(params),
            snapshot=dumps(response),
            last_seq=len(events) - 1,
            lane=lane or response_id,
            conversation_id=params.get("conversation"),
            conversation_upto=None,
            previous_response_id=params.get("previous_response_id"),
            owner=None if background else self.owner,
            lease_expires_at=None if background else created_at + self.settings.lease_ttl,
        )
        return new, events

    async def check_input(
        self,
        new_input: list[dict[str, Any]],
        *,
        tenant: str,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        allow_pending: bool = False,
        param: str = "input",
    ) -> None:
        """Refuse client items that would break tool pairing (G5); see `check_input`."""
        await check_input(
            self.store,
            new_input,
            tenant=tenant,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            allow_pending=allow_pending,
            param=param,
        )

    # -- run ----------------------------------------------------------------------------

    async def _run_claimed(self, claimed: ResponseRecord) -> None:
        """Run a turn its create transaction claimed; or, when shutdown began while that
        transaction committed, hand the turn over at once: the drain may have released
        this process's leases already, and this one would hold the turn unrun until it
        expired."""
        fence = Fence(self.owner, claimed.epoch)
        if self._tg is None or self.draining:
            try:
                await self.store.release_lease(claimed.id, fence)
            except StoreError as exc:
                log.warning("response %s: not handed over (%s); its lease expires", claimed.id, exc)
            return
        sink = DurableSink(self.store, claimed.id, fence)
        self._spawn(self._drive(self._runner(claimed, sink, fence, fresh=True)))

    async def _claim_and_run(self, response_id: str) -> None:
        if self.draining:
            return  # shutting down: the turn stays queued for another process
        try:
            record = await self.store.claim(response_id, self.owner, self.settings.lease_ttl)
        except StoreError as exc:
            return self._start_failed(response_id, exc)
        if record is None:
            return  # cancelled while queued, or taken by another process
        fence = Fence(self.owner, record.epoch)
        await self._drive(self._runner(record, DurableSink(self.store, record.id, fence), fence))

    def start_foreground(
        self, record: ResponseRecord, *, stream: bool
    ) -> tuple[TurnRunner, MemorySink]:
        """Run a foreground turn; its events go to the returned sink (kept only if `stream`)."""
        sink = MemorySink(keep=stream)
        runner = self._runner(record, sink, Fence(self.owner, record.epoch))
        self._spawn(self._drive(runner, wait_for_lane=record.lane))
        return runner, sink

    def _runner(
        self,
        record: ResponseRecord,
        sink: DurableSink | MemorySink,
        fence: Fence,
        *,
        fresh: bool = False,
    ) -> TurnRunner:
        turn = Turn(record.id, fence, self.store, self.settings, self.observer, Stop())
        runner = TurnRunner(
            turn=turn, agent=self.agent, model=self.model, record=record, sink=sink, fresh=fresh
        )
        if self.draining:  # claimed while shutting down: stop at the first boundary
            runner.request_drain()
        self._runners[record.id] = runner
        return runner

    async def _drive(
        self,
        runner: TurnRunner,
        *,
        fail: tuple[str, str] | None = None,
        wait_for_lane: str | None = None,
    ) -> None:
        lane = runner.lane
        # Only a turn being driven keeps its lease: once this ends, however it ends, the
        # lease is renewed no more, so a turn left without an end is recovered (G1).
        self._leases.hold(runner.response_id, runner.turn.fence)
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
            self._leases.drop(runner.response_id, runner.turn.fence)
            self._runners.pop(runner.response_id, None)
            self._free_lane(lane)

    async def _wait_for_lane(self, runner: TurnRunner) -> None:
        """Hold a foreground turn until every earlier turn of its lane has ended (G10)."""
        if runner.lane == runner.response_id:
            return  # a lane of its own: no turn can be ahead of it
        while not runner.stopping and not await self._is_lane_head(runner.response_id):
            freed = self._lane_freed.setdefault(runner.lane, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(freed.wait(), self.settings.poll_interval * 4)

    async def _is_lane_head(self, response_id: str) -> bool:
        try:
            return await self.store.is_lane_head(response_id)
        except StoreError as exc:  # not known: ask again at the next poll
            self._start_failed(response_id, exc)
            return False

    def _free_lane(self, lane: str) -> None:
        """A turn of `lane` ended here: wake the turns waiting for it."""
        freed = self._lane_freed.pop(lane, None)
        if freed is not None:
            freed.set()
        if self._tg is not None:
            self._spawn(self._start_next(lane))

    async def _start_next(self, lane: str) -> None:
        try:
            next_id = await self.store.next_in_lane(lane)
        except StoreError as exc:  # the scan starts it instead
            return self._start_failed(lane, exc)
        if next_id is not None and next_id not in self._runners:
            await self._claim_and_run(next_id)

    async def wait_final(self, response_id: str, tenant: str) -> dict[str, Any]:
        """The response once it is terminal (it is driven here or by another process;
        a dead process's foreground responses are ended by the recovery scan)."""
        while True:
            record = await self.get(response_id, tenant)
            if ResponseStatus(record.status).is_terminal:
                final: dict[str, Any] = json.loads(record.snapshot)
                return final
            runner = self._runners.get(response_id)
            if runner is not None:
                await asyncio.shield(runner.done)
            else:
                await asyncio.sleep(self.settings.poll_interval)

    def stop_local(self, response_id: str, reason: str = "cancelled") -> None:
        runner = self._runners.get(response_id)
        if runner is not None:
            runner.request_stop(reason)

    @property
    def active_runs(self) -> int:
        return len(self._runners)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        if self._tg is None or self.draining:
            coro.close()  # shutting down: another process will pick the work up
            return
        task = self._tg.create_task(self._fatal_if_raises(coro))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- read ---------------------------------------------------------------------------

    async def get(self, response_id: str, tenant: str) -> ResponseRecord:
        """A stored response (one created with `store: false` is never found: it is kept
        only while it runs, for the runtime's own use)."""
        record = await self.store.get_response(response_id, tenant)
        if record is None or unstored(record.snapshot):
            raise NotFound(f"Response with id '{response_id}' not found.")
        current_response_id.set(record.id)
        return record

    async def snapshot(self, response_id: str, tenant: str) -> tuple[str, bool]:
        """(snapshot JSON, background) of a response, for the GET that polls it."""
        found = await self.store.response_snapshot(response_id, tenant)
        if found is None or unstored(found[0]):
            raise NotFound(f"Response with id '{response_id}' not found.")
        current_response_id.set(response_id)
        return found

    async def follow(
        self, response_id: str, tenant: str, after: int
    ) -> AsyncIterator[list[EventRow]]:
        """The response's events after `after`, from the log, then live until the terminal
        event (G7), in batches as committed. Ends at once if the response is already past
        `after` and terminal. The log is read a page at a time (`_next_page`), each only
        when the previous batch was taken, so that a stream's consumer sets its pace."""
        poll = self.settings.poll_interval
        check_status = True
        handed: Sequence[EventRow] = ()  # committed rows the broker handed over
        page = PAGE_ROWS
        while True:
            if handed and handed[0].seq == after + 1:
                rows = list(handed)  # the next rows, committed: no need to read them back
            else:
                # One page, read when the consumer asks for it: a slow reader holds one.
                rows = await self.store.read_events(response_id, after, limit=page)
                page = _next_page(rows)
            handed = ()
            if rows:
                ends = next((i for i, r in enumerate(rows) if r.type in TERMINAL_EVENTS), None)
                if ends is not None:
                    yield rows[: ends + 1]
                    return
                yield rows
                after = rows[-1].seq
                continue
            if check_status:
                record = await self.store.get_response(response_id, tenant)
                if record is None or ResponseStatus(record.status).is_terminal:
                    if not await self.store.read_events(response_id, after, limit=1):
                        return
                    continue
            # Driven here: every commit wakes us, so polling is only a fallback.
            local = response_id in self._runners
            woke = await self._broker.wait(response_id, after, poll * 20 if local else poll)
            check_status = woke is None
            handed = woke or ()

    # -- cancel and delete --------------------------------------------------------------

    async def cancel(self, response_id: str, tenant: str) -> ResponseRecord:
        """Cancel a background response (G9): idempotent, durable, honoured by whichever
        process drives it. A response that ended otherwise first cannot be cancelled."""
        record = await self.get(response_id, tenant)
        if not record.background:
            raise InvalidRequest("Cannot cancel a synchronous response.", param="response_id")
        if record.status == ResponseStatus.QUEUED and await self._cancel_queued(record):
            record = await self.get(response_id, tenant)
        elif not ResponseStatus(record.status).is_terminal:
            if await self.store.request_cancel(response_id):
                self.stop_local(response_id)
            record = await self._wait_terminal(response_id, tenant)
        status = ResponseStatus(record.status)
        if status.is_terminal and status is not ResponseStatus.CANCELLED:
            article = "an" if status is ResponseStatus.INCOMPLETE else "a"
            raise InvalidRequest(
                f"Cannot cancel {article} {status.value} response.", param="response_id"
            )
        return record

    async def _cancel_queued(self, record: ResponseRecord) -> bool:
        emitter = Emitter(json.loads(record.snapshot), record.last_seq + 1)
        terminal = emitter.finish(ResponseStatus.CANCELLED)
        return await self.store.cancel_queued(
            record.id,
            snapshot=dumps(emitter.response),
            last_seq=terminal["sequence_number"],
            events=[encode(terminal)],
        )

    async def _wait_terminal(self, response_id: str, tenant: str) -> ResponseRecord:
        deadline = time.monotonic() + self.settings.cancel_wait
        while True:
            record = await self.get(response_id, tenant)
            if ResponseStatus(record.status).is_terminal or time.monotonic() >= deadline:
                return record
            runner = self._runners.get(response_id)
            if runner is not None:
                remaining = max(deadline - time.monotonic(), 0.0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(runner.done), remaining)
            else:
                await asyncio.sleep(self.settings.poll_interval)

    async def delete(self, response_id: str, tenant: str) -> None:
        record = await self.get(response_id, tenant)
        if not ResponseStatus(record.status).is_terminal:
            raise InvalidRequest(
                "Cannot delete a response that is still running; cancel it first.",
                param="response_id",
            )
        if not await self.store.delete_response(response_id, tenant):
            raise NotFound(f"Response with id '{response_id}' not found.")


def unstored(snapshot: str) -> bool:
    """Whether a response's snapshot says `store: false`. (The snapshot is written by
    `dumps`, compactly: without that text it is stored, and only then is it parsed.)"""
    return '"store":false' in snapshot and json.loads(snapshot).get("store") is False


def _unwritable(exc: StoreUnavailable) -> str:
    """The message of a create refused because the store cannot be written."""
    if isinstance(exc, StoreVanished):
        return (
            "The server's database file was deleted or replaced while it was running, so "
            "it accepts no new responses (they would be lost); the operator must restore "
            "the file and restart the server."
        )
    return "The server cannot write to its store right now (its disk may be full); try again later."


PAGE_ROWS = 64  # the most events `follow` reads from the log at once
PAGE_CHARS = 64 * 1024  # and fewer when they are large: about this much


def _next_page(rows: Sequence[EventRow]) -> int:
    """How many events `follow` reads next: PAGE_ROWS, or after a page of large events
    (a long answer's `done` events, a large tool output) about PAGE_CHARS of them, and
    at least one, whatever its size."""
    largest = max((len(row.data) for row in rows), default=0)
    return max(1, min(PAGE_ROWS, PAGE_CHARS // max(largest, 1)))
