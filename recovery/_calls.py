"""The journal-call protocol (docs/guarantees.md G3, G4), one for server tool calls
(_tool_phase.py) and workflow steps (_workflow.py).

    no entry            claim it (`claimed`), start the body, wait for its end, finish
                        it (`completed` or `errored`, with its output)
    completed, errored  reuse the recorded output; the body never runs again (G3)
    claimed             ambiguous (G4): a call that is safe to repeat is reclaimed and
                        its body runs again with the same idempotency key; any other is
                        settled by its caller's rules or fails closed (ToolOutcomeUnknown)

Every write goes through the turn's fence, and a lost lease stops the turn
(`lease_held`). A body, once started, is never abandoned while it may still act (G3,
G8): a claim commits even if the turn is cancelled while it is written, and a body is
waited for even if the turn is cancelled meanwhile (`outlast`); the cancellation is
handed back, to be raised once the body's outcome is recorded.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from store import JournalEntry

from ._turn import Turn, lease_held

DONE = ("completed", "errored")  # journal states with an output: reused, never run again


def idempotency_key(response_id: str, call_id: str, step: int | None = None) -> str:
    """Stable for one logical call, whatever process runs it and however often. A model
    step's call is named by its step too (call ids may repeat across steps); a workflow
    step's call id is unique in its response (`step` None)."""
    name = call_id if step is None else f"{step}/{call_id}"
    digest = hashlib.sha256(f"{response_id}/{name}".encode()).hexdigest()
    return f"idem_{digest[:40]}"


class Calls:
    """The journal of one turn's calls at one step (workflow steps all use step 0: their
    call ids are unique in their response)."""

    def __init__(self, turn: Turn, step: int = 0) -> None:
        self._turn = turn
        self.step = step

    async def entries(self) -> dict[str, JournalEntry]:
        """This step's entries, by call id."""
        turn = self._turn
        return {e.call_id: e for e in await turn.store.journal(turn.response_id, self.step)}

    async def count_all(self) -> int:
        """How many calls the turn has journaled, at every step (what budgets count)."""
        return len(await self._turn.store.journal(self._turn.response_id))

    async def claim(
        self, call_id: str, tool: str, arguments: str, key: str
    ) -> asyncio.CancelledError | None:
        """Claim the call before its body starts. The claim is waited for even if the turn
        is cancelled meanwhile (a write handed to the store may commit all the same): its
        body then runs, rather than leave a claim that no body answers, which would fail
        closed (G4) a call that never ran. Returns that cancellation, for the caller to
        raise once the body's outcome is recorded."""
        claim = asyncio.ensure_future(self._write_entry(call_id, tool, arguments, key))
        _, interrupted = await outlast(claim, None)
        claim.result()  # the claim's own failure (a lost lease) stops here
        return interrupted

    async def refuse(self, call_id: str, tool: str, arguments: str, key: str, output: str) -> str:
        """Journal a call that will not run as `errored`, with `output` saying why."""
        await self._write_entry(call_id, tool, arguments, key, output)
        return output

    async def reclaim(self, call_id: str) -> None:
        """Count one more attempt of an ambiguous call that is safe to run again."""
        turn = self._turn
        with lease_held():
            await turn.store.reclaim_call(turn.response_id, turn.fence, call_id, step=self.step)

    async def finish(self, call_id: str, state: str, output: str) -> None:
        """Record a claimed call's outcome (`completed` or `errored`): it never runs again."""
        turn = self._turn
        with lease_held():
            await turn.store.finish_call(
                turn.response_id, turn.fence, call_id, state=state, output=output, step=self.step
            )

    async def _write_entry(
        self, call_id: str, tool: str, arguments: str, key: str, output: str | None = None
    ) -> None:
        turn = self._turn
        with lease_held():
            await turn.store.claim_call(
                turn.response_id,
                turn.fence,
                call_id=call_id,
                tool=tool,
                arguments=arguments,
                idempotency_key=key,
                step=self.step,
                state="claimed" if output is None else "errored",
                output=output,
            )


async def outlast(
    body: asyncio.Future[Any], limit: float | None
) -> tuple[bool, asyncio.CancelledError | None]:
    """Wait until `body` has ended (True) or `limit` seconds have passed (False). Cancelling the
    waiting task does not cut the wait short: a body that may still act is not abandoned.
    The cancellation is handed back, to be raised once the body's outcome is recorded."""
    loop = asyncio.get_running_loop()
    deadline = None if limit is None else loop.time() + limit
    interrupted: asyncio.CancelledError | None = None
    while not body.done():
        remaining = None if deadline is None else deadline - loop.time()
        if remaining is not None and remaining <= 0:
            break
        try:
            await asyncio.wait((body,), timeout=remaining)
        except asyncio.CancelledError as exc:
            interrupted = exc
    return body.done(), interrupted


def cut_from_outside(body: asyncio.Future[Any]) -> bool:
    """Whether a body that ended was cancelled from outside. Only the event loop closing
    cancels a body's task (a turn's cancellation never reaches it), so its outcome is
    unknown: its entry is left `claimed`, as a crash leaves it, for G4 to settle."""
    return body.cancelled() and isinstance(body, asyncio.Task) and body.cancelling() > 0
