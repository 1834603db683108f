"""Histories a model sees, and the tool-consistency rule for client input (G5)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ._errors import InvalidRequest

Item = dict[str, Any]


def history_items(output: list[Item], *, ended_incomplete: bool = False) -> list[Item]:
    """The part of a response's output that belongs in later histories.

    Items closed `incomplete` were cut off (by a crash, a failed model call or a stop) and
    are left out (G7), except the partial answer a turn ended on when it ended
    `incomplete` (steered, or out of tokens): that is the turn's answer.
    """
    kept = []
    for index, item in enumerate(output):
        if item.get("status") == "incomplete":
            is_final_answer = index == len(output) - 1 and item.get("type") == "message"
            if not (ended_incomplete and is_final_answer):
                continue
        if item.get("type") == "reasoning" and not item.get("id"):
            continue
        kept.append(item)
    return kept


def check_tool_pairing(
    history: list[Item], new_input: list[Item], *, allow_pending: bool = False
) -> None:
    """Refuse input that would break tool pairing (durability.md G5).

    Every `function_call_output` must answer a call made earlier, once; and after the new
    input, no call may be left without its output (unless `allow_pending`: the history is
    that of a turn still running, whose calls may yet be answered).
    """
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
                    param="input",
                    code="tool_call_not_found",
                )
            if call_id in answered and from_client:
                raise InvalidRequest(
                    f"Duplicate function call output for call_id '{call_id}'.",
                    param="input",
                    code="duplicate_tool_output",
                )
            answered.add(call_id)
    pending = [call_id for call_id in calls if call_id not in answered]
    if pending and not allow_pending:
        first = sorted(pending)[0]
        raise InvalidRequest(
            f"No tool output found for function call '{first}'. Supply a "
            "function_call_output item with this call_id before continuing.",
            param="input",
            code="tool_output_missing",
        )


def loads_all(texts: Iterable[str]) -> list[Item]:
    return [json.loads(text) for text in texts]
