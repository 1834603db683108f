"""Compaction items: a summary that stands in for a history (`POST /v1/responses/compact`,
and `context_management` on a create), and what a model is sent of a history holding one.

A compaction item is shaped as OpenAI shapes it, `{"type": "compaction", "id": "cmp_...",
"encrypted_content": ...}`, and clients treat its content as opaque. Deliberately, this
server's content is not encrypted: it is the summary, tagged and base64-encoded (`PREFIX`),
which only this server reads back. Forging one gains nothing: the model is given the
summary as an assistant message, which any client may send.

What a model is sent of a history (`model_view`): the latest compaction item of this
server's stands for every item before it except the user's messages, which OpenAI's
compacted output keeps. So the model reads those messages (each once: a client that
chains on a previous response and also sends the compacted output holds them twice), then
the summary as an assistant message, then everything after the item. The history itself
is never changed: the items a compaction summarised stay stored where they were.

An item another server made (OpenAI's, whose content only OpenAI can read) is refused
with a 400 naming it (`check_compaction_items`), unless the model reads such items as
they are: one whose class says `takes_compaction_items` (a Responses upstream) is sent
them where they stand.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from ._errors import InvalidRequest
from ._ids import new_id

Item = dict[str, Any]

PREFIX = "durable-responses.compaction.v1:"
SUMMARY_HEADING = "Summary of the conversation so far (it replaces the earlier turns):\n\n"


def compaction_item(summary: str) -> Item:
    """A new compaction item holding `summary`."""
    payload = json.dumps({"summary": summary}, ensure_ascii=False).encode()
    content = PREFIX + base64.urlsafe_b64encode(payload).decode("ascii")
    return {"type": "compaction", "id": new_id("cmp"), "encrypted_content": content}


def summary_of(item: Item) -> str | None:
    """The summary a compaction item of this server's holds; None for any other item."""
    content = item.get("encrypted_content")
    if item.get("type") != "compaction" or not isinstance(content, str):
        return None
    if not content.startswith(PREFIX):
        return None
    try:
        decoded = json.loads(base64.urlsafe_b64decode(content[len(PREFIX) :].encode("ascii")))
    except (binascii.Error, UnicodeError, ValueError):
        return None
    summary = decoded.get("summary") if isinstance(decoded, dict) else None
    return summary if isinstance(summary, str) else None


def is_user_message(item: Item) -> bool:
    return item.get("type", "message") == "message" and item.get("role") == "user"


def model_view(items: list[Item]) -> list[Item]:
    """`items` as a model is sent them: the latest compaction item of this server's in place
    of what it summarised (see the module's docstring)."""
    last = _latest(items)
    if last is None:
        return items
    kept: list[Item] = []
    seen: set[Any] = set()
    for item in items[:last]:
        if is_user_message(item) and (item.get("id") is None or item["id"] not in seen):
            seen.add(item.get("id"))
            kept.append(item)
    return [*kept, _summary_message(items[last]), *items[last + 1 :]]


def has_uncompacted(items: list[Item]) -> bool:
    """Whether `items` hold what a compaction would summarise and none has yet: an item
    other than a user's message after the latest compaction item (or anywhere, without
    one)."""
    last = _latest(items)
    return any(not is_user_message(item) for item in items[0 if last is None else last + 1 :])


def check_compaction_items(
    history: list[Item], new_input: list[Item], *, reads_foreign: bool, history_param: str
) -> None:
    """Refuse, with InvalidRequest, compaction items a model cannot be given: one another
    server made, which the model cannot read (unless `reads_foreign`), named by
    `input[i].encrypted_content` for the request's own items and `history_param` for an
    item of the history it continues; and one between a call and its output (the model
    would be sent the output without its call, G5)."""
    check_no_split_call([*history, *new_input])
    if reads_foreign:
        return
    for index, item in enumerate([*history, *new_input]):
        if item.get("type") != "compaction" or summary_of(item) is not None:
            continue
        own = index - len(history)
        raise InvalidRequest(
            f"Compaction item '{item.get('id')}' was not made by this server: its"
            " encrypted_content is another's (OpenAI's own, say), which this server's model"
            " cannot read. Send the items it summarised instead, or compact them with this"
            " server's POST /v1/responses/compact.",
            param=history_param if own < 0 else f"input[{own}].encrypted_content",
            code="invalid_encrypted_content",
        )


def check_no_split_call(items: list[Item], *, param: str = "input") -> None:
    """Refuse (InvalidRequest, `param`) a compaction item between a call and its output:
    the model would be sent the output without its call (G5)."""
    last = _latest(items)
    if last is None:
        return
    summarised = {i["call_id"] for i in items[:last] if i.get("type") == "function_call"}
    for item in items[last + 1 :]:
        if item.get("type") == "function_call_output" and item["call_id"] in summarised:
            raise InvalidRequest(
                f"Compaction item '{items[last]['id']}' comes between function call"
                f" '{item['call_id']}' and its output: a compaction stands for the calls"
                " before it, so their outputs must come before it too.",
                param=param,
                code="invalid_value",
            )


def takes_compaction_items(model: Any) -> bool:
    """Whether `model` reads compaction items another server made as they are."""
    return bool(getattr(model, "takes_compaction_items", False))


def _latest(items: list[Item]) -> int | None:
    for index in range(len(items) - 1, -1, -1):
        if summary_of(items[index]) is not None:
            return index
    return None


def _summary_message(item: Item) -> Item:
    text = SUMMARY_HEADING + (summary_of(item) or "")
    return {
        "type": "message",
        "id": item["id"],
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
        "status": "completed",
    }
