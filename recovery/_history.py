"""Histories a model sees, and the tool-consistency rules (G5): for client input, for
a history loaded from the store, and for the whole history a turn starts from."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from store import Store

from ._errors import InvalidRequest
from ._ids import new_id
from ._model import FunctionCallDelta
from ._references import check_new_ids
from ._status import ResponseStatus

log = logging.getLogger("recovery.history")

Item = dict[str, Any]


def history_items(output: list[Item], *, ended_incomplete: bool = False) -> list[Item]:
    """The part of a response's output that belongs in later histories.

    Items closed `incomplete` were cut off (by a crash, a failed model call or a stop) and
    are left out (G7), except the partial answer a turn ended on when it ended
    `incomplete` (steered, or out of tokens): that is the turn's answer.
    """
    kept = []
    for index, item in enumerate(output):
        if item.get("status") == "in_progress":
            continue  # still open: a message cut off that the next model call continues
        if item.get("status") == "incomplete":
            is_final_answer = index == len(output) - 1 and item.get("type") == "message"
            if not (ended_incomplete and is_final_answer):
                continue
        if item.get("type") == "reasoning" and not item.get("id"):
            continue
        kept.append(item)
    return kept


def check_tool_pairing(
    history: list[Item],
    new_input: list[Item],
    *,
    allow_pending: bool = False,
    param: str = "input",
) -> None:
    """Refuse input that would break tool pairing (docs/guarantees.md G5).

    A call of the new input may not repeat a call id of the history or of the input
    (`check_new_calls`); every `function_call_output` must answer a call made earlier,
    once; and after the new input, no call may be left without its output (unless
    `allow_pending`: the history is that of a turn still running, whose calls may yet be
    answered). `param` names the client's field in the error.
    """
    check_new_calls(history, new_input, param=param)
    calls: set[str] = set()
    answered: set[str] = set()
    for position, item in enumerate([*history, *new_input]):
        kind = item.get("type")
        if kind == "function_call":
            calls.add(item["call_id"])
        elif kind == "function_call_output":
            call_id = item["call_id"]
            from_client = position >= len(history)
            if call_id not in calls and from_client:
                raise InvalidRequest(
                    f"No tool call found for function call output with call_id '{call_id}'.",
                    param=param,
                    code="tool_call_not_found",
                )
            if call_id in answered and from_client:
                raise InvalidRequest(
                    f"Duplicate function call output for call_id '{call_id}'.",
                    param=param,
                    code="duplicate_tool_output",
                )
            answered.add(call_id)
    if not allow_pending:
        check_answered([*history, *new_input], param=param)


def check_new_calls(history: list[Item], new_input: list[Item], *, param: str = "input") -> None:
    """Raise InvalidRequest `duplicate_tool_call`, naming the call, if a `function_call` of
    `new_input` (the client's items) repeats the call id of one in `history` or earlier in
    `new_input`: a model would be sent that call twice, which it refuses (G5 at the wire).
    The create checks this (`check_tool_pairing`), and so does a turn when it starts: the
    turn before it in its lane may have made the call after this one was accepted."""
    calls = {item["call_id"] for item in history if item.get("type") == "function_call"}
    for item in new_input:
        if item.get("type") == "function_call":
            if item["call_id"] in calls:
                raise _repeated_call(item["call_id"], param)
            calls.add(item["call_id"])


def _repeated_call(call_id: str, param: str) -> InvalidRequest:
    return InvalidRequest(
        f"Duplicate function call with call_id '{call_id}': the history already holds this "
        "call (leave it out, and send only its function_call_output).",
        param=param,
        code="duplicate_tool_call",
    )


def check_answered(items: list[Item], *, param: str = "input") -> None:
    """Raise InvalidRequest `tool_output_missing`, naming the first call of `items` that no
    `function_call_output` answers. It is how a turn's whole history is checked when the
    turn starts: one accepted while its lane was busy may find that the turn before it
    ended waiting for a client tool's output, which its own input does not supply."""
    answered = {i["call_id"] for i in items if i.get("type") == "function_call_output"}
    for item in items:
        if item.get("type") == "function_call" and item["call_id"] not in answered:
            raise InvalidRequest(
                f"No tool output found for function call '{item['call_id']}'. Supply a "
                "function_call_output item with this call_id before continuing.",
                param=param,
                code="tool_output_missing",
            )


def drop_orphaned_outputs(items: list[Item]) -> tuple[list[Item], list[str]]:
    """`items` without the `function_call_output`s that answer no earlier call (or a call
    already answered), and the call ids of those dropped. A stored history loses a call
    only when the response that held it was deleted: the outputs that answered it would
    make every model refuse the history (G5), so they go too."""
    calls: set[str] = set()
    answered: set[str] = set()
    kept: list[Item] = []
    dropped: list[str] = []
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            calls.add(item["call_id"])
        elif kind == "function_call_output":
            call_id = item["call_id"]
            if call_id not in calls or call_id in answered:
                dropped.append(call_id)
                continue
            answered.add(call_id)
        kept.append(item)
    return kept, dropped


def unpaired_call(items: list[Item]) -> str | None:
    """What breaks pairing in a history about to be sent to a model, or None: every
    `function_call` must be answered by exactly one later `function_call_output`, and
    every output must answer an earlier call, and no call may be made again before its
    output (the checks OpenAI makes, G5 at the wire)."""
    open_calls: dict[str, None] = {}  # in order: the first unanswered one is named
    answered: set[str] = set()
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            if item["call_id"] in open_calls:
                return f"function call '{item['call_id']}' twice before its output"
            open_calls[item["call_id"]] = None
        elif kind == "function_call_output":
            call_id = item["call_id"]
            if call_id in open_calls:
                del open_calls[call_id]
                answered.add(call_id)
            elif call_id in answered:
                return f"two outputs for function call '{call_id}'"
            else:
                return f"an output for function call '{call_id}' with no such call before it"
    if open_calls:
        return f"function call '{next(iter(open_calls))}' with no output"
    return None


def fresh_call_ids(deltas: list[FunctionCallDelta], taken: set[str]) -> list[FunctionCallDelta]:
    """A step's calls, each whose call id is `taken` (by the history, this turn's output,
    or what joins the history later) under a new one. Some models number their calls
    from `call_0` on every turn: kept, the id would name two calls in one history, and
    the client's output for the new call would be refused as a second output of the old
    one (G5). The new id is what is published and recorded, so the client, the history
    and recovery all use it."""
    if not any(delta.call_id in taken for delta in deltas):
        return deltas
    renamed: dict[str, str] = {}
    for delta in deltas:
        if delta.call_id in taken and delta.call_id not in renamed:
            renamed[delta.call_id] = new_id("call")
    return [
        FunctionCallDelta(renamed.get(d.call_id, d.call_id), d.name, d.arguments) for d in deltas
    ]


def loads_all(texts: Iterable[str]) -> list[Item]:
    return [json.loads(text) for text in texts]


async def load_history(
    store: Store,
    *,
    tenant: str,
    previous_response_id: str | None = None,
    conversation_id: str | None = None,
    conversation_upto: int | None = None,
    turn_input: list[Item] | None = None,
) -> list[Item]:
    """The items a turn starts from: its previous_response_id chain (inputs and outputs,
    not instructions), or its conversation's items (those before position
    `conversation_upto`).

    A history never holds an output whose call is gone (G5): when the response or item
    that held the call was deleted, the outputs that answered it are dropped. With
    `turn_input` (the input of a turn about to run, accepted at create), the result is the
    whole history the turn's first model call is sent: the history, then that input,
    repaired alike (and the log says what was dropped); then it is checked as a create
    would be, against what its lane holds now: InvalidRequest `duplicate_item` for an input
    item a conversation's history holds (`check_held_ids`), `duplicate_tool_call` for an input
    call whose call id the history holds (`check_new_calls`), `tool_output_missing` for a
    call no output answers (`check_answered`), each naming the item or call.
    """
    items, source = await _stored_history(
        store, tenant, previous_response_id, conversation_id, conversation_upto
    )
    if turn_input is None:
        return drop_orphaned_outputs(items)[0]
    if conversation_id:
        check_held_ids(items, turn_input)
    items, dropped = drop_orphaned_outputs(items)
    if dropped:
        log.warning(
            "dropped the outputs of function calls %s from this turn's history: their calls"
            " are gone (%s)",
            ", ".join(f"'{call_id}'" for call_id in dropped),
            source,
        )
    # The turn's own items are not repaired but checked as its create checked them, now
    # against what its lane holds: an output whose call never reached the history (the
    # turn it answered ended cancelled or failed) or that another turn answered first
    # would be stored in a conversation without its call, or twice (G5). And no call
    # may be left unanswered: the turn before may have ended waiting for a client tool.
    check_tool_pairing(items, turn_input)
    return [*items, *turn_input]


def check_held_ids(history: list[Item], turn_input: list[Item]) -> None:
    """Refuse, when a conversation's turn starts, an input item whose id its history holds
    (InvalidRequest `duplicate_item`). The create checked the conversation as it was then;
    a turn that ran before this one (it was queued behind it) may have added the item
    since, and the model would be sent it twice."""
    held = {item.get("id") for item in history} - {None}
    for index, item in enumerate(turn_input):
        if item.get("id") in held:
            raise InvalidRequest(
                f"Item with id '{item['id']}' is already in this conversation: a turn that "
                "ended after this response was created added it. An item can be in a "
                "conversation once; send the request again without it.",
                param=f"input[{index}].id",
                code="duplicate_item",
            )


async def _stored_history(
    store: Store,
    tenant: str,
    previous_response_id: str | None,
    conversation_id: str | None,
    conversation_upto: int | None,
) -> tuple[list[Item], str]:
    """The history as stored, and what a repair of it would be due to (for the log)."""
    history: list[Item] = []
    if previous_response_id:
        chain = await store.chain(previous_response_id, tenant)
        # A chain stops short where one of its responses was deleted.
        cut_at = chain[0][0].previous_response_id if chain else previous_response_id
        for previous, inputs in chain:
            if previous.conversation_id and not history:
                history += loads_all(
                    await store.conversation_history(
                        previous.conversation_id, previous.conversation_upto
                    )
                )
            if previous.steer == "rollback" and previous.status == "cancelled":
                # A rolled-back turn leaves nothing in its lane's history but the outputs
                # its client sent for earlier calls: those tools ran, and the client
                # cannot send an output again to a chain that holds it (G5).
                history += _answers(history, loads_all(inputs))
                continue
            history += loads_all(inputs)
            history += history_items(
                json.loads(previous.snapshot)["output"],
                ended_incomplete=previous.status == ResponseStatus.INCOMPLETE,
            )
            if not ResponseStatus(previous.status).is_terminal:
                # A running response's calls are published with its step record, before
                # its snapshot has them: a client may answer one as soon as it sees it.
                recorded = await store.get_step(previous.id, previous.step)
                history += json.loads(recorded) if recorded is not None else []
        if cut_at is not None:
            return history, f"response {cut_at} of the chain was deleted"
    elif conversation_id:
        history += loads_all(await store.conversation_history(conversation_id, conversation_upto))
    return history, "the item holding them was deleted"


def _answers(history: list[Item], items: list[Item]) -> list[Item]:
    """The outputs among `items` that answer a call of `history`."""
    calls = {i.get("call_id") for i in history if i.get("type") == "function_call"}
    return [
        i for i in items if i.get("type") == "function_call_output" and i.get("call_id") in calls
    ]


async def check_input(
    store: Store,
    new_input: list[Item],
    *,
    tenant: str,
    previous_response_id: str | None = None,
    conversation_id: str | None = None,
    allow_pending: bool = False,
    after_running: bool = False,
    param: str = "input",
) -> list[Item]:
    """Refuse client items that would break tool pairing against the history they
    follow (G5), with InvalidRequest naming the call: an output that answers no call,
    or a call answered twice; unless `allow_pending`, a call left without output. A
    conversation's turn may not add an item the conversation has (`check_new_ids`).
    With `after_running` (a turn that will follow the conversation's running turn), what
    that turn has published counts as history. Returns the stored history."""
    history = await load_history(
        store,
        tenant=tenant,
        previous_response_id=previous_response_id,
        conversation_id=conversation_id,
    )
    ahead = await _running_items(store, conversation_id) if after_running else []
    if conversation_id:
        check_new_ids([*history, *ahead], new_input, param=param)
    check_tool_pairing([*history, *ahead], new_input, allow_pending=allow_pending, param=param)
    return history


async def check_unpublished(
    store: Store, conversation_id: str, tenant: str, items: list[Item]
) -> None:
    """Refuse, naming the call, an item added to a conversation by the items API that is
    a call its running turn has published, or an output of one (G5): that call joins the
    conversation when the turn ends, after these items, so the conversation would hold
    the call twice, or an output before its call. Checked before the append's
    transaction, as a create's input is."""
    if not any("call_id" in item for item in items):
        return
    running = await _running_items(store, conversation_id, tenant)
    published = {i["call_id"] for i in running if i.get("type") == "function_call"}
    answered = {i["call_id"] for i in running if i.get("type") == "function_call_output"}
    for item in items:
        call_id, kind = item.get("call_id"), item.get("type")
        if call_id not in published:
            continue
        if kind == "function_call":
            raise InvalidRequest(
                f"Duplicate function call with call_id '{call_id}': the conversation's "
                "running response made this call, and adds it to the conversation when "
                "it ends.",
                param="items",
                code="duplicate_tool_call",
            )
        if kind == "function_call_output" and call_id in answered:
            raise InvalidRequest(
                f"Duplicate function call output for call_id '{call_id}': the "
                "conversation's running response ran this call on the server and "
                "answered it.",
                param="items",
                code="duplicate_tool_output",
            )
        if kind == "function_call_output":
            raise InvalidRequest(
                f"Function call '{call_id}' was made by the conversation's running response "
                "and joins the conversation only when that response ends: send this output "
                "as the input of the conversation's next response instead.",
                param="items",
                code="tool_call_not_found",
            )


async def _running_items(
    store: Store, conversation_id: str | None, tenant: str | None = None
) -> list[Item]:
    """The items the conversation's running turn has published so far (its calls go out
    with its step record, before its snapshot holds them): the conversation holds them
    once it ends, before the input of a turn queued behind it. With `tenant`, none of
    another tenant's turn."""
    running = await store.running_turn(conversation_id) if conversation_id else None
    if running is None or tenant not in (None, running.tenant):
        return []
    items = history_items(json.loads(running.snapshot)["output"])
    recorded = await store.get_step(running.id, running.step)
    return items + (json.loads(recorded) if recorded is not None else [])
