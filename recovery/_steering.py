"""Steering over WebSocket (`response.steer`, docs/guarantees.md "Steering over WebSocket").

A steer is input a person sends while a response runs. It is committed before the client
is told it was accepted, and the same transaction asks the target to stop at its next
safe point (the `steer` stop: it ends `incomplete` / `steered`, or `completed` if it had
nothing left to do). Once the target has ended, its steers are *settled*, in one of
three ways:

- **applied**: a successor turn is created, with the target's settings, continuing it
  (`previous_response_id`, or the same conversation), holding the input of every steer
  still queued, in submission order; the successor and the steers' new state commit in
  one transaction, so a steer is applied once;
- **pending**: the target waits for client tool output; the input stays queued until
  the client's explicit continuation of the target, whose create takes it over in its
  own transaction (`take_pending`);
- **failed**: the target ended `failed` or `cancelled`; the input is handed back.

Whoever sees the end first settles it: the process that drove the target (at once), a
client waiting for the outcome, or the recovery scan (a process that died between the
end and the settling). Two settlers are decided by the store: the second finds the steers
settled and does nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from store import (
    Admission,
    ItemRow,
    NewSteer,
    ResponseRecord,
    StaleSteers,
    SteerNotAdded,
    SteerRecord,
    Store,
    StoreError,
)

from . import _failpoints as fp
from ._admission import new_turn
from ._errors import SteerRefused
from ._ids import new_id
from ._json import dumps
from ._response import unstored
from ._runs import Runs
from ._settings import RuntimeSettings
from ._status import ResponseStatus

log = logging.getLogger("recovery.steering")

Item = dict[str, Any]
SteerState = Literal["applied", "pending", "failed"]

# Request fields a successor does not inherit from its target: it has its own input and
# lane, and it is run by the server, in the background.
_NOT_INHERITED = ("input", "previous_response_id", "conversation", "stream", "background")


@dataclass(frozen=True)
class SteerAccepted:
    id: str
    previous_response_id: str


@dataclass(frozen=True)
class SteerOutcome:
    """What became of one accepted steer once its target ended."""

    steer_id: str
    previous_response_id: str
    state: SteerState
    input: list[Item]
    successor_id: str | None = None  # applied
    required_input: list[Item] = field(default_factory=list)  # pending: stubs to fill
    code: str | None = None  # failed
    message: str | None = None


def open_calls(output: list[Item]) -> list[Item]:
    """The function calls of an output that no output item answers: client tool calls
    the response waits for (a server tool's output always follows its call)."""
    answered = {o.get("call_id") for o in output if o.get("type") == "function_call_output"}
    return [o for o in output if o.get("type") == "function_call" and o["call_id"] not in answered]


def _stubs(calls: list[Item]) -> list[Item]:
    return [
        {"type": "function_call_output", "call_id": c["call_id"], "name": c.get("name", "")}
        for c in calls
    ]


class Steering:
    def __init__(self, store: Store, settings: RuntimeSettings, runs: Runs) -> None:
        self._store = store
        self._settings = settings
        self._runs = runs

    # -- accepting a steer ----------------------------------------------------------------

    async def steer(self, target_id: str, items: list[Item], *, tenant: str) -> SteerAccepted:
        """Commit a steer of `target_id` (the input items already validated and given
        ids), or raise SteerRefused. A running target is asked to stop at its next safe
        point; a target that waits for client tool output keeps the input pending."""
        for _ in range(3):  # the target may end between the read and the commit
            target = await self._store.get_response(target_id, tenant)
            if target is None or unstored(target.snapshot):
                raise SteerRefused(
                    "response_not_found", f"Response with id '{target_id}' not found."
                )
            state = self._steer_state(target)
            steer_id = new_id("steer")
            new = NewSteer(steer_id, tenant, target_id, dumps(items), state)
            try:
                await self._store.add_steer(new, max_waiting=self._settings.max_pending_steers)
            except SteerNotAdded as refusal:
                if refusal.reason in ("ended", "running"):
                    continue  # it ended (or was continued) meanwhile: decide again
                raise self._refused(target_id, refusal) from None
            fp.failpoint(fp.STEER_COMMITTED)
            if state == "queued":
                self._runs.stop(target_id, "steer")  # at once, if it is driven here
            return SteerAccepted(steer_id, target_id)
        raise SteerRefused(
            "response_not_active", f"Response '{target_id}' is changing state; try again."
        )

    def _steer_state(self, target: ResponseRecord) -> str:
        status = ResponseStatus(target.status)
        if not status.is_terminal:
            return "queued"
        snapshot = json.loads(target.snapshot)
        if status == ResponseStatus.COMPLETED and open_calls(snapshot["output"]):
            if target.conversation_id:
                raise SteerRefused(
                    "response_already_completed",
                    f"Response '{target.id}' waits for client tool output in a conversation;"
                    " send this input with the tool outputs in the conversation's next turn.",
                )
            return "pending"
        if status == ResponseStatus.COMPLETED:
            raise SteerRefused(
                "response_already_completed",
                f"Response '{target.id}' has already completed; continue it with a new"
                " response.create.",
            )
        raise SteerRefused(
            "response_not_active",
            f"Response '{target.id}' has ended ({target.status}) and accepts no steering.",
        )

    def _refused(self, target_id: str, refusal: SteerNotAdded) -> SteerRefused:
        if refusal.reason == "not_found":
            return SteerRefused("response_not_found", f"Response with id '{target_id}' not found.")
        if refusal.reason == "too_many":
            return SteerRefused(
                "too_many_pending_steers",
                f"Response '{target_id}' already has {self._settings.max_pending_steers}"
                " steers waiting, the most allowed.",
            )
        return SteerRefused(  # continued: a later turn already carries the tool outputs
            "response_already_completed",
            f"Response '{target_id}' has already been continued; steer the new response.",
        )

    # -- settling once the target has ended ----------------------------------------------

    async def settle(self, target_id: str, tenant: str) -> None:
        """Settle the queued steers of `target_id` if it has ended (module docstring).
        Idempotent; a store failure is left to the next caller or the recovery scan."""
        try:
            await self._settle(target_id, tenant)
        except StoreError as exc:
            log.warning("steers of %s not settled yet (%s); retried later", target_id, exc)

    async def _settle(self, target_id: str, tenant: str) -> None:
        # The target first: once it has ended no steer can join its queue (add_steer
        # refuses an ended target in the transaction that would add it), so the queue read
        # after this is all there will ever be, and one successor takes it whole.
        target = await self._store.get_response(target_id, tenant)
        if target is None or not ResponseStatus(target.status).is_terminal:
            return  # deleted (its steers went with it), or still running
        queued = [s for s in await self._store.steers_of(target_id) if s.state == "queued"]
        if not queued:
            return
        ids = [s.id for s in queued]
        status = ResponseStatus(target.status)
        output = json.loads(target.snapshot)["output"]
        if status in (ResponseStatus.COMPLETED, ResponseStatus.INCOMPLETE) and open_calls(output):
            if target.conversation_id:
                await self._store.settle_steers(
                    target_id,
                    ids,
                    state="failed",
                    error="The response ended waiting for client tool output in a"
                    " conversation; send this input with the tool outputs in the"
                    " conversation's next turn.",
                )
            else:
                await self._store.settle_steers(target_id, ids, state="pending")
            return
        if status not in (ResponseStatus.COMPLETED, ResponseStatus.INCOMPLETE):
            await self._store.settle_steers(
                target_id,
                ids,
                state="failed",
                error=f"The response ended {target.status} before this input could be"
                " applied; no successor was created.",
            )
            return
        fp.failpoint(fp.STEER_SETTLING)
        await self._create_successor(target, queued)

    async def _create_successor(self, target: ResponseRecord, steers: list[SteerRecord]) -> None:
        params = {k: v for k, v in json.loads(target.params).items() if k not in _NOT_INHERITED}
        params["input"] = [item for s in steers for item in json.loads(s.input)]
        params["background"] = True
        lane: str | None = None
        if target.conversation_id:
            params["conversation"] = lane = target.conversation_id
        else:
            params["previous_response_id"] = target.id
        new, events = new_turn(params, target.tenant, lane, self._runs.owner, self._settings)
        items = [ItemRow(item["id"], dumps(item)) for item in params["input"]]
        admission = Admission(steers=tuple(s.id for s in steers), steers_state="queued")
        try:
            _, _, claimed = await self._store.create_response(
                new, items, events, admission, (self._runs.owner, self._settings.lease_ttl)
            )
        except StaleSteers:
            return  # another process settled them first
        log.info("response %s: steered; successor %s", target.id, new.id)
        if claimed is not None:
            await self._runs.run_claimed(claimed)
        else:  # a conversation's lane with turns ahead of it: the lane starts it
            self._runs.spawn(self._runs.claim_and_run(new.id))

    async def settle_orphans(self) -> None:
        """Settle the steers of responses that ended without it (the recovery scan)."""
        for target_id, tenant in await self._store.unsettled_steers():
            await self.settle(target_id, tenant)

    # -- the client's continuation of a response that waited for client tool output ---

    async def take_pending(self, target_id: str, tenant: str) -> list[SteerRecord]:
        """The pending steers of `target_id`, in submission order, after settling its
        queued ones (a steer that arrived as it ended)."""
        await self._settle(target_id, tenant)
        return [s for s in await self._store.steers_of(target_id) if s.state == "pending"]

    # -- what became of a steer -----------------------------------------------------------

    async def outcomes(
        self, target_id: str, *, tenant: str, steer_ids: Sequence[str] | None = None
    ) -> list[SteerOutcome]:
        """Wait until the target has ended and these steers (default: all of its) are
        settled; their outcomes in submission order. A `pending` steer taken over by the
        client's continuation since reads as pending still."""
        delay = 0.01
        while True:
            steers = [
                s
                for s in await self._store.steers_of(target_id)
                if s.tenant == tenant and (steer_ids is None or s.id in steer_ids)
            ]
            if all(s.state != "queued" for s in steers):
                return await self._outcomes(target_id, tenant, steers, steer_ids)
            target = await self._store.get_response(target_id, tenant)
            if target is not None and ResponseStatus(target.status).is_terminal:
                await self.settle(target_id, tenant)
                if delay > 0.01:  # settling failed before (the store): not in a tight loop
                    await asyncio.sleep(delay)
            else:
                await asyncio.sleep(delay)
            delay = min(delay * 2, self._settings.poll_interval)

    async def _outcomes(
        self,
        target_id: str,
        tenant: str,
        steers: list[SteerRecord],
        asked: Sequence[str] | None,
    ) -> list[SteerOutcome]:
        required: list[Item] = []  # the client tool output the target waits for, if any
        if any(s.state != "failed" for s in steers):
            target = await self._store.get_response(target_id, tenant)
            if target is not None:
                required = _stubs(open_calls(json.loads(target.snapshot)["output"]))
        outcomes = []
        for s in steers:
            items = json.loads(s.input)
            if s.state == "failed":
                outcomes.append(
                    SteerOutcome(
                        s.id,
                        target_id,
                        "failed",
                        items,
                        code="successor_creation_failed",
                        message=s.error,
                    )
                )
            elif s.state == "pending" or (s.state == "applied" and required):
                # Applied to the client's own continuation: it was pending first.
                outcomes.append(
                    SteerOutcome(s.id, target_id, "pending", items, required_input=required)
                )
            else:
                outcomes.append(
                    SteerOutcome(s.id, target_id, "applied", items, successor_id=s.successor_id)
                )
        found = {s.id for s in steers}
        for steer_id in asked or ():
            if steer_id not in found:  # deleted with its response before it was applied
                outcomes.append(
                    SteerOutcome(
                        steer_id,
                        target_id,
                        "failed",
                        [],
                        code="response_not_found",
                        message=f"Response '{target_id}' was deleted before this input"
                        " was applied.",
                    )
                )
        return outcomes
