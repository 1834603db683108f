"""Input items as they are stored: every item gets an `id` and a `status`, and message
content is always a list of parts (docs/protocol.md section 4 and 6, input item listing)."""

from __future__ import annotations

from typing import Any

from ._ids import new_id

Item = dict[str, Any]
_ID_PREFIXES = {"reasoning": "rs", "compaction": "cmp"}  # of other items: `item`


def normalize_input(value: str | list[Item]) -> list[Item]:
    if isinstance(value, str):
        return [normalize_item({"role": "user", "content": value})]
    return [normalize_item(item) for item in value]


def normalize_item(item: Item) -> Item:
    kind = item.get("type") or "message"
    if kind == "message":
        return _message(item)
    if kind == "item_reference":  # resolved before it is stored (_references.py)
        return {"type": "item_reference", "id": item["id"]}
    if kind == "function_call":
        return {
            "type": "function_call",
            "id": item.get("id") or new_id("fc"),
            "call_id": item["call_id"],
            "name": item["name"],
            "arguments": item["arguments"],
            "status": item.get("status") or "completed",
        }
    if kind == "function_call_output":
        output = item["output"]
        return {
            "type": "function_call_output",
            "id": item.get("id") or new_id("fco"),
            "call_id": item["call_id"],
            # A list of parts is stored as a message's are (an image's `detail`, ...).
            "output": output if isinstance(output, str) else [_part(p) for p in output],
            "status": item.get("status") or "completed",
        }
    normalized = {k: v for k, v in item.items() if v is not None}
    normalized.setdefault("id", new_id(_ID_PREFIXES.get(kind, "item")))
    return normalized


def _message(item: Item) -> Item:
    role = item["role"]
    content = item["content"]
    if isinstance(content, str):
        if role == "assistant":
            content = [{"type": "output_text", "text": content, "annotations": [], "logprobs": []}]
        else:
            content = [{"type": "input_text", "text": content}]
    else:
        content = [_part(part) for part in content]
    message: Item = {
        "type": "message",
        "id": item.get("id") or new_id("msg"),
        "role": role,
        "content": content,
        "status": item.get("status") or "completed",
    }
    if item.get("phase"):
        message["phase"] = item["phase"]
    return message


def _part(part: dict[str, Any]) -> dict[str, Any]:
    part = {k: v for k, v in part.items() if v is not None}
    if part.get("type") == "output_text":
        part.setdefault("annotations", [])
        part.setdefault("logprobs", [])
    elif part.get("type") == "input_image":
        part.setdefault("detail", "auto")  # the default, which both schemas require
    return part


def text_of(item: Item) -> str:
    """The plain text of a message item (input_text and output_text parts joined)."""
    parts = item.get("content")
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return ""
    return "".join(p.get("text", "") for p in parts if isinstance(p, dict))
