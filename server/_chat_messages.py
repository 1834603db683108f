"""Responses input items as Chat Completions messages, for the upstream model.

A message keeps its role (`developer` is `system`); consecutive function calls become one
assistant message with several `tool_calls`, each output a `tool` message. Content parts
map one to one: text as `text`, images as `image_url` (with `detail`), inline files as
`file` (`file_data`, `filename`); an assistant's refusal goes in the message's `refusal`.
Reasoning items are not sent: Chat Completions has no field for them.
"""

from __future__ import annotations

from typing import Any

Item = dict[str, Any]


def tool_choice(choice: Any) -> Any:
    """A Responses `tool_choice` as Chat Completions takes it. `allowed_tools` keeps its
    restriction (Chat Completions has the same choice, its list under `allowed_tools`):
    every tool is still sent, and the model may call only those listed."""
    if isinstance(choice, dict):
        if choice.get("type") == "function":
            return {"type": "function", "function": {"name": choice["name"]}}
        if choice.get("type") == "allowed_tools":
            listed = [_allowed_tool(tool) for tool in choice.get("tools") or ()]
            return {
                "type": "allowed_tools",
                "allowed_tools": {"mode": choice.get("mode"), "tools": listed},
            }
    return choice


def _allowed_tool(tool: Any) -> Any:
    """An `allowed_tools` entry in the Chat Completions shape. An entry that names no
    function is sent as it is, for the upstream to take or refuse: never left out, which
    would change what the model may call."""
    if isinstance(tool, dict) and tool.get("type") == "function" and "name" in tool:
        return {"type": "function", "function": {"name": tool["name"]}}
    return tool


def chat_messages(instructions: str | None, items: list[Item]) -> list[dict[str, Any]]:
    """Responses input items as chat messages; consecutive function calls become one
    assistant message with several `tool_calls`. Chat Completions wants a call's `tool`
    message right after the assistant message that made it, while a Responses history
    may hold a message between a call and its output (a client said more before it
    answered): such messages are sent once the calls before them are answered."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    waiting: set[str] = set()  # calls sent whose `tool` message has not been sent yet
    held: list[dict[str, Any]] = []  # messages that came while calls were waiting
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            (held if waiting else messages).append(_message(item))
        elif kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            waiting.add(item["call_id"])
            last = messages[-1] if messages else None
            if last and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item["output"]
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item["call_id"],
                    "content": output if isinstance(output, str) else _content(output),
                }
            )
            waiting.discard(item["call_id"])
            if not waiting:
                messages += held
                held.clear()
    return messages + held


def _message(item: Item) -> dict[str, Any]:
    """A message item as a chat message. An assistant's refusal goes in `refusal`, the
    field Chat Completions answers it in."""
    role = "system" if item["role"] == "developer" else item["role"]
    content = item["content"]
    if role != "assistant" or isinstance(content, str):
        return {"role": role, "content": _content(content)}
    refusals = [p["refusal"] for p in content if p.get("type") == "refusal"]
    said = [p for p in content if p.get("type") != "refusal"]
    message: dict[str, Any] = {"role": role, "content": _content(said) if said else None}
    if refusals:
        message["refusal"] = "".join(refusals)
    return message


# Image detail levels Chat Completions knows; `original` (full resolution) is `high` there.
_DETAIL = {"low": "low", "high": "high", "auto": "auto", "original": "high"}


def _content(content: Any) -> Any:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type")
        if kind in ("input_text", "output_text"):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal":
            parts.append({"type": "text", "text": part["refusal"]})
        elif kind == "input_image" and part.get("image_url"):
            image = {"url": part["image_url"]}
            if part.get("detail") in _DETAIL:
                image["detail"] = _DETAIL[part["detail"]]
            parts.append({"type": "image_url", "image_url": image})
        elif kind == "input_file" and part.get("file_data"):
            file = {"file_data": part["file_data"]}
            if part.get("filename"):
                file["filename"] = part["filename"]
            parts.append({"type": "file", "file": file})
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts
