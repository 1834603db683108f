"""The turn runner: the step loop that drives one response to a terminal status.

One runner per running response, owned by the runtime's task group. A step is one model
call plus the server tools it asked for:

    compaction                      (context_management: its item, in a checkpoint)
    model stream -> events          (committed before anyone sees them, for background)
    step record                     (the step's calls, before any tool runs)
    per call: claim -> body -> output (the journal; G3, G4)
    checkpoint                      (snapshot + output items, at a tool-consistent boundary)

A runner that starts on a response with committed progress resumes it: the snapshot and
the events after it rebuild the output, a recorded step is never sent to the model
again, and journaled calls follow G3/G4. It writes only through its fence (owner,
epoch); a lost lease ends it without writing (TurnStopped "lease_lost", _turn.py). A stop
request (cancel) cuts a model stream at once and ends the turn at that safe point.

What the tool phase and a workflow's steps need of the turn is its `Turn` (_turn.py):
they are handed that, not the runner.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Coroutine, Sequence
from typing import Any

from store import Conflict, EventRow, ItemRow, ResponseRecord, StopRequested, StoreError

from . import _failpoints as fp
from ._agent import Agent
from ._backoff import retry_delay
from ._compactor import Compactor
from ._emitter import Emitter
from ._errors import InvalidRequest, ModelError, StepFailed, ToolOutcomeUnknown, TurnStopped
from ._history import fresh_call_ids, history_items, load_history, unpaired_call
from ._items import text_of
from ._json import dumps
from ._model import (
    FunctionCallDelta,
    Incomplete,
    MessageStart,
    Model,
    ModelEvent,
    ModelInfo,
    ModelRequest,
    ReasoningDelta,
    ReasoningDone,
    ReasoningStart,
    RefusalDelta,
    TextDelta,
    Usage,
)
from ._observer import ResponseEnd, current_response_id
from ._outcome import Outcome, failed, response_error, stopped
from ._request import budgets, model_request
from ._response import add_usage, usage_from_object, usage_object
from ._restore import restore
from ._sinks import Sink, encode
from ._status import ResponseStatus
from ._tool_phase import ToolPhase
from ._turn import LEASE_LOST, SHUTDOWN, Turn, lease_held
from ._workflow import Workflow, WorkflowContext, run_workflow

log = logging.getLogger("recovery.runner")

_RESTORE_PAGE = 10_000  # events read at a time when a resumed turn rebuilds its state

Item = dict[str, Any]


class TurnRunner:
    def __init__(
        self,
        *,
        turn: Turn,
        agent: Agent | Workflow,
        model: Model,
        record: ResponseRecord,
        sink: Sink,
        fresh: bool = False,
    ) -> None:
        self.turn = turn
        self._fresh = fresh  # just created and claimed here: nothing to restore
        self._store = turn.store
        self._stop = turn.stop
        self._agent = agent
        self._model = model
        self._record = record
        self._sink = sink
        self._params: dict[str, Any] = json.loads(record.params)
        self._emitter = Emitter(json.loads(record.snapshot), record.last_seq + 1)
        self._usage: Usage | None = usage_from_object(self._emitter.response.get("usage"))
        self._step = record.step
        self._conversation_upto = record.conversation_upto  # fixed by `_history` if None
        # The output items up to the last checkpoint: more are those of a step cut (by a
        # crash or a failed model call) and not finished yet.
        self._done_items = len(self._emitter.output)
        self._closing: list[dict[str, Any]] = []  # the last step's close, held for the end
        self.started = False  # False while a foreground turn waits for its lane
        # Paused or cut by a shutdown, leaving nothing unrecorded and no body running:
        # its lease may be released for another process to resume it at once.
        self.handed_over = False
        # Its lease was lost: another process owns the response now and decides its end.
        self.lost = False
        self._model_task: asyncio.Task[tuple[Incomplete | None, list[FunctionCallDelta]]] | None = (
            None
        )
        self.done: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        # The terminal snapshot's JSON as committed: a foreground reply sends it as is.
        self.final_json: str | None = None
        if record.stop_request is not None:  # asked while no process drove it
            self.request_stop(record.stop_request)

    @property
    def response_id(self) -> str:
        return self._record.id

    @property
    def lane(self) -> str:
        return self._record.lane

    @property
    def tenant(self) -> str:
        return self._record.tenant

    @property
    def stopping(self) -> bool:
        return self._stop.requested

    @property
    def steered(self) -> bool:
        """Asked to stop by a `response.steer` (_steering.py), whatever it ended with."""
        return self._stop.steered

    def request_drain(self) -> None:
        """Stop at the next step boundary without ending the turn (graceful shutdown):
        the current step finishes and is checkpointed; another process resumes the turn."""
        self._stop.drain()

    def request_stop(self, reason: str) -> None:
        """Stop at the next safe point; a model stream in flight is cut at once."""
        self._stop.request(reason)
        if self._model_task is not None:
            self._model_task.cancel()

    # -- the loop -----------------------------------------------------------------------

    async def run(self, *, fail: tuple[str, str] | None = None) -> None:
        """Drive the turn to its end; with `fail` (code, message), only close what a
        previous run left open and end `failed` with that error."""
        current_response_id.set(self.response_id)  # this task's log lines name it
        self.started = True
        try:
            if fail is not None:
                await self._start()
                outcome = failed(*fail)
            elif isinstance(self._agent, Workflow):
                outcome = await self._run_workflow(self._agent)
            else:
                outcome = await self._run_steps(self._agent)
        except TurnStopped as stop:
            if stop.reason == LEASE_LOST:
                return self._lost()
            if stop.reason == SHUTDOWN:
                return await self._pause()
            outcome = stopped(stop.reason)
        except ToolOutcomeUnknown as unknown:
            for output in unknown.outputs:  # the calls that did finish stay recorded,
                # published with the end: logged before it, a crash in between would have
                # the next run publish them again
                self._closing.extend(self._emitter.add_item(output))
            outcome = failed("tool_outcome_unknown", str(unknown))
        except ModelError as exc:
            outcome = failed(exc.code, exc.message)
        except StepFailed as exc:
            outcome = failed("server_error", str(exc))
        except asyncio.CancelledError:
            self._hand_over()  # cut off: its running tool bodies were recorded first
            self._resolve()
            raise
        except Exception:
            log.exception("response %s: the turn failed", self.response_id)
            outcome = failed("server_error", "The server failed to run this turn.")
        await self._finish(outcome)

    async def _run_workflow(self, handler: Workflow) -> Outcome:
        await self._start()
        own: list[Item] = self._params["input"]
        users = [i for i in own if i.get("type") == "message" and i.get("role") == "user"]
        asked = text_of(users[-1]) if users else ""
        ctx = WorkflowContext(self.turn, self.add_items, own, asked, self._emitter.output)
        await run_workflow(handler, ctx)
        return Outcome(ResponseStatus.COMPLETED)

    async def _run_steps(self, agent: Agent) -> Outcome:
        await self._start()
        history = await self._history()
        phase = ToolPhase(self.turn, agent)
        compactor = Compactor.of(self.turn, self._model, agent, self._params)
        budget = budgets(agent, self._params)
        while True:
            step_items = await self._recorded_step()
            if step_items is None:
                self._stop.check()
                if self._step >= budget.steps:
                    return Outcome(ResponseStatus.INCOMPLETE, incomplete_reason="max_steps")
                await self._compact(compactor, history)
                self._stop.check()  # a drain or cancel that came during the compaction
                incomplete, deltas = await self._model_step(agent, history)
                deltas = fresh_call_ids(deltas, await self._taken(history, deltas))
                first = len(self._emitter.output)
                # Closing the step's message goes with its calls: with server calls, both
                # commit with the step record, so no step's text is ever logged as
                # finished while its calls are not.
                call_events = self._emitter.function_calls(deltas)
                calls = [i for i in self._emitter.output[first:] if i["type"] == "function_call"]
                server_calls = [c for c in calls if c["name"] in phase.tools]
                if calls:
                    # Client calls too: published only with their step's record, so that
                    # recovery ends the turn on them rather than asking the model again
                    # with a call in the history that nothing answers.
                    if fp.armed(fp.STEP_STREAMED):  # its worst moment: all else is committed
                        await self._flush()
                    fp.failpoint(fp.STEP_STREAMED)
                    await self._record_step(calls, call_events)
                    fp.failpoint(fp.STEP_RECORDED)
                else:
                    # The last step's close commits with the terminal write (`_finish`):
                    # logged as finished before the end, a recovered turn would ask the
                    # model again and repeat the answer.
                    self._closing = call_events
                    if fp.armed(fp.ANSWER_STREAMED):  # its worst moment: all else is committed
                        await self._flush()
                    fp.failpoint(fp.ANSWER_STREAMED)
                if not server_calls:
                    if incomplete is not None:
                        return Outcome(
                            ResponseStatus.INCOMPLETE, incomplete_reason=incomplete.reason
                        )
                    return Outcome(ResponseStatus.COMPLETED)
            else:
                calls = step_items
                # A resumed run rebuilt its output from the log; a foreground response
                # keeps none (resumed for a steer, _runs.py): its calls go back in here,
                # before their outputs (G5).
                await self.add_items(calls)
                server_calls = [c for c in calls if c["name"] in phase.tools]
                if not server_calls:  # a recorded step of client calls: the turn ends there
                    return Outcome(ResponseStatus.COMPLETED)
            outputs = await phase.run(server_calls, budget.tool_calls, step=self._step)
            await self._checkpoint(outputs)
            fp.failpoint(fp.CHECKPOINT)
            if phase.over_budget:
                return Outcome(ResponseStatus.INCOMPLETE, incomplete_reason="max_tool_calls")
            self._stop.check()
            if len(calls) > len(server_calls):
                return Outcome(ResponseStatus.COMPLETED)  # a client tool call ends the turn

    async def _taken(self, history: list[Item], deltas: list[FunctionCallDelta]) -> set[str]:
        """The call ids a step's new calls may not take: those of the history and this
        turn's output, of the inputs of the turns queued in its lane, and, in a
        conversation, of what the items API added since the turn started."""
        if not deltas:
            return set()
        taken = {i["call_id"] for i in history + self._emitter.output if "call_id" in i}
        record = self._record
        return taken | await self._store.taken_call_ids(
            record.lane, record.conversation_id, self._conversation_upto
        )

    async def _start(self) -> None:
        """Emit the opening lifecycle events, or rebuild the state of a resumed run."""
        emitter, sink = self._emitter, self._sink
        if self._record.last_seq < 0:  # foreground: nothing was emitted at create
            emitter.set_status(ResponseStatus.IN_PROGRESS)
            sink.emit([emitter.lifecycle("response.created")])
            sink.emit([emitter.lifecycle("response.in_progress")])
            return
        committed: list[EventRow] = []
        after = self._record.last_seq
        while not self._fresh:  # every event since the checkpoint: a step may stream more
            page = await self._store.read_events(self.response_id, after, _RESTORE_PAGE)
            committed += page
            if len(page) < _RESTORE_PAGE:
                break
            after = page[-1].seq
        closing = restore(emitter, committed)
        emitter.set_status(ResponseStatus.IN_PROGRESS)
        if emitter.next_seq == 2:  # only created + queued so far: this is the first run
            sink.emit([emitter.lifecycle("response.in_progress")])
        sink.emit(closing)

    async def _recorded_step(self) -> list[Item] | None:
        if self._fresh:
            return None  # every step record of a fresh turn is written by this runner
        recorded = await self._store.get_step(self.response_id, self._step)
        return json.loads(recorded) if recorded is not None else None

    # -- model calls --------------------------------------------------------------------

    async def _model_step(
        self, agent: Agent, history: list[Item]
    ) -> tuple[Incomplete | None, list[FunctionCallDelta]]:
        """One model call, retried on retryable failures (G6: tools are not re-run).
        Returns how it ended and the function calls it asked for, not yet published."""
        policy = self.turn.settings
        attempt = 0
        while True:
            output = history_items(self._emitter.output)
            request = model_request(agent, self._model, self._params, history + output)
            unpaired = unpaired_call(request.input)
            if unpaired is not None:
                # Never send what OpenAI refuses (G5 at the wire): a bug, named.
                raise ModelError(
                    f"The history of this turn has {unpaired}; it was not sent to the model."
                )
            try:
                return await self._stream_model(request)
            except ModelError as exc:
                # The next attempt continues the open message; cut reasoning closes.
                self._sink.emit(self._emitter.suspend_message())
                attempt += 1
                delay = retry_delay(policy, exc, attempt)
                if delay is None:
                    raise
                log.warning(
                    "response %s: model call failed (%s); retry %d in %.2fs",
                    self.response_id,
                    exc.message,
                    attempt,
                    delay,
                )
                self.turn.observer.model_retried(self._model, request)
                await self._stop.wait(delay)

    def _close_cut_items(self) -> None:
        self._sink.emit(self._emitter.close_open("incomplete"))

    async def _stream_model(
        self, request: ModelRequest
    ) -> tuple[Incomplete | None, list[FunctionCallDelta]]:
        """Stream one model call into events; the stream is cut if a stop is requested."""
        try:
            async with asyncio.TaskGroup() as tg:
                self._model_task = tg.create_task(self._consume(request))
        except BaseExceptionGroup as group:  # one child: its failure is the step's
            self._model_task = None
            raise group.exceptions[0] from None
        task, self._model_task = self._model_task, None
        if task.cancelled():
            if task.cancelling() == 0:
                # Cancelled from inside (a client library closing its connection), not
                # by a stop request: a failed model call, retried like any other.
                raise ModelError("The model stream was cancelled.", retryable=True)
            self._close_cut_items()
            raise TurnStopped(self._stop.reason or "cancelled")
        return task.result()

    async def _consume(
        self, request: ModelRequest
    ) -> tuple[Incomplete | None, list[FunctionCallDelta]]:
        """Text streams out as it comes; function calls are held back until the stream
        ends, so a call cut off by a crash, a failed call or a stop is never seen."""
        incomplete: Incomplete | None = None
        calls: list[FunctionCallDelta] = []
        async for event in self.turn.observer.watch_model(self._model, request):
            if isinstance(event, FunctionCallDelta):
                calls.append(event)
            elif isinstance(event, Usage):
                self._usage = add_usage(self._usage, event)
            elif isinstance(event, ModelInfo):
                self._answered_by(event)
            elif isinstance(event, Incomplete):
                incomplete = event
            else:
                self._sink.emit(self._streamed(event, request))
            fp.failpoint(fp.MODEL_STREAM)
        return incomplete, calls  # the open message is closed by the caller, with the calls

    def _streamed(self, event: ModelEvent, request: ModelRequest) -> list[dict[str, Any]]:
        """The stream events of a piece of the model's output. A reasoning item keeps the
        model's id and `encrypted_content` only when the request asked for that content
        (`include`), as OpenAI returns it then only: the id is what the content names."""
        emitter, sealed = self._emitter, request.encrypted_reasoning
        if isinstance(event, TextDelta):
            return emitter.text_delta(event)
        if isinstance(event, RefusalDelta):
            return emitter.refusal_delta(event)
        if isinstance(event, ReasoningDelta):
            return emitter.reasoning_delta(event)
        if isinstance(event, ReasoningStart):
            return emitter.reasoning_start(event.id if sealed else None)
        if isinstance(event, ReasoningDone):
            return emitter.reasoning_done(event.encrypted_content if sealed else None)
        assert isinstance(event, MessageStart)
        return emitter.message_start(event.phase)

    def _answered_by(self, info: ModelInfo) -> None:
        """Report the model (and tier) that answered, not the names the request asked
        for (an upstream pinned with --upstream-model, or one naming its snapshot)."""
        if info.model:
            self._emitter.response["model"] = info.model
        if info.service_tier:
            self._emitter.response["service_tier"] = info.service_tier

    async def _history(self) -> list[Item]:
        """The history, then this turn's input, checked (G5) before any model call."""
        record = self._record
        upto = record.conversation_upto
        if record.conversation_id is not None and upto is None:
            # A foreground turn: its history ends where the conversation ends now,
            # recorded, so that a chain from it reads what it read (G5).
            with lease_held():
                upto = await self._store.fix_conversation_upto(record.id, self.turn.fence)
        self._conversation_upto = upto
        try:
            return await load_history(
                self._store,
                tenant=record.tenant,
                previous_response_id=record.previous_response_id,
                conversation_id=record.conversation_id,
                conversation_upto=upto,
                turn_input=self._params["input"],
            )
        except InvalidRequest as exc:
            # A call no output answers (the turn before this one ended waiting for a client
            # tool): the turn ends failed with the create check's code, naming the call.
            raise ModelError(exc.message, code=exc.code or "invalid_request") from None

    # -- checkpoints --------------------------------------------------------

    async def _compact(self, compactor: Compactor | None, history: list[Item]) -> None:
        """Compact the history before a step, when `context_management` asks
        (_compactor.py): the compaction item and its events commit in one checkpoint before
        the step's model call, so a crash before it compacts again and one after it never
        does. Not while a step cut by a crash is pending: it starts over first."""
        if compactor is None or len(self._emitter.output) != self._done_items:
            return
        made = await compactor.before_step(history + history_items(self._emitter.output))
        if made is None:
            return
        item, usage = made
        self._usage = add_usage(self._usage, usage)
        await self._save_checkpoint(self._emitter.add_item(item))
        self._done_items = len(self._emitter.output)
        fp.failpoint(fp.COMPACTED)

    async def _checkpoint(self, outputs: list[Item]) -> None:
        """Add the step's tool outputs and commit a checkpoint that covers them (G5, G7)."""
        events = []
        for output in outputs:
            events += self._emitter.add_item(output)
        self._step += 1
        await self._save_checkpoint(events)
        self._done_items = len(self._emitter.output)

    async def add_items(self, items: list[Item], *, checkpoint: bool = False) -> None:
        """Add finished items (those already in the output, as after a replay, are kept
        as they are); with `checkpoint`, commit a checkpoint covering them."""
        done = {i["id"] for i in self._emitter.output if i.get("status") == "completed"}
        events = []
        for item in items:
            if item["id"] not in done:
                events += self._emitter.add_item(item)
        if checkpoint:
            await self._save_checkpoint(events)
        else:
            self._sink.emit(events)

    async def _save_checkpoint(self, events: list[dict[str, Any]]) -> None:
        emitter, sink = self._emitter, self._sink
        emitter.response["usage"] = usage_object(self._usage) if self._usage else None
        await self._save_snapshot(
            events,
            status=ResponseStatus.IN_PROGRESS,
            last_seq=emitter.next_seq - 1,
            step=self._step,
        )
        if not sink.durable:
            sink.emit(events)

    async def _record_step(self, calls: list[Item], events: list[dict[str, Any]]) -> None:
        """Commit the step record and the events that publish its calls in one
        transaction: a call is in the log only if its step's decision is durable, so no
        history can ever hold a call that recovery would not answer (G5, G7)."""
        durable = self._sink.durable
        await self._behind_appends(
            self._store.record_step(
                self.response_id,
                self.turn.fence,
                self._step,
                dumps(calls),
                events=[encode(e) for e in events] if durable else (),
            )
        )
        if not durable:
            self._sink.emit(events)

    async def _behind_appends(self, write: Coroutine[Any, Any, None]) -> None:
        """Queue `write` right behind the appends the sink has pending, without waiting
        for them first: the writer keeps order and the log refuses a gap, so both
        usually share one commit instead of waiting for two in a row (a memory sink has
        none: the write is awaited alone). A lost lease stops the turn (TurnStopped
        "lease_lost")."""
        if not self._sink.durable:  # nothing pending to share a commit with (MemorySink)
            with lease_held():
                await write
            return
        queued = asyncio.ensure_future(write)
        with lease_held():
            for result in await asyncio.gather(self._sink.flush(), queued, return_exceptions=True):
                if isinstance(result, BaseException):
                    raise result  # the appends' failure first: the write's follows from it

    async def _flush(self) -> None:
        """Wait for the sink's pending appends; a lost lease stops the turn."""
        with lease_held():
            await self._sink.flush()

    async def _save_snapshot(
        self,
        events: list[dict[str, Any]],
        *,
        status: ResponseStatus,
        last_seq: int,
        step: int | None = None,
        terminal: bool = False,
        conversation_items: Sequence[ItemRow] = (),
        discard: bool = False,
    ) -> None:
        """Commit the current response as a snapshot, with `events` when the response
        keeps a log, behind the sink's pending appends. With `discard` (the end of a
        `store: false` response), the response and all of its data are deleted in the
        same transaction instead."""
        durable = self._sink.durable
        snapshot = dumps(self._emitter.response)
        await self._behind_appends(
            self._store.save_snapshot(
                self.response_id,
                self.turn.fence,
                status=status,
                snapshot=snapshot,
                last_seq=last_seq,
                events=[encode(e) for e in events] if durable else (),
                step=step,
                terminal=terminal,
                conversation_items=conversation_items,
                logged=durable,
                discard=discard,
            )
        )
        if terminal:
            self.final_json = snapshot

    # -- the end ------------------------------------------------------------------------

    async def _finish(self, outcome: Outcome) -> None:
        emitter, sink = self._emitter, self._sink
        failed = outcome.status == ResponseStatus.FAILED
        # A stopped turn's partial text is its answer (interrupt); a failed one has none.
        # What closes the output commits with the terminal event, in one transaction.
        closing = self._closing + (
            emitter.drop_open() if failed else emitter.close_open("incomplete")
        )
        try:
            terminal = await self._save_end(outcome, closing)
        except TurnStopped:  # only a lost lease stops a terminal write (`lease_held`)
            return self._lost()
        except StoreError as exc:
            return await self._abandon(exc)
        fp.failpoint(fp.TERMINAL)
        if not sink.durable:
            sink.emit([*closing, terminal])
        self._resolve()

    async def _save_end(self, outcome: Outcome, closing: list[dict[str, Any]]) -> dict[str, Any]:
        """Save the turn's end: a cancel or steer recorded before it wins (G9), and an end
        that collides with what the store holds (a Conflict, permanent: it would collide
        again on every recovery) is saved as failed, keeping nothing in its conversation,
        unless a cancel or steer comes first again."""
        collided = False
        for _ in range(3):  # at most: the end, a stop's, a failure's after a collision
            try:
                return await self._save_terminal(outcome, closing)
            except StopRequested as request:
                outcome = stopped(request.kind)
                self._stop.steered |= request.kind == "steer"  # its steers to settle
            except Conflict as exc:
                if collided:
                    raise
                collided = True
                log.error("response %s: its end collided (%s)", self.response_id, exc)
                error = response_error("server_error", "The server could not save this response.")
                outcome = Outcome(ResponseStatus.FAILED, error=error)
        return await self._save_terminal(outcome, closing)

    async def _save_terminal(
        self, outcome: Outcome, closing: list[dict[str, Any]]
    ) -> dict[str, Any]:
        emitter = self._emitter
        seq = emitter.next_seq
        terminal = emitter.finish(
            outcome.status,
            error=outcome.error,
            incomplete_reason=outcome.incomplete_reason,
            usage=usage_object(self._usage) if self._usage else None,
        )
        keeps_history = outcome.status in (ResponseStatus.COMPLETED, ResponseStatus.INCOMPLETE)
        try:
            await self._save_snapshot(
                [*closing, terminal],
                status=outcome.status,
                last_seq=terminal["sequence_number"],
                terminal=True,
                conversation_items=self._conversation_items() if keeps_history else (),
                # store: false keeps the response only while it runs (protocol.md 3).
                discard=self._params.get("store") is False,
            )
        except StoreError:
            emitter.next_seq = seq  # nothing of this end was committed
            raise
        end = ResponseEnd.of(self._record, self._emitter.response, steps=self._step)
        self.turn.observer.response_finished(end)
        return terminal

    def _conversation_items(self) -> list[ItemRow]:
        if not self._record.conversation_id:
            return []
        ended_incomplete = self._emitter.response["status"] == ResponseStatus.INCOMPLETE
        output = history_items(self._emitter.output, ended_incomplete=ended_incomplete)
        items = [*self._params["input"], *output]
        return [ItemRow(item["id"], dumps(item)) for item in items]

    async def _abandon(self, error: StoreError) -> None:
        """The end could not be saved: leave the turn to the recovery scan, which resumes
        it from what was committed (nothing after that was ever sent, G7). The lease is
        left to expire rather than released: an expired lease's recovery is counted, so a
        turn whose end can never be saved ends `recovery_exhausted` instead of looping."""
        log.error("response %s: could not save its end (%s); leaving it", self.response_id, error)
        if not self._sink.durable:  # its client is waiting for an end
            self._sink.emit(
                [
                    self._emitter.finish(
                        ResponseStatus.FAILED,
                        error=response_error(
                            "server_error", "The server could not save this response."
                        ),
                    )
                ]
            )
        self._resolve()

    async def _pause(self) -> None:
        """Paused at a step boundary for a shutdown: once its events are committed, the
        turn may be handed over."""
        try:
            await self._flush()
        except TurnStopped:  # a lost lease: nothing to hand over
            return self._lost()
        self._hand_over()
        log.info("response %s: paused at a step boundary for shutdown", self.response_id)
        self._resolve()

    def _hand_over(self) -> None:
        """Let the drain release the lease, for another process to resume the turn at
        once, unless a body the turn started still runs (`Bodies`, _turn.py: a thread
        that nothing waits for any more): the lease is then left to expire, so that no
        other process takes the turn, and runs the call again or fails it closed, while
        the body may still act here (G3, G4, G8)."""
        if self.turn.bodies.running:
            log.warning(
                "response %s: a tool or step body it started still runs; its lease is left "
                "to expire rather than released",
                self.response_id,
            )
            return
        self.handed_over = True

    def _lost(self) -> None:
        """Stop without writing: another process owns the response and stores its end."""
        log.warning("response %s: lease lost, stopping without writing", self.response_id)
        self.lost = True
        self._sink.abandon()
        self._resolve()

    def _resolve(self) -> None:
        if not self.done.done():
            self.done.set_result(self._emitter.response)
