"""The turn runner: the step loop that drives one response to a terminal status.

One runner per running response, owned by the runtime's task group. It writes only
through its fence (owner, epoch). A stop request (cancel) cuts a model stream at once
and ends the turn at that safe point; a lost lease ends it without writing anything.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from store import Fence, ItemRow, LeaseLost, ResponseRecord

from ._agent import Agent
from ._emitter import Emitter
from ._errors import ModelError, TurnStopped
from ._history import history_items
from ._model import (
    FunctionCallDelta,
    Incomplete,
    Model,
    ModelRequest,
    TextDelta,
    Usage,
)
from ._response import add_usage, usage_from_object, usage_object
from ._sinks import Sink, encode
from ._status import ResponseStatus

if TYPE_CHECKING:
    from ._runtime import Runtime

log = logging.getLogger("recovery.runner")


@dataclass(frozen=True, slots=True)
class Outcome:
    status: ResponseStatus
    error: dict[str, Any] | None = None
    incomplete_reason: str | None = None


class TurnRunner:
    def __init__(
        self,
        *,
        runtime: Runtime,
        agent: Agent,
        model: Model,
        record: ResponseRecord,
        fence: Fence,
        sink: Sink,
    ) -> None:
        self._runtime = runtime
        self._store = runtime.store
        self._agent = agent
        self._model = model
        self._record = record
        self._fence = fence
        self._sink = sink
        self._params: dict[str, Any] = json.loads(record.params)
        self._emitter = Emitter(json.loads(record.snapshot), record.last_seq + 1)
        self._usage: Usage | None = usage_from_object(self._emitter.response.get("usage"))
        self._stop_reason: str | None = None
        self._model_task: asyncio.Task[Incomplete | None] | None = None
        self.done: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    @property
    def response_id(self) -> str:
        return self._record.id

    def request_stop(self, reason: str) -> None:
        """Stop at the next safe point; a model stream in flight is cut at once."""
        if self._stop_reason is None:
            self._stop_reason = reason
        if self._model_task is not None:
            self._model_task.cancel()

    # -- the loop -----------------------------------------------------------------------

    async def run(self) -> None:
        try:
            outcome = await self._run_steps()
            await self._finish(outcome)
        except TurnStopped as stop:
            if stop.reason == "lease_lost":
                log.warning("response %s: lease lost, stopping without writing", self.response_id)
                self._resolve()
                return
            await self._finish(Outcome(ResponseStatus.CANCELLED), close_status="incomplete")
        except LeaseLost:
            log.warning("response %s: lease lost, stopping without writing", self.response_id)
            self._resolve()
        except ModelError as exc:
            await self._finish(
                Outcome(ResponseStatus.FAILED, error={"code": exc.code, "message": exc.message}),
                close_status="incomplete",
            )
        except asyncio.CancelledError:
            self._resolve()
            raise
        except Exception:
            log.exception("response %s: the turn failed", self.response_id)
            await self._finish(
                Outcome(
                    ResponseStatus.FAILED,
                    error={
                        "code": "server_error",
                        "message": "The server failed to run this turn.",
                    },
                ),
                close_status="incomplete",
            )

    async def _run_steps(self) -> Outcome:
        emitter = self._emitter
        if emitter.response["status"] == ResponseStatus.QUEUED:
            emitter.set_status(ResponseStatus.IN_PROGRESS)
        if self._record.last_seq < 0:  # foreground: nothing was emitted at create
            self._sink.emit([emitter.lifecycle("response.created")])
        self._sink.emit([emitter.lifecycle("response.in_progress")])
        history = await self._history()
        self._check_stop()
        request = self._model_request(history + history_items(emitter.output))
        incomplete = await self._step(request)
        self._check_stop()
        if incomplete is not None:
            return Outcome(ResponseStatus.INCOMPLETE, incomplete_reason=incomplete.reason)
        return Outcome(ResponseStatus.COMPLETED)

    async def _step(self, request: ModelRequest) -> Incomplete | None:
        """Stream one model call into events; the stream is cut if a stop is requested."""
        async with asyncio.TaskGroup() as tg:
            self._model_task = tg.create_task(self._consume(request))
        task, self._model_task = self._model_task, None
        if task.cancelled():
            raise TurnStopped(self._stop_reason or "cancelled")
        return task.result()

    async def _consume(self, request: ModelRequest) -> Incomplete | None:
        emitter, sink = self._emitter, self._sink
        incomplete: Incomplete | None = None
        async for event in self._model.stream(request):
            if isinstance(event, TextDelta):
                sink.emit(emitter.text_delta(event))
            elif isinstance(event, FunctionCallDelta):
                sink.emit(emitter.function_call_delta(event))
            elif isinstance(event, Usage):
                self._usage = add_usage(self._usage, event)
            else:
                incomplete = event
        sink.emit(emitter.close_open())
        return incomplete

    def _check_stop(self) -> None:
        if self._stop_reason is not None:
            raise TurnStopped(self._stop_reason)

    # -- history ------------------------------------------------------------------------

    async def _history(self) -> list[dict[str, Any]]:
        record = self._record
        history = await self._runtime.history(
            tenant=record.tenant,
            previous_response_id=record.previous_response_id,
            conversation_id=record.conversation_id,
            conversation_upto=record.conversation_upto,
        )
        own: list[dict[str, Any]] = self._params["input"]
        return history + own

    def _model_request(self, items: list[dict[str, Any]]) -> ModelRequest:
        params = self._params
        return ModelRequest(
            model=params.get("model") or self._model.name,
            instructions=params.get("instructions") or self._agent.instructions,
            input=items,
            tools=[t for t in params.get("tools") or [] if t.get("type") == "function"],
            tool_choice=params.get("tool_choice") or "auto",
            parallel_tool_calls=params.get("parallel_tool_calls", True) is not False,
            temperature=params.get("temperature"),
            top_p=params.get("top_p"),
            max_output_tokens=params.get("max_output_tokens"),
        )

    # -- the end ------------------------------------------------------------------------

    async def _finish(self, outcome: Outcome, *, close_status: str = "completed") -> None:
        emitter, sink = self._emitter, self._sink
        sink.emit(emitter.close_open(close_status))
        terminal = emitter.finish(
            outcome.status,
            error=outcome.error,
            incomplete_reason=outcome.incomplete_reason,
            usage=usage_object(self._usage) if self._usage else None,
        )
        keeps_history = outcome.status in (ResponseStatus.COMPLETED, ResponseStatus.INCOMPLETE)
        try:
            await sink.flush()
            await self._store.save_snapshot(
                self.response_id,
                self._fence,
                status=outcome.status,
                snapshot=json.dumps(emitter.response, separators=(",", ":"), ensure_ascii=False),
                last_seq=terminal["sequence_number"],
                events=[encode(terminal)] if sink.durable else (),
                terminal=True,
                conversation_items=self._conversation_items() if keeps_history else (),
            )
        except LeaseLost:
            log.warning("response %s: lease lost before the end was written", self.response_id)
            self._resolve()
            return
        if not sink.durable:
            sink.emit([terminal])
        self._resolve()

    def _conversation_items(self) -> list[ItemRow]:
        if not self._record.conversation_id:
            return []
        items = [*self._params["input"], *history_items(self._emitter.output)]
        return [ItemRow(item["id"], json.dumps(item, separators=(",", ":"))) for item in items]

    def _resolve(self) -> None:
        if not self.done.done():
            self.done.set_result(self._emitter.response)
