"""The tool phase of a step: every server tool call goes through the journal.

    no entry            claim, run the body, record the output
    completed, errored  reuse the recorded output, never run again (G3)
    claimed             ambiguous (G4): an idempotent tool runs again with the same key;
                        a reconcilable tool's hook decides; any other fails the turn closed
                        (or, by setting, reports the unknown outcome to the model)

The journal's protocol (claims, outcomes, waiting out a body) is _calls.py's, shared with
workflow steps; this module adds a tool's rules: budgets, stops, arguments, timeouts and
the reconcile hook. A call is named by its step and its call id: upstreams may repeat
call ids across steps. Calls of one step run concurrently, each journaled on its own.

A body, once started, is never abandoned while it may still act (G3, G8). A stop request
does not interrupt it (G9), and neither does cancelling the turn (a graceful shutdown past
its grace period): the phase waits for the body's end and records its outcome, and only
then lets the cancellation through, so this process holds the lease until then. A plain
(`def`) tool's thread that outlives its timeout may still take effect: its outcome is
unknown, not failed: it is settled at once as an ambiguous call whose body can be
neither stopped nor run again (`_overran`); while it runs, a shutdown does not hand the
turn over (`Bodies`, _turn.py: its lease is left to expire). A CancelledError the body
raises by itself (not the turn's cancellation, which never reaches a body) is the
tool's failure, recorded `errored` like any other.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import dataclass
from typing import Any

from store import JournalEntry

from . import _failpoints as fp
from ._agent import Agent
from ._calls import DONE, Calls, cut_from_outside, idempotency_key, outlast
from ._errors import ToolArgumentsError, ToolOutcomeUnknown, ToolTimedOut
from ._ids import new_id
from ._tools import Tool, ToolContext, tool_output
from ._turn import Turn

log = logging.getLogger("recovery.tools")

Item = dict[str, Any]


@dataclass(slots=True)
class _Result:
    output: str | None = None
    unknown: ToolOutcomeUnknown | None = None
    failure: BaseException | None = None


class ToolPhase:
    def __init__(self, turn: Turn, agent: Agent) -> None:
        self._turn = turn
        self._rid = turn.response_id
        self.tools: dict[str, Tool] = {t.name: t for t in agent.tools}
        self.over_budget = False
        self._calls = Calls(turn)  # the journal of the step being run
        self._step = 0

    async def run(self, calls: list[Item], max_tool_calls: int, *, step: int) -> list[Item]:
        """Run (or reuse) every server call of `step`; return their output items in order."""
        self._step = step
        self._calls = Calls(self._turn, step)
        journal = await self._calls.entries()
        new = [call["call_id"] for call in calls if call["call_id"] not in journal]
        used = await self._calls.count_all() if new else 0
        allowed = {call_id: used + i < max_tool_calls for i, call_id in enumerate(new)}
        results: dict[str, _Result] = {}
        async with asyncio.TaskGroup() as tg:
            for call in calls:
                result = results[call["call_id"]] = _Result()
                entry = journal.get(call["call_id"])
                tg.create_task(self._one(call, entry, allowed.get(call["call_id"], True), result))
        for result in results.values():
            if result.failure is not None:
                raise result.failure
        outputs = [
            _output_item(call["call_id"], results[call["call_id"]].output)
            for call in calls
            if results[call["call_id"]].output is not None
        ]
        for result in results.values():
            if result.unknown is not None:
                result.unknown.outputs = outputs
                raise result.unknown
        return outputs

    async def _one(
        self, call: Item, entry: JournalEntry | None, allowed: bool, result: _Result
    ) -> None:
        try:
            result.output = await self._call(call, entry, allowed)
        except ToolOutcomeUnknown as unknown:
            result.unknown = unknown
        except asyncio.CancelledError:
            if _cancelling():
                raise  # the turn's own cancellation
            # Raised from inside, asked of nobody: the task group would drop this call
            # and the checkpoint commit the step without its output (G5). Fail instead.
            result.failure = RuntimeError(
                f"the call {call['call_id']} of tool '{call['name']}' was cancelled from "
                "inside the tool phase"
            )
        except BaseException as exc:  # seen and re-raised by run() once every call ended
            result.failure = exc

    async def _call(self, call: Item, entry: JournalEntry | None, allowed: bool) -> str:
        name, call_id = call["name"], call["call_id"]
        tool = self.tools[name]
        if entry is not None and entry.state in DONE:
            assert entry.output is not None
            self._observe("reused", call)
            return entry.output  # G3: a recorded output is reused, never re-run
        if entry is not None:
            key = entry.idempotency_key  # the key its first attempt was given
        else:
            key = idempotency_key(self._rid, call_id, self._step)
        if entry is None and not allowed:
            self.over_budget = True
            output = f"Error: not run; this turn's budget of tool calls is spent ({name})."
            return await self._refuse(call, key, output)
        if entry is None and self._turn.stop.requested:
            # Cancelled or steered before this call started: only a body already running
            # may finish (G9); this one is answered without running, keeping pairing (G5).
            output = f"Error: not run; the turn was stopped before this call of '{name}' started."
            return await self._refuse(call, key, output)
        try:
            arguments = tool.parse_arguments(call["arguments"])
        except ToolArgumentsError as exc:
            output = f"Error: invalid arguments for tool '{name}': {exc}"
            if entry is None:
                return await self._refuse(call, key, output)
            return await self._record(call_id, "errored", output)
        if entry is None:
            interrupted = await self._calls.claim(call_id, name, call["arguments"], key)
            fp.failpoint(fp.TOOL_CLAIMED)
            output = await self._run_body(tool, call, key, 1, arguments)
            if interrupted is not None:
                raise interrupted
            return output
        settled = await self._settle_ambiguous(tool, call, key, entry, arguments)
        if settled is not None:
            return settled
        return await self._run_body(tool, call, key, entry.attempts + 1, arguments)

    async def _settle_ambiguous(
        self, tool: Tool, call: Item, key: str, entry: JournalEntry, arguments: dict[str, Any]
    ) -> str | None:
        """A call claimed before with no output (G4): its recorded outcome, or None when
        it is safe to run the body again."""
        call_id, name = call["call_id"], call["name"]
        if tool.reconcile is not None:
            ctx = self._context(call, key, entry.attempts + 1)
            found = await tool.reconciled(ctx, arguments)
            if found is not None:
                self._observe("reconciled", call)
                return await self._record(call_id, "completed", tool_output(found))
        elif not tool.idempotent:
            self._observe("unknown", call)
            if self._turn.settings.ambiguous_calls == "fail":
                raise ToolOutcomeUnknown(name, call_id, key, [])
            return await self._record(
                call_id,
                "errored",
                f"Error: the outcome of this call of '{name}' is unknown (idempotency key "
                f"{key}); the server stopped while it ran and did not run it again.",
            )
        await self._calls.reclaim(call_id)
        self._observe("rerun", call)
        return None

    async def _run_body(
        self, tool: Tool, call: Item, key: str, attempt: int, arguments: dict[str, Any]
    ) -> str:
        """Run the body and record its outcome, waiting for its end even if the turn is
        cancelled meanwhile (the cancellation is raised once the outcome is recorded)."""
        started = time.monotonic()
        body = tool.start(self._context(call, key, attempt), arguments)
        self._turn.bodies.add(body)  # a thread let go at its timeout keeps the lease
        ended, interrupted = await outlast(body, tool.timeout if tool.in_thread else None)
        if ended:
            outcome = self._outcome(tool, call, body)
            if outcome is None:  # cut from outside: ambiguous, left `claimed` for G4
                raise interrupted or asyncio.CancelledError()
            state, output = outcome
            self._observe(state, call, time.monotonic() - started)
        else:
            body.add_done_callback(functools.partial(_log_late_end, self._rid, call))
            settled = await self._overran(tool, call, key, attempt, arguments)
            if isinstance(settled, ToolOutcomeUnknown):
                # Left `claimed`, as a crash leaves it: whoever finds it fails closed too.
                raise interrupted or settled
            state, output = settled
        fp.failpoint(fp.TOOL_EFFECT)
        await self._record(call["call_id"], state, output)
        if interrupted is not None:
            raise interrupted
        return output

    def _outcome(self, tool: Tool, call: Item, body: asyncio.Future[Any]) -> tuple[str, str] | None:
        """(state, output) of a body that ended; None if it was cut from outside."""
        name = call["name"]
        if cut_from_outside(body):
            return None
        if body.cancelled():
            # The body raised CancelledError by itself, e.g. from an inner awaitable that
            # someone else cancelled (a client library closing a shared connection): not
            # the turn's cancellation, which never reaches a body. The tool failed.
            try:
                body.result()
            except asyncio.CancelledError as cancelled:
                detail = str(cancelled)
            log.info("response %s: tool %s was cancelled from inside", self._rid, name)
            return "errored", f"Error: tool '{name}' failed: CancelledError: {detail}"
        exc = body.exception()
        if exc is None:
            return "completed", tool_output(body.result())
        if isinstance(exc, ToolTimedOut):  # an async body, cancelled at its timeout: ended
            return "errored", f"Error: tool '{name}' timed out after {tool.timeout}s."
        if not isinstance(exc, Exception):
            raise exc  # a control-flow signal, not a tool's failure
        # The exception's type only: its message may carry the call's arguments, which
        # come from user input; it is logged at debug level (README, Tools).
        log.info(
            "response %s: tool %s (call %s) raised %s",
            self._rid,
            name,
            call["call_id"],
            type(exc).__name__,
        )
        _debug_tool_error(self._rid, call, exc)
        return "errored", f"Error: tool '{name}' failed: {type(exc).__name__}: {exc}"

    async def _overran(
        self, tool: Tool, call: Item, key: str, attempt: int, arguments: dict[str, Any]
    ) -> tuple[str, str] | ToolOutcomeUnknown:
        """A plain tool's thread still running at its timeout may yet take effect: the
        call is ambiguous (G4), and its body can no more be run again than stopped.
        A reconcilable tool's hook is asked: an effect it finds is the call's result,
        while "none yet" is not final, so neither it nor the body is tried again. Then,
        as G4 says, a tool that is neither idempotent nor reconcilable fails the turn
        closed (`tool_outcome_unknown`; its entry stays `claimed`, as after a crash)
        unless `ambiguous_calls` is `report`; every other case tells the model the
        outcome is unknown, and that is recorded so that no process runs it again."""
        name, call_id = call["name"], call["call_id"]
        log.warning(
            "response %s: tool %s (call %s, idempotency key %s) is still running after its "
            "timeout of %ss; its outcome is unknown",
            self._rid,
            name,
            call_id,
            key,
            tool.timeout,
        )
        if tool.reconcile is not None:
            found = await tool.reconciled(self._context(call, key, attempt), arguments)
            if found is not None:
                self._observe("reconciled", call)
                return "completed", tool_output(found)
        self._observe("unknown", call)
        why = (
            f"it was still running when its timeout of {tool.timeout}s passed and may still "
            "take effect, so it was not run again."
        )
        plain = not tool.idempotent and tool.reconcile is None
        if plain and self._turn.settings.ambiguous_calls == "fail":
            return ToolOutcomeUnknown(name, call_id, key, [], why=why)
        return (
            "errored",
            f"Error: the outcome of this call of '{name}' is unknown (idempotency key {key}): "
            f"{why}",
        )

    async def _refuse(self, call: Item, key: str, output: str) -> str:
        """Journal a call that will not run, `errored` with `output`."""
        return await self._calls.refuse(
            call["call_id"], call["name"], call["arguments"], key, output
        )

    async def _record(self, call_id: str, state: str, output: str) -> str:
        await self._calls.finish(call_id, state, output)
        fp.failpoint(fp.TOOL_RECORDED)
        return output

    def _observe(self, outcome: str, call: Item, seconds: float | None = None) -> None:
        self._turn.observer.tool_call(outcome, call["name"], seconds)

    def _context(self, call: Item, key: str, attempt: int) -> ToolContext:
        return ToolContext(
            response_id=self._rid,
            call_id=call["call_id"],
            tool_name=call["name"],
            idempotency_key=key,
            attempt=attempt,
            cancelled=self._turn.stop.cancelled,
        )


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _log_late_end(response_id: str, call: Item, body: asyncio.Future[Any]) -> None:
    """A thread that outlived its timeout ended: say how, for whoever checks the call's
    unknown outcome (this also retrieves its exception, so none goes unreported)."""
    error = None if body.cancelled() else body.exception()
    log.warning(
        "response %s: tool %s (call %s) ended after its timeout (%s); its outcome was "
        "recorded as unknown",
        response_id,
        call["name"],
        call["call_id"],
        "returned" if error is None else f"raised {type(error).__name__}",
    )
    if error is not None:
        _debug_tool_error(response_id, call, error)


def _debug_tool_error(response_id: str, call: Item, error: BaseException) -> None:
    """A tool's exception with its message and traceback, at debug level only."""
    log.debug(
        "response %s: tool %s (call %s) raised: %s",
        response_id,
        call["name"],
        call["call_id"],
        error,
        exc_info=error,
    )


def _output_item(call_id: str, output: str | None) -> Item:
    return {
        "type": "function_call_output",
        "id": new_id("fco"),
        "call_id": call_id,
        "output": output,
        "status": "completed",
    }
