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
        name = call["name"]
        tool = self.tools[name]
        key = idempotency_key(self._runner.response_id, call["call_id"])
        if entry is not None and entry.state in ("completed", "errored"):
            assert entry.output is not None
            self._observe("reused")
            return entry.output  # G3: a recorded output is reused, never re-run
        if entry is None and not allowed:
            self.over_budget = True
            output = f"Error: not run; this turn's budget of tool calls is spent ({name})."
            return await self._journal(call, key, output)
        try:
            arguments = tool.parse_arguments(call["arguments"])
        except ToolArgumentsError as exc:
            output = f"Error: invalid arguments for tool '{name}': {exc}"
            if entry is None:
                return await self._journal(call, key, output)
            return await self._record(call["call_id"], "errored", output)
        if entry is None:
            await self._journal(call, key)
            fp.failpoint(fp.TOOL_CLAIMED)
            return await self._run_body(tool, call, key, 1, arguments)
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
                self._observe("reconciled")
                return await self._record(call_id, "completed", tool_output(found))
        elif not tool.idempotent:
            self._observe("unknown")
            if self._settings.ambiguous_calls == "fail":
                raise ToolOutcomeUnknown(name, call_id, key, [])
            return await self._record(
                call_id,
                "errored",
                f"Error: the outcome of this call of '{name}' is unknown (idempotency key "
                f"{key}); the server stopped while it ran and did not run it again.",
            )
        await self._store.reclaim_call(self._runner.response_id, self._runner.fence, call_id)
        self._observe("rerun")
        return None

    async def _run_body(
        self, tool: Tool, call: Item, key: str, attempt: int, arguments: dict[str, Any]
    ) -> str:
        name = call["name"]
        try:
            async with asyncio.timeout(tool.timeout):
                value = await tool.invoke(self._context(call, key, attempt), arguments)
            state, output = "completed", tool_output(value)
        except TimeoutError:
            state, output = "errored", f"Error: tool '{name}' timed out after {tool.timeout}s."
        except Exception as exc:
            log.info("response %s: tool %s raised %r", self._runner.response_id, name, exc)
            state, output = "errored", f"Error: tool '{name}' failed: {type(exc).__name__}: {exc}"
        fp.failpoint(fp.TOOL_EFFECT)
        self._observe(state)
        return await self._record(call["call_id"], state, output)

    async def _journal(self, call: Item, key: str, output: str | None = None) -> str:
        """Write the call's journal entry: `claimed` before its body runs, or, with an
        `output`, `errored` for a call that will not run."""
        await self._store.claim_call(
            self._runner.response_id,
            self._runner.fence,
            call_id=call["call_id"],
            tool=call["name"],
            arguments=call["arguments"],
            idempotency_key=key,
            state="claimed" if output is None else "errored",
            output=output,
        )
        return output or ""

    def _observe(self, outcome: str) -> None:
        self._runner.runtime.observer.tool_call(outcome)

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
