"""How a request is admitted: a new turn is checked against its history, its lane and the
server's tools, then committed in one transaction before the create answers (G2), and
started. A retried create (the same Idempotency-Key) returns the first response (G11).

The store's admission errors are translated here into the runtime's own: LaneBusy into
LaneLocked, TooManyQueued into QueueFull, IdempotencyMismatch into InvalidRequest, and a
store that cannot be written into Unavailable.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from store import (
    Admission,
    EventRow,
    IdempotencyMismatch,
    ItemRow,
    LaneBusy,
    NewResponse,
    ResponseRecord,
    StaleSteers,
    SteerRecord,
    Store,
    StoreUnavailable,
    StoreVanished,
    TooManyQueued,
)

from . import _failpoints as fp
from ._agent import Agent
from ._compaction import check_compaction_items, takes_compaction_items
from ._errors import InvalidRequest, LaneLocked, NotFound, QueueFull, Unavailable
from ._history import check_input
from ._ids import new_id
from ._json import dumps
from ._observer import current_response_id
from ._references import resolve_references
from ._response import new_response, unstored
from ._roster import Roster
from ._runs import Runs
from ._settings import RuntimeSettings
from ._sinks import encode_lifecycle
from ._status import ResponseStatus
from ._workflow import Workflow

PendingSteers = Callable[[str, str], Awaitable[list[SteerRecord]]]  # (response id, tenant)


class Admissions:
    def __init__(
        self,
        store: Store,
        roster: Roster,
        settings: RuntimeSettings,
        runs: Runs,
    ) -> None:
        self._store = store
        self._roster = roster
        self._settings = settings
        self._runs = runs
        # The pending steers of a response, taken over by its explicit continuation
        # (_steering.py `take_pending`; set by the runtime).
        self.pending_steers: PendingSteers | None = None

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
        if self._runs.draining:
            raise Unavailable("The server is shutting down; send the request again.")
        agent = self._roster.choose(params.get("model"))  # before anything is stored
        if idempotency_key is not None:
            existing = await self._idempotent(tenant, idempotency_key, request_hash)
            if existing is not None:
                return existing, False
        strategy = params.pop("multitask_strategy", None) or self._settings.multitask_strategy
        lane, busy = await self._lane(params, tenant)
        given = await resolve_references(self._store, params["input"], tenant=tenant)
        for attempt in range(3):
            # A pending steer added while this one commits makes it StaleSteers: again.
            params["input"] = given
            steers = await self._pending_steers(params, tenant, busy)
            # A busy lane's running turn may still answer its calls: the check that no call
            # is left unanswered is made again when this turn starts (load_history).
            history = await check_input(
                self._store,
                params["input"],
                tenant=tenant,
                previous_response_id=params.get("previous_response_id"),
                conversation_id=params.get("conversation"),
                allow_pending=busy,
                # A rolled-back turn leaves nothing in the conversation to answer.
                after_running=busy and strategy != "rollback",
            )
            self._check_against(agent, history, params)
            new, events = new_turn(params, tenant, lane, self._runs.owner, self._settings)
            admission = Admission(
                reject_if_busy=strategy == "reject",
                steer=strategy if strategy in ("interrupt", "rollback") else None,
                max_queued=self._settings.max_queued,
                max_queued_tenant=self._settings.max_queued_per_tenant,
                idempotency_key=idempotency_key,
                request_hash=request_hash,
                steers=tuple(steer.id for steer in steers),
                steers_state="pending",
            )
            items = [ItemRow(item["id"], dumps(item)) for item in params["input"]]
            claim_for = (self._runs.owner, self._settings.lease_ttl) if new.background else None
            try:
                record, created, claimed = await self._commit(
                    new, items, events, admission, claim_for
                )
                break
            except StaleSteers:
                if attempt == 2:
                    raise Unavailable(
                        "Steering input for this response kept arriving while it was being"
                        " continued; send the request again."
                    ) from None
        current_response_id.set(record.id)
        if created:
            fp.failpoint(fp.ACCEPTED)
            if claimed is not None:  # claimed in the create transaction: run it now
                await self._runs.run_claimed(claimed)
            elif new.background:
                self._runs.spawn(self._runs.claim_and_run(record.id))
            if admission.steer is not None and lane is not None:  # a lane it shares
                self._runs.steer(lane, admission.steer)
        return record, created

    async def check(
        self, params: dict[str, Any], *, tenant: str
    ) -> tuple[Agent | Workflow, list[dict[str, Any]], list[dict[str, Any]]]:
        """Refuse what a create with `params` (validated, input normalized) would refuse,
        with the same errors, storing nothing; return its agent, the history it would
        continue and its input with references resolved. A busy lane's running turn may
        still answer its calls, as for a create queued behind it (`multitask_strategy`
        at its default, which a count cannot name)."""
        agent = self._roster.choose(params.get("model"))
        _, busy = await self._lane(params, tenant)
        given = await resolve_references(self._store, params["input"], tenant=tenant)
        history = await check_input(
            self._store,
            given,
            tenant=tenant,
            previous_response_id=params.get("previous_response_id"),
            conversation_id=params.get("conversation"),
            allow_pending=busy,
            after_running=busy and self._settings.multitask_strategy != "rollback",
        )
        checked = {**params, "input": given}
        self._check_against(agent, history, checked)
        return agent, history, given

    def _check_against(
        self, agent: Agent | Workflow, history: list[dict[str, Any]], params: dict[str, Any]
    ) -> None:
        """Refuse, for a create and a count alike, a compaction item another server made
        that this turn's model cannot read (_compaction.py), in its input or in the
        history it continues; a declared tool the server provides; a `tool_choice` naming
        a tool the turn does not have."""
        check_compaction_items(
            history,
            params["input"],
            reads_foreign=takes_compaction_items(self._roster.model_of(agent)),
            history_param="conversation" if params.get("conversation") else "previous_response_id",
        )
        _check_declared_tools(agent, params)
        check_tool_choice(agent, params)

    async def _commit(
        self,
        new: NewResponse,
        items: list[ItemRow],
        events: list[EventRow],
        admission: Admission,
        claim_for: tuple[str, float] | None,
    ) -> tuple[ResponseRecord, bool, ResponseRecord | None]:
        """The create transaction, its refusals as the runtime's errors (StaleSteers goes
        through: the caller tries again)."""
        try:
            return await self._store.create_response(new, items, events, admission, claim_for)
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
            raise _key_reused(admission.idempotency_key) from None
        except StoreUnavailable as exc:
            raise Unavailable(_unwritable(exc)) from exc

    async def _pending_steers(
        self, params: dict[str, Any], tenant: str, busy: bool
    ) -> list[SteerRecord]:
        """The steers that waited for this continuation of a response that asked for
        client tool output: their input joins this turn's, after the tool outputs that
        lead it (so every call stays next to its output, G5), in submission order."""
        previous_id = params.get("previous_response_id")
        if not previous_id or busy or self.pending_steers is None:
            return []
        steers = await self.pending_steers(previous_id, tenant)
        if steers:
            given: list[dict[str, Any]] = params["input"]
            lead = 0
            while lead < len(given) and given[lead].get("type") == "function_call_output":
                lead += 1
            queued = [item for steer in steers for item in json.loads(steer.input)]
            params["input"] = [*given[:lead], *queued, *given[lead:]]
        return steers

    async def _idempotent(
        self, tenant: str, key: str, request_hash: str | None
    ) -> ResponseRecord | None:
        found = await self._store.idempotency_key(tenant, key)
        if found is None:
            return None
        stored_hash, response_id = found
        if stored_hash != request_hash:
            raise _key_reused(key)
        return await self._store.get_response(response_id, tenant)

    async def _lane(self, params: dict[str, Any], tenant: str) -> tuple[str | None, bool]:
        """The lane a new turn joins (None: a lane of its own) and whether it is busy."""
        previous_id: str | None = params.get("previous_response_id")
        conversation_id: str | None = params.get("conversation")
        if previous_id:
            previous = await self._store.get_response(previous_id, tenant)
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
            if await self._store.get_conversation(conversation_id, tenant) is None:
                raise NotFound(f"Conversation with id '{conversation_id}' not found.")
            return conversation_id, await self._store.lane_busy(conversation_id)
        return None, False


def new_turn(
    params: dict[str, Any],
    tenant: str,
    lane: str | None,
    owner: str,
    settings: RuntimeSettings,
) -> tuple[NewResponse, list[EventRow]]:
    """The rows of a new turn: its response (queued if background, else in progress and
    held by `owner`) and, for a background one, its first events."""
    response_id = new_id("resp")
    created_at = time.time()
    background = bool(params.get("background"))
    status = ResponseStatus.QUEUED if background else ResponseStatus.IN_PROGRESS
    snapshot = dumps(new_response(response_id, created_at, status, params))
    events: list[EventRow] = []
    if background:  # the events carry the response as created: its snapshot's text
        events = [
            encode_lifecycle("response.created", 0, snapshot),
            encode_lifecycle("response.queued", 1, snapshot),
        ]
    new = NewResponse(
        id=response_id,
        tenant=tenant,
        status=status,
        background=background,
        created_at=created_at,
        params=dumps(params),
        snapshot=snapshot,
        last_seq=len(events) - 1,
        lane=lane or response_id,
        conversation_id=params.get("conversation"),
        conversation_upto=None,
        previous_response_id=params.get("previous_response_id"),
        owner=None if background else owner,
        lease_expires_at=None if background else created_at + settings.lease_ttl,
    )
    return new, events


def _check_declared_tools(agent: Agent | Workflow, params: dict[str, Any]) -> None:
    server_tools = {t.name for t in agent.tools} if isinstance(agent, Agent) else set()
    for index, declared in enumerate(params.get("tools") or []):
        if declared.get("name") in server_tools:
            raise InvalidRequest(
                f"Tool '{declared['name']}' is provided by the server; do not declare it "
                "in 'tools'.",
                param=f"tools[{index}].name",
                code="invalid_value",
            )


def check_tool_choice(agent: Agent | Workflow, params: dict[str, Any]) -> None:
    """A `tool_choice` that names or needs tools names tools this turn has: declared in
    `tools`, or the agent's own. Sent on, it would be dropped (no tools: none to require)
    or refused by the model only once the turn runs."""
    choice = params.get("tool_choice")
    own = {t.name for t in agent.tools} if isinstance(agent, Agent) else set()
    names = {t["name"] for t in params.get("tools") or []} | own
    named = choice.get("name") if isinstance(choice, dict) else None
    if isinstance(choice, dict) and choice.get("type") == "function" and named not in names:
        raise InvalidRequest(
            f"Tool choice '{named}' is neither declared in 'tools' nor one of the server's tools.",
            param="tool_choice",
            code="invalid_value",
        )
    if not isinstance(agent, Agent):
        return  # a workflow calls no model
    if choice == "required" and not names:
        raise InvalidRequest(
            "Tool choice 'required' needs a tool to call; declare one in 'tools'.",
            param="tool_choice",
            code="invalid_value",
        )
    if not isinstance(choice, dict) or choice.get("type") != "allowed_tools":
        return
    for index, entry in enumerate(choice["tools"]):
        if not isinstance(entry, dict) or entry.get("type") != "function":
            raise InvalidRequest(
                "Only function tools can be listed in 'allowed_tools' here.",
                param=f"tool_choice.tools[{index}]",
                code="invalid_value",
            )
        if entry.get("name") not in names:
            raise InvalidRequest(
                f"Allowed tool '{entry.get('name')}' is neither declared in 'tools' nor one "
                "of the server's tools.",
                param=f"tool_choice.tools[{index}].name",
                code="invalid_value",
            )


def _key_reused(key: str | None) -> InvalidRequest:
    return InvalidRequest(
        f"Idempotency-Key '{key}' was already used for a different request; use a new "
        "key for a new request.",
        param="Idempotency-Key",
        code="idempotency_key_reused",
    )


def _unwritable(exc: StoreUnavailable) -> str:
    """The message of a create refused because the store cannot be written."""
    if isinstance(exc, StoreVanished):
        return (
            "The server's database file was deleted or replaced while it was running, so "
            "it accepts no new responses (they would be lost); the operator must restore "
            "the file and restart the server."
        )
    return "The server cannot write to its store right now (its disk may be full); try again later."
