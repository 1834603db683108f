"""What OpenAI's `POST /v1/responses` refuses, for the scripted Responses upstream
(tests/support/fake_responses_upstream.py), in OpenAI's words where they are known.

A request is checked as a stateless one must be (the server under test never stores
anything upstream): `store` false and `stream` true (this fake's own demands), no
`previous_response_id`, `conversation` or `background`; no parameter OpenAI does not know
(`presence_penalty` included: Chat Completions has it, the Responses API does not); every
input item in one of OpenAI's input shapes, with no field it does not know; every
`function_call` answered by a later `function_call_output` and every output answering an
earlier call; a reasoning item only with `encrypted_content` this upstream issued for an
item of that id (without it, OpenAI looks the id up, and with `store: false` finds
nothing: a 404), followed by the item it led to; an assistant message's `phase` one of
OpenAI's; an `item_reference` never (nothing is stored); tools, `tool_choice`,
`text.format` (strict schemas, the word "json" for `json_object`), `reasoning` and
`include` as OpenAI takes them. `allowed_calls(body)` is the functions a request lets the
model call (its `tools` narrowed by `tool_choice`).

`request_error(body, issued)` returns the first fault as a `Refusal` (its `request` -1),
or None; `issued` maps the encrypted reasoning this upstream handed out to the id of the
item it was issued in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from tests.support.chat_rules import _strict_problem
from tests.support.fake_upstream import Refusal

Body = dict[str, Any]
Check = Callable[[Body, Mapping[str, str]], Refusal | None]

# The parameters of OpenAI's CreateResponse (the published OpenAPI schema).
PARAMETERS = frozenset(
    {
        "background",
        "context_management",
        "conversation",
        "include",
        "input",
        "instructions",
        "max_output_tokens",
        "max_tool_calls",
        "metadata",
        "model",
        "moderation",
        "parallel_tool_calls",
        "previous_response_id",
        "prompt",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "reasoning",
        "safety_identifier",
        "service_tier",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "text",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "truncation",
        "user",
    }
)
INCLUDE = frozenset(
    {
        "file_search_call.results",
        "web_search_call.results",
        "web_search_call.action.sources",
        "message.input_image.image_url",
        "computer_call_output.output.image_url",
        "code_interpreter_call.outputs",
        "reasoning.encrypted_content",
        "message.output_text.logprobs",
    }
)
_STATUS = ("in_progress", "completed", "incomplete")
_PHASES = ("commentary", "final_answer")
# The fields each input item and content part may have (OpenAI's *Param schemas).
_ITEM_FIELDS = {
    "input_message": {"type", "role", "content", "status"},
    "assistant_message": {"type", "id", "role", "content", "status", "phase"},
    "function_call": {"type", "id", "call_id", "name", "arguments", "status", "namespace"},
    "function_call_output": {"type", "id", "call_id", "output", "status"},
    "reasoning": {"type", "id", "summary", "content", "encrypted_content", "status"},
}
_PART_FIELDS = {
    "input_text": {"type", "text"},
    "input_image": {"type", "image_url", "file_id", "detail"},
    "input_file": {"type", "file_id", "file_data", "file_url", "filename"},
    "output_text": {"type", "text", "annotations", "logprobs"},
    "refusal": {"type", "refusal"},
}
_ROLE_PARTS = {
    "user": ("input_text", "input_image", "input_file"),
    "system": ("input_text", "input_image", "input_file"),
    "developer": ("input_text", "input_image", "input_file"),
    "assistant": ("output_text", "refusal"),
}
_TOOL_FIELDS = {
    "type",
    "name",
    "description",
    "parameters",
    "strict",
    "defer_loading",
    "allowed_callers",
    "output_schema",
}
_DATA_URL = re.compile(r"^data:[\w.+-]+/[\w.+-]+;base64,[A-Za-z0-9+/]+=*$")
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")


def refused(message: str, param: str | None, code: str | None = None, status: int = 400) -> Refusal:
    return Refusal(-1, message, param, status, code)


def _unknown(param: str) -> Refusal:
    return refused(f"Unknown parameter: '{param}'.", param, "unknown_parameter")


def _invalid(value: Any, supported: Collection[str], param: str) -> Refusal:
    listed = ", ".join(f"'{each}'" for each in supported)
    return refused(
        f"Invalid value: '{value}'. Supported values are: {listed}.", param, "invalid_value"
    )


def _type_error(param: str, expected: str, value: Any) -> Refusal:
    got = type(value).__name__
    return refused(
        f"Invalid type for '{param}': expected {expected}, but got {got} instead.",
        param,
        "invalid_type",
    )


def request_error(body: Body, issued: Mapping[str, str] | None = None) -> Refusal | None:
    issued = issued or {}
    for check in (
        _stateless,
        _parameters,
        _input_shapes,
        _pairing,
        _reasoning_items,
        _tools,
        _text,
    ):
        fault = check(body, issued)
        if fault is not None:
            return fault
    return None


# -- the request as a whole -----------------------------------------------------------


def _stateless(body: Body, issued: Mapping[str, str]) -> Refusal | None:
    unknown = sorted(set(body) - PARAMETERS)
    if unknown:
        return _unknown(unknown[0])
    if "model" not in body:
        return refused(
            "Missing required parameter: 'model'.", "model", "missing_required_parameter"
        )
    if body.get("store") is not False:
        return refused(
            "fake upstream: a request must be stateless ('store': false); the server under"
            " test keeps the history, the upstream nothing.",
            "store",
        )
    if body.get("stream") is not True:
        return refused("fake upstream: this upstream only streams ('stream': true).", "stream")
    if body.get("background"):
        return refused("Background mode requires 'store' to be true.", "background")
    if body.get("previous_response_id") is not None:
        previous = body["previous_response_id"]
        return refused(
            f"Previous response with id '{previous}' not found.",
            "previous_response_id",
            "previous_response_not_found",
        )
    if body.get("conversation") is not None:
        return refused("Conversation not found.", "conversation", status=404)
    return None


_RANGES = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "top_logprobs": (0, 20),
    "max_output_tokens": (16, None),
}
_CHOICES = {
    "truncation": ("auto", "disabled"),
    "service_tier": ("auto", "default", "flex", "scale", "priority", "fast", "ultrafast"),
    "prompt_cache_retention": ("in_memory", "24h"),
}
_REASONING: dict[str, tuple[str, ...] | None] = {
    "effort": ("none", "minimal", "low", "medium", "high", "xhigh", "max"),
    "summary": ("auto", "concise", "detailed"),
    "generate_summary": ("auto", "concise", "detailed"),
    "context": ("auto", "current_turn", "all_turns"),
    "mode": None,  # any string
}


def _parameters(body: Body, issued: Mapping[str, str]) -> Refusal | None:
    for name, (low, high) in _RANGES.items():
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, int | float) or isinstance(value, bool):
            return _type_error(name, "a number", value)
        if value < low or (high is not None and value > high):
            return refused(f"Invalid '{name}': {value} is out of range.", name, "invalid_value")
    for name, choices in _CHOICES.items():
        if body.get(name) is not None and body[name] not in choices:
            return _invalid(body[name], choices, name)
    for name in ("instructions", "prompt_cache_key", "safety_identifier", "user"):
        if body.get(name) is not None and not isinstance(body[name], str):
            return _type_error(name, "a string", body[name])
    if "parallel_tool_calls" in body and not isinstance(body["parallel_tool_calls"], bool):
        return _type_error("parallel_tool_calls", "a boolean", body["parallel_tool_calls"])
    for index, value in enumerate(body.get("include") or ()):
        if value not in INCLUDE:
            return _invalid(value, sorted(INCLUDE), f"include[{index}]")
    reasoning = body.get("reasoning")
    if reasoning is not None:
        if not isinstance(reasoning, dict):
            return _type_error("reasoning", "an object", reasoning)
        for key, value in reasoning.items():
            if key not in _REASONING:
                return _unknown(f"reasoning.{key}")
            allowed = _REASONING[key]
            if value is not None and allowed is not None and value not in allowed:
                return _invalid(value, allowed, f"reasoning.{key}")
    return None


# -- input items ----------------------------------------------------------------------


def input_list(body: Body) -> list[Any]:
    value = body.get("input")
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return value if isinstance(value, list) else []


def _input_shapes(body: Body, issued: Mapping[str, str]) -> Refusal | None:
    value = body.get("input")
    if not isinstance(value, str | list):
        return _type_error("input", "a string or an array", value)
    for index, item in enumerate(input_list(body)):
        fault = _item_error(item, f"input[{index}]")
        if fault is not None:
            return fault
    return None


def _item_error(item: Any, where: str) -> Refusal | None:
    if not isinstance(item, dict):
        return _type_error(where, "an object", item)
    kind = item.get("type") or ("message" if "role" in item else None)
    if kind == "item_reference" or (kind is None and set(item) <= {"id", "type"}):
        return _not_stored(item.get("id"))
    if kind == "message":
        return _message_error(item, where)
    fields = _ITEM_FIELDS.get(str(kind))
    if fields is None:
        return _invalid(
            kind, ["message", "function_call", "function_call_output", "reasoning"], f"{where}.type"
        )
    extra = sorted(set(item) - fields)
    if extra:
        return _unknown(f"{where}.{extra[0]}")
    if item.get("status") is not None and item["status"] not in _STATUS:
        return _invalid(item["status"], _STATUS, f"{where}.status")
    return _ITEM_CHECKS[str(kind)](item, where)


def _not_stored(item_id: Any) -> Refusal:
    return refused(
        f"Item with id '{item_id}' not found. Items are not persisted when `store` is set to"
        " false. Try again with `store` set to true, or remove this item from your input.",
        "input",
        status=404,
    )


def _message_error(item: Body, where: str) -> Refusal | None:
    role = item.get("role")
    if role not in _ROLE_PARTS:
        return _invalid(role, list(_ROLE_PARTS), f"{where}.role")
    fields = _ITEM_FIELDS["assistant_message" if role == "assistant" else "input_message"]
    extra = sorted(set(item) - fields)
    if extra:
        return _unknown(f"{where}.{extra[0]}")
    phase = item.get("phase")
    if role == "assistant" and phase is not None and phase not in _PHASES:
        return _invalid(phase, _PHASES, f"{where}.phase")
    if role == "assistant" and "id" in item and not str(item["id"]).startswith("msg"):
        return refused(
            f"Invalid '{where}.id': '{item['id']}'. Expected an ID that begins with 'msg'.",
            f"{where}.id",
            "invalid_id_prefix",
        )
    if item.get("status") is not None and item["status"] not in _STATUS:
        return _invalid(item["status"], _STATUS, f"{where}.status")
    content = item.get("content")
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return _type_error(f"{where}.content", "a string or an array", content)
    for index, part in enumerate(content):
        fault = _part_error(part, _ROLE_PARTS[role], f"{where}.content[{index}]")
        if fault is not None:
            return fault
    return None


def _part_error(part: Any, allowed: Collection[str], where: str) -> Refusal | None:
    kind = part.get("type") if isinstance(part, dict) else None
    if not isinstance(kind, str) or kind not in allowed:
        return _invalid(kind, allowed, f"{where}.type")
    extra = sorted(set(part) - _PART_FIELDS[kind])
    if extra:
        return _unknown(f"{where}.{extra[0]}")
    if kind in ("input_text", "output_text") and not isinstance(part.get("text"), str):
        return refused(f"Missing required parameter: '{where}.text'.", f"{where}.text")
    if kind == "output_text" and not isinstance(part.get("annotations"), list):
        return refused(
            f"Missing required parameter: '{where}.annotations'.", f"{where}.annotations"
        )
    if kind == "refusal" and not isinstance(part.get("refusal"), str):
        return refused(f"Missing required parameter: '{where}.refusal'.", f"{where}.refusal")
    if kind == "input_image":
        return _image_error(part, where)
    if kind == "input_file":
        return _file_error(part, where)
    return None


def _image_error(part: Body, where: str) -> Refusal | None:
    url = part.get("image_url")
    if url is None and part.get("file_id") is None:
        return refused(f"Missing required parameter: '{where}.image_url'.", f"{where}.image_url")
    if url is not None and not (
        isinstance(url, str) and (url.startswith(("http://", "https://")) or _DATA_URL.match(url))
    ):
        return refused(
            f"Invalid '{where}.image_url'. Expected a valid URL, but got a value with an"
            " invalid format.",
            f"{where}.image_url",
            "invalid_value",
        )
    detail = part.get("detail", "auto")
    choices = ("low", "high", "auto", "original")
    return None if detail in choices else _invalid(detail, choices, f"{where}.detail")


def _file_error(part: Body, where: str) -> Refusal | None:
    data = part.get("file_data")
    if data is None and part.get("file_id") is None and part.get("file_url") is None:
        return refused(f"Missing required parameter: '{where}.file_data'.", f"{where}.file_data")
    if data is not None and not (isinstance(data, str) and _DATA_URL.match(data)):
        return refused(
            f"Invalid '{where}.file_data': expected a base64 data URL.", f"{where}.file_data"
        )
    if data is not None and not part.get("filename"):
        return refused(f"Missing required parameter: '{where}.filename'.", f"{where}.filename")
    return None


def _call_error(item: Body, where: str) -> Refusal | None:
    for key in ("call_id", "name", "arguments"):
        if not isinstance(item.get(key), str):
            return refused(f"Missing required parameter: '{where}.{key}'.", f"{where}.{key}")
    if "id" in item and not str(item["id"]).startswith("fc"):
        return refused(
            f"Invalid '{where}.id': '{item['id']}'. Expected an ID that begins with 'fc'.",
            f"{where}.id",
            "invalid_id_prefix",
        )
    return None


def _output_error(item: Body, where: str) -> Refusal | None:
    if not isinstance(item.get("call_id"), str):
        return refused(f"Missing required parameter: '{where}.call_id'.", f"{where}.call_id")
    output = item.get("output")
    if isinstance(output, str):
        return None
    if not isinstance(output, list):
        return _type_error(f"{where}.output", "a string or an array", output)
    for index, part in enumerate(output):
        fault = _part_error(part, _ROLE_PARTS["user"], f"{where}.output[{index}]")
        if fault is not None:
            return fault
    return None


def _reasoning_error(item: Body, where: str) -> Refusal | None:
    if not isinstance(item.get("id"), str):
        return refused(f"Missing required parameter: '{where}.id'.", f"{where}.id")
    if not isinstance(item.get("summary"), list):
        return refused(f"Missing required parameter: '{where}.summary'.", f"{where}.summary")
    for key, kind in (("summary", "summary_text"), ("content", "reasoning_text")):
        for index, part in enumerate(item.get(key) or ()):
            if (
                not isinstance(part, dict)
                or part.get("type") != kind
                or set(part)
                != {
                    "type",
                    "text",
                }
            ):
                return _invalid(
                    part.get("type") if isinstance(part, dict) else part,
                    [kind],
                    f"{where}.{key}[{index}]",
                )
    return None


_ITEM_CHECKS: dict[str, Callable[[Body, str], Refusal | None]] = {
    "function_call": _call_error,
    "function_call_output": _output_error,
    "reasoning": _reasoning_error,
}


def _pairing(body: Body, issued: Mapping[str, str]) -> Refusal | None:
    """Every call answered by a later output, every output answering an earlier call."""
    calls: list[str] = []
    answered: set[str] = set()
    for item in input_list(body):
        kind = item.get("type")
        if kind == "function_call":
            calls.append(item["call_id"])
        elif kind == "function_call_output":
            if item["call_id"] not in calls:
                return refused(
                    f"No tool call found for function call output with call_id {item['call_id']}.",
                    "input",
                )
            answered.add(item["call_id"])
    for call_id in calls:
        if call_id not in answered:
            return refused(f"No tool output found for function call {call_id}.", "input")
    return None


def _reasoning_items(body: Body, issued: Mapping[str, str]) -> Refusal | None:
    """A reasoning item: only with encrypted content this upstream issued (nothing is
    stored to look its id up in), and followed by the item it led to."""
    items = input_list(body)
    for index, item in enumerate(items):
        if item.get("type") != "reasoning":
            continue
        encrypted = item.get("encrypted_content")
        if not encrypted:
            return _not_stored(item["id"])
        if issued.get(encrypted) != item["id"]:  # not issued, or for another item
            return refused(
                f"The encrypted content for item {item['id']} could not be verified.",
                "input",
                "invalid_encrypted_content",
            )
        following = items[index + 1] if index + 1 < len(items) else {}
        led_to = following.get("type") == "function_call" or (
            (following.get("type") or "message") == "message"
            and following.get("role") == "assistant"
        )
        if not led_to:
            return refused(
                f"Item '{item['id']}' of type 'reasoning' was provided without its required"
                " following item.",
                "input",
            )
    return None


# -- tools and the answer's format ----------------------------------------------------


def _tools(body: Body, issued: Mapping[str, str]) -> Refusal | None:
    names = []
    for index, tool in enumerate(body.get("tools") or ()):
        where = f"tools[{index}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else tool
            return _invalid(kind, ["function"], f"{where}.type")
        extra = sorted(set(tool) - _TOOL_FIELDS)
        if extra:
            return _unknown(f"{where}.{extra[0]}")
        if not _NAME.match(str(tool.get("name", ""))):
            return refused(f"Invalid '{where}.name': '{tool.get('name')}'.", f"{where}.name")
        names.append(tool["name"])
        parameters = tool.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            return _type_error(f"{where}.parameters", "an object", parameters)
        if tool.get("strict") and parameters is not None:
            problem = _strict_problem(parameters, ())
            if problem is not None:
                return refused(
                    f"Invalid schema for function '{tool['name']}': {problem}",
                    f"{where}.parameters",
                    "invalid_function_parameters",
                )
    return _tool_choice_error(body.get("tool_choice"), names)


def _tool_choice_error(choice: Any, names: list[str]) -> Refusal | None:
    if choice is None or choice in ("none", "auto", "required"):
        return None
    if not isinstance(choice, dict):
        return _invalid(choice, ["none", "auto", "required"], "tool_choice")
    kind = choice.get("type")
    if kind == "function":
        if choice.get("name") not in names:
            return refused(
                f"Tool choice '{choice.get('name')}' not found in 'tools' parameter.",
                "tool_choice",
            )
        return None
    if kind == "allowed_tools":
        return _allowed_tools_error(choice)
    return _invalid(kind, ["function", "allowed_tools"], "tool_choice.type")


def _allowed_tools_error(choice: Body) -> Refusal | None:
    """`allowed_tools` in the Responses shape: `mode`, and `tools` each a tool's
    `{"type", ...}` (a function's `{"type": "function", "name"}`), never the Chat
    Completions shape (`allowed_tools`, `function`)."""
    extra = sorted(set(choice) - {"type", "mode", "tools"})
    if extra:
        return _unknown(f"tool_choice.{extra[0]}")
    if choice.get("mode") not in ("auto", "required"):
        return _invalid(choice.get("mode"), ["auto", "required"], "tool_choice.mode")
    tools = choice.get("tools")
    if not isinstance(tools, list):
        return _type_error("tool_choice.tools", "an array", tools)
    for index, tool in enumerate(tools):
        where = f"tool_choice.tools[{index}]"
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            return _type_error(where, "an object with a 'type'", tool)
        if tool["type"] == "function":
            extra = sorted(set(tool) - {"type", "name"})
            if extra:
                return _unknown(f"{where}.{extra[0]}")
            if not isinstance(tool.get("name"), str):
                return _type_error(f"{where}.name", "a string", tool.get("name"))
    return None


def allowed_calls(body: Body) -> frozenset[str]:
    """The functions a (valid) request lets the model call: none under `none`, those an
    `allowed_tools` choice lists, the named one under a `function` choice, else any
    declared."""
    choice = body.get("tool_choice")
    if choice == "none":
        return frozenset()
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        return frozenset(t["name"] for t in choice["tools"] if t["type"] == "function")
    if isinstance(choice, dict) and choice.get("type") == "function":
        return frozenset({choice["name"]})
    return frozenset(tool["name"] for tool in body.get("tools") or ())


def _text(body: Body, issued: Mapping[str, str]) -> Refusal | None:
    text = body.get("text")
    if text is None:
        return None
    if not isinstance(text, dict):
        return _type_error("text", "an object", text)
    extra = sorted(set(text) - {"format", "verbosity"})
    if extra:
        return _unknown(f"text.{extra[0]}")
    verbosity = text.get("verbosity")
    if verbosity is not None and verbosity not in ("low", "medium", "high"):
        return _invalid(verbosity, ["low", "medium", "high"], "text.verbosity")
    return _format_error(text.get("format"), body)


def _format_error(form: Any, body: Body) -> Refusal | None:
    if form is None:
        return None
    kind = form.get("type") if isinstance(form, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        said = json.dumps([body.get("instructions"), body.get("input")]).lower()
        if "json" not in said:
            return refused(
                "Response input messages must contain the word 'json' in some form to use"
                " 'text.format' of type 'json_object'.",
                "input",
            )
        return None
    if kind != "json_schema":
        return _invalid(kind, ["text", "json_object", "json_schema"], "text.format.type")
    assert isinstance(form, dict)
    extra = sorted(set(form) - {"type", "name", "schema", "strict", "description"})
    if extra:
        return _unknown(f"text.format.{extra[0]}")
    if not _NAME.match(str(form.get("name", ""))) or len(form["name"]) > 64:
        return refused("Missing or invalid 'text.format.name'.", "text.format.name")
    if not isinstance(form.get("schema"), dict):
        return refused("Missing required parameter: 'text.format.schema'.", "text.format.schema")
    if form.get("strict"):
        problem = _strict_problem(form["schema"], ())
        if problem is not None:
            return refused(
                f"Invalid schema for response_format '{form['name']}': {problem}",
                "text.format.schema",
                "invalid_json_schema",
            )
    return None
