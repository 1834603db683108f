"""The tool phase of a step: every server tool call goes through the journal.

    no entry            claim, run the body, record the output
    completed, errored  reuse the recorded output, never run again (G3)
    claimed             ambiguous (G4): an idempotent tool runs again with the same key;
                        a reconcilable tool's hook decides; any other fails the turn closed
                        (or, by setting, reports the unknown outcome to the model)

Calls of one step run concurrently, each journaled on its own. A stop request does not
interrupt a tool body: it finishes and its result is recorded (G9).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from store import JournalEntry

from . import _failpoints as fp
from ._ids import new_id
from ._tools import Tool, ToolArgumentsError, ToolContext, tool_output

if TYPE_CHECKING:
    from ._agent import Agent
    from ._runner import TurnRunner

log = logging.getLogger("recovery.tools")

Item = dict[str, Any]


class ToolOutcomeUnknown(Exception):
    """An ambiguous call of a tool that is neither idempotent nor reconcilable."""

    def __init__(self, tool: str, call_id: str, key: str, outputs: list[Item]) -> None:
        super().__init__(
            f"The outcome of tool '{tool}' (call_id '{call_id}', idempotency key '{key}') is "
            "unknown: the server stopped while it ran, and the tool is neither idempotent "
            "nor reconcilable, so it was not run again. Check whether its effect happened."
        )
        self.outputs = outputs


def idempotency_key(response_id: str, call_id: str) -> str:
    """Stable for one logical call, whatever process runs it and however often."""
    digest = hashlib.sha256(f"{response_id}/{call_id}".encode()).hexdigest()
    return f"idem_{digest[:40]}"


@dataclass(slots=True)
class _Result:
    output: str | None = None
    unknown: ToolOutcomeUnknown | None = None
    failure: BaseException | None = None


class ToolPhase:
    def __init__(self, runner: TurnRunner, agent: Agent) -> None:
        self._runner = runner
        self._store = runner.runtime.store
        self._settings = runner.runtime.settings
        self.tools: dict[str, Tool] = {t.name: t for t in agent.tools}
        self.over_budget = False

    async def run(self, calls: list[Item], max_tool_calls: int) -> list[Item]:
        """Run (or reuse) every server call of a step; return their output items in order."""
        runner = self._runner
        journal = {e.call_id: e for e in await self._store.journal(runner.response_id)}
        used = len(journal)
        allowed: dict[str, bool] = {}
        for call in calls:
            if call["call_id"] not in journal:
                allowed[call["call_id"]] = used < max_tool_calls
                used += 1
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
            raise
        except BaseException as exc:  # seen and re-raised by run() once every call ended
            result.failure = exc

    async def _call(self, call: Item, entry: JournalEntry | None, allowed: bool) -> str:
        runner, store = self._runner, self._store
        response_id, call_id, name = runner.response_id, call["call_id"], call["name"]
        tool = self.tools[name]
        key = idempotency_key(response_id, call_id)
        observe = runner.runtime.observer.tool_call
        if entry is not None and entry.state in ("completed", "errored"):
            assert entry.output is not None
            observe("reused")
            return entry.output  # G3: a recorded output is reused, never re-run

        async def record_without_running(output: str) -> str:
            await store.claim_call(
                response_id,
                runner.fence,
                call_id=call_id,
                tool=name,
                arguments=call["arguments"],
                idempotency_key=key,
                state="errored",
                output=output,
            )
            return output

        if entry is None and not allowed:
            self.over_budget = True
            return await record_without_running(
                f"Error: not run; this turn's budget of tool calls is spent ({name})."
            )
        try:
            arguments = tool.parse_arguments(call["arguments"])
        except ToolArgumentsError as exc:
            output = f"Error: invalid arguments for tool '{name}': {exc}"
            if entry is None:
                return await record_without_running(output)
            await store.finish_call(
                response_id, runner.fence, call_id, state="errored", output=output
            )
            return output

        attempt = 1
        if entry is None:
            await store.claim_call(
                response_id,
                runner.fence,
                call_id=call_id,
                tool=name,
                arguments=call["arguments"],
                idempotency_key=key,
            )
            fp.failpoint(fp.TOOL_CLAIMED)
        else:  # claimed before, no output: ambiguous (G4)
            attempt = entry.attempts + 1
            ctx = self._context(call, key, attempt)
            if tool.reconcile is not None:
                found = await tool.reconciled(ctx, arguments)
                if found is not None:
                    observe("reconciled")
                    return await self._record(call_id, "completed", tool_output(found))
            elif not tool.idempotent:
                observe("unknown")
                if self._settings.ambiguous_calls == "fail":
                    raise ToolOutcomeUnknown(name, call_id, key, [])
                return await self._record(
                    call_id,
                    "errored",
                    f"Error: the outcome of this call of '{name}' is unknown (idempotency key "
                    f"{key}); the server stopped while it ran and did not run it again.",
                )
            await store.reclaim_call(response_id, runner.fence, call_id)
            observe("rerun")
        ctx = self._context(call, key, attempt)
        try:
            async with asyncio.timeout(tool.timeout):
                value = await tool.invoke(ctx, arguments)
            state, output = "completed", tool_output(value)
        except TimeoutError:
            state, output = "errored", f"Error: tool '{name}' timed out after {tool.timeout}s."
        except Exception as exc:
            log.info("response %s: tool %s raised %r", response_id, name, exc)
            state, output = "errored", f"Error: tool '{name}' failed: {type(exc).__name__}: {exc}"
        fp.failpoint(fp.TOOL_EFFECT)
        observe(state)
        return await self._record(call_id, state, output)

    async def _record(self, call_id: str, state: str, output: str) -> str:
        runner = self._runner
        await self._store.finish_call(
            runner.response_id, runner.fence, call_id, state=state, output=output
        )
        fp.failpoint(fp.TOOL_RECORDED)
        return output

    def _context(self, call: Item, key: str, attempt: int) -> ToolContext:
        return ToolContext(
            response_id=self._runner.response_id,
            call_id=call["call_id"],
            tool_name=call["name"],
            idempotency_key=key,
            attempt=attempt,
            cancelled=self._runner.cancelled,
        )


def _output_item(call_id: str, output: str | None) -> Item:
    return {
        "type": "function_call_output",
        "id": new_id("fco"),
        "call_id": call_id,
        "output": output,
        "status": "completed",
    }
