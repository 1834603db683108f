"""The Response object (docs/protocol.md section 6) and its usage shape.

Every field is always present, `null` where there is no value: the Open Responses
`ResponseResource` schema requires them all.
"""

from __future__ import annotations

import json
from typing import Any

from ._model import Usage

# Request fields echoed in the Response, with the value used when the request omits them.
ECHO_DEFAULTS: dict[str, Any] = {
    "instructions": None,
    "max_output_tokens": None,
    "max_tool_calls": None,
    "model": "",
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "reasoning": {"effort": None, "summary": None},
    "service_tier": "default",
    "store": True,
    "temperature": 1.0,
    "text": {"format": {"type": "text"}},
    "tool_choice": "auto",
    "tools": [],
    "top_logprobs": 0,
    "top_p": 1.0,
    "truncation": "disabled",
    "metadata": {},
    "prompt_cache_key": None,
    "safety_identifier": None,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}


def echo_fields(params: dict[str, Any]) -> dict[str, Any]:
    """The request-derived part of a Response, with defaults filled in."""
    echo = {key: params.get(key, default) for key, default in ECHO_DEFAULTS.items()}
    for key, default in ECHO_DEFAULTS.items():
        if echo[key] is None and default is not None:
            echo[key] = default
    if echo["service_tier"] == "auto":
        echo["service_tier"] = "default"
    echo["text"] = {"format": {"type": "text"}, **echo["text"]}  # `verbosity` alone
    if echo["text"]["format"].get("type") == "json_schema":  # every field, as OpenAI
        echo["text"]["format"] = {"description": None, "strict": False, **echo["text"]["format"]}
    echo["tools"] = [_echoed_tool(tool) for tool in echo["tools"]]
    echo["reasoning"] = _echoed_reasoning(params.get("reasoning") or {})
    conversation = params.get("conversation")
    echo["conversation"] = {"id": conversation} if conversation else None
    echo["background"] = bool(params.get("background"))
    if params.get("user") is not None:  # `user: null` fails OpenAI's schema: omit it
        echo["user"] = params["user"]
    return echo


def _echoed_reasoning(reasoning: dict[str, Any]) -> dict[str, Any]:
    """`reasoning` as OpenAI's Reasoning object has it: `effort` and `summary` always
    (`summary` also when asked by its old name, `generate_summary`), and `generate_summary`,
    `context` and `mode` when the request gave them."""
    summary = reasoning.get("summary") or reasoning.get("generate_summary")
    echo = {"effort": reasoning.get("effort"), "summary": summary}
    for key in ("generate_summary", "context", "mode"):
        if reasoning.get(key) is not None:
            echo[key] = reasoning[key]
    return echo


def _echoed_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A function tool as OpenAI echoes it: `strict` left out reads `true`."""
    if tool.get("type") == "function" and tool.get("strict") is None:
        return {**tool, "strict": True}
    return tool


def new_response(
    response_id: str, created_at: float, status: str, params: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(created_at),
        "status": status,
        "completed_at": None,
        "error": None,
        "incomplete_details": None,
        "output": [],
        # Zeros, not null, until the end: OpenAI's schema rejects a null usage.
        "usage": usage_object(Usage(0, 0)),
        **echo_fields(params),
    }


def usage_object(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def add_usage(total: Usage | None, step: Usage) -> Usage:
    if total is None:
        return step
    return Usage(
        input_tokens=total.input_tokens + step.input_tokens,
        output_tokens=total.output_tokens + step.output_tokens,
        cached_tokens=total.cached_tokens + step.cached_tokens,
        reasoning_tokens=total.reasoning_tokens + step.reasoning_tokens,
        cache_write_tokens=total.cache_write_tokens + step.cache_write_tokens,
    )


def usage_from_object(obj: dict[str, Any] | None) -> Usage | None:
    if not obj:
        return None
    return Usage(
        input_tokens=obj["input_tokens"],
        output_tokens=obj["output_tokens"],
        cached_tokens=obj["input_tokens_details"]["cached_tokens"],
        reasoning_tokens=obj["output_tokens_details"]["reasoning_tokens"],
        cache_write_tokens=obj["input_tokens_details"].get("cache_write_tokens", 0),
    )


def unstored(snapshot: str) -> bool:
    """Whether a response's snapshot says `store: false`. (The snapshot is written by
    `dumps`, compactly: without that text it is stored, and only then is it parsed.)"""
    return '"store":false' in snapshot and json.loads(snapshot).get("store") is False
