"""What an OpenAI Chat Completions endpoint refuses with a 400, for the fake upstream:
malformed message content parts (images, files), a malformed or non-strict
`response_format`, a `json_object` request whose messages never say "json", and
malformed `tools` and `tool_choice`: a function with a field Chat Completions does not
know (its `function` has `name`, `description`, `parameters` and `strict` only), a
`strict` function whose schema strict mode cannot take, a `tool_choice` naming no
declared function or not in one of its three shapes (a string, `function`, or
`allowed_tools` with its `mode` and `tools` under `allowed_tools`, each tool
`{"type": "function", "function": {"name"}}`), `tool_choice` or `parallel_tool_calls`
without `tools`.

Each rule returns (message, param) in the words OpenAI uses, or None; `answer_error`
checks a scripted answer against the `response_format` it must honour (a real model
under structured outputs only ever answers valid JSON, so a script that does not is a
test's mistake, reported as loudly), and `calls_error` scripted tool calls against the
tools the request lets the model call (`allowed_calls`): a call outside them, or no call
where `tool_choice` requires one, is the test's mistake too.
"""

from __future__ import annotations

import json
import re
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

Fault = tuple[str, str]  # (message, param)

# Content part types each role may send (OpenAI's ChatCompletion*MessageParam).
_ALLOWED = {
    "system": {"text"},
    "developer": {"text"},
    "user": {"text", "image_url", "file", "input_audio"},
    "assistant": {"text", "refusal"},
    "tool": {"text"},
}
_DATA_URL = re.compile(r"^data:[\w.+-]+/[\w.+-]+;base64,[A-Za-z0-9+/]+=*$")
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def request_error(body: dict[str, Any]) -> Fault | None:
    messages = body.get("messages") or []
    for index, message in enumerate(messages):
        fault = _message_error(message, f"messages[{index}]")
        if fault is not None:
            return fault
    return _format_error(body.get("response_format"), messages) or _tools_error(body)


def _message_error(message: dict[str, Any], path: str) -> Fault | None:
    content = message.get("content")
    if not isinstance(content, list):
        return None
    allowed = _ALLOWED.get(message.get("role", ""), set())
    for index, part in enumerate(content):
        where = f"{path}.content[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in allowed:
            return (
                f"Invalid value: '{kind}'. Supported values are: "
                f"{', '.join(repr(k) for k in sorted(allowed))}.",
                f"{where}.type",
            )
        fault = _part_error(part, where)
        if fault is not None:
            return fault
    return None


def _part_error(part: dict[str, Any], where: str) -> Fault | None:
    kind = part["type"]
    if set(part) != {"type", kind}:
        extra = sorted(set(part) - {"type", kind})
        name = extra[0] if extra else kind
        return f"Unrecognized or missing parameter: '{where}.{name}'.", f"{where}.{name}"
    value = part[kind]
    if kind in ("text", "refusal"):
        return None if isinstance(value, str) else (f"Invalid type for '{where}.{kind}'.", where)
    if kind == "image_url":
        return _image_error(value, f"{where}.image_url")
    if kind == "file":
        return _file_error(value, f"{where}.file")
    return None


def _image_error(image: Any, where: str) -> Fault | None:
    if not isinstance(image, dict) or set(image) - {"url", "detail"}:
        return f"Invalid '{where}': expected an object with 'url' and 'detail'.", where
    url = image.get("url")
    if not isinstance(url, str) or not (
        url.startswith(("http://", "https://")) or _DATA_URL.match(url)
    ):
        return (
            f"Invalid '{where}.url'. Expected a valid URL, but got a value with an invalid format.",
            f"{where}.url",
        )
    if image.get("detail", "auto") not in ("auto", "low", "high"):
        return (
            f"Invalid value: '{image['detail']}'. Supported values are: 'auto', 'low' and 'high'.",
            f"{where}.detail",
        )
    return None


def _file_error(file: Any, where: str) -> Fault | None:
    if not isinstance(file, dict) or set(file) - {"file_data", "file_id", "filename"}:
        return f"Invalid '{where}': unknown fields.", where
    if "file_data" not in file and "file_id" not in file:
        return f"Missing required parameter: '{where}.file_data'.", f"{where}.file_data"
    data = file.get("file_data")
    if data is not None and not (isinstance(data, str) and _DATA_URL.match(data)):
        return f"Invalid '{where}.file_data': expected a base64 data URL.", f"{where}.file_data"
    if data is not None and not file.get("filename"):
        return f"Missing required parameter: '{where}.filename'.", f"{where}.filename"
    return None


def _format_error(response_format: Any, messages: list[dict[str, Any]]) -> Fault | None:
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        said = json.dumps([m.get("content") for m in messages]).lower()
        if "json" not in said:
            return (
                "'messages' must contain the word 'json' in some form, to use "
                "'response_format' of type 'json_object'.",
                "messages",
            )
        return None
    if kind != "json_schema":
        return (
            f"Invalid value: '{kind}'. Supported values are: 'text', 'json_object' and "
            "'json_schema'.",
            "response_format.type",
        )
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict) or not _NAME.match(str(spec.get("name", ""))):
        return "Missing or invalid 'response_format.json_schema.name'.", "response_format"
    schema = spec.get("schema")
    if not isinstance(schema, dict):
        return "Missing required parameter: 'response_format.json_schema.schema'.", (
            "response_format.json_schema.schema"
        )
    if spec.get("strict"):
        problem = _strict_problem(schema, ())
        if problem is not None:
            return (
                f"Invalid schema for response_format '{spec['name']}': {problem}",
                "response_format",
            )
    return None


def _strict_problem(schema: Any, context: tuple[str, ...]) -> str | None:
    """What strict structured outputs refuse: an object without `additionalProperties:
    false`, or with a property not listed in `required`."""
    if not isinstance(schema, dict):
        return None
    where = f"In context={context}, "
    if schema.get("type") == "object" or "properties" in schema:
        if schema.get("additionalProperties") is not False:
            return where + "'additionalProperties' is required to be supplied and to be false."
        missing = set(schema.get("properties") or {}) - set(schema.get("required") or [])
        if missing:
            return where + f"'required' is required to include every property: {sorted(missing)}."
    children: list[tuple[tuple[str, ...], Any]] = []
    for key in ("properties", "$defs", "definitions"):
        children += [((key, name), sub) for name, sub in (schema.get(key) or {}).items()]
    children += [(("anyOf",), sub) for sub in schema.get("anyOf") or []]
    if isinstance(schema.get("items"), dict):
        children.append((("items",), schema["items"]))
    for path, sub in children:
        problem = _strict_problem(sub, (*context, *path))
        if problem is not None:
            return problem
    return None


def answer_error(response_format: Any, answer: str) -> str | None:
    """Why `answer` could not be a model's answer under `response_format`, or None."""
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind not in ("json_object", "json_schema"):
        return None
    try:
        value = json.loads(answer)
    except json.JSONDecodeError:
        return f"the scripted answer {answer!r} is not JSON, but response_format asks for it"
    if kind == "json_object":
        return None if isinstance(value, dict) else "a json_object answer must be an object"
    try:
        Draft202012Validator(response_format["json_schema"]["schema"]).validate(value)
    except ValidationError as exc:
        return f"the scripted answer does not match the json_schema: {exc.message}"
    return None


# -- tools and tool_choice ------------------------------------------------------------

_FUNCTION_FIELDS = {"name", "description", "parameters", "strict"}
_CHOICES = ("none", "auto", "required")


def _tools_error(body: dict[str, Any]) -> Fault | None:
    tools = body.get("tools")
    if tools is None:
        for key in ("tool_choice", "parallel_tool_calls"):
            if body.get(key) is not None:
                return (
                    f"Invalid value for '{key}': '{key}' is only allowed when 'tools' are "
                    "specified.",
                    key,
                )
        return None
    for index, tool in enumerate(tools):
        fault = _tool_error(tool, f"tools[{index}]")
        if fault is not None:
            return fault
    return _choice_error(body.get("tool_choice"), declared(body))


def _tool_error(tool: Any, where: str) -> Fault | None:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else tool
        return f"Invalid value: '{kind}'. Supported values are: 'function' and 'custom'.", (
            f"{where}.type"
        )
    extra = sorted(set(tool) - {"type", "function"})
    if extra:
        return f"Unrecognized request argument supplied: {where}.{extra[0]}", f"{where}.{extra[0]}"
    function = tool.get("function")
    where = f"{where}.function"
    if not isinstance(function, dict):
        return f"Missing required parameter: '{where}'.", where
    extra = sorted(set(function) - _FUNCTION_FIELDS)
    if extra:
        return f"Unknown parameter: '{where}.{extra[0]}'.", f"{where}.{extra[0]}"
    if not _NAME.match(str(function.get("name", ""))):
        return f"Invalid '{where}.name': string does not match pattern.", f"{where}.name"
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        return f"Invalid type for '{where}.parameters': expected an object.", f"{where}.parameters"
    strict = function.get("strict")
    if strict is not None and not isinstance(strict, bool):
        return f"Invalid type for '{where}.strict': expected a boolean.", f"{where}.strict"
    if strict and parameters is not None:
        problem = _strict_problem(parameters, ())
        if problem is not None:
            return (
                f"Invalid schema for function '{function['name']}': {problem}",
                f"{where}.parameters",
            )
    return None


def declared(body: dict[str, Any]) -> list[str]:
    """The names of the functions a (valid) request declares."""
    return [tool["function"]["name"] for tool in body.get("tools") or ()]


def _choice_error(choice: Any, names: list[str]) -> Fault | None:
    if choice is None or choice in _CHOICES:
        return None
    if not isinstance(choice, dict):
        return (
            f"Invalid value: '{choice}'. Supported values are: 'none', 'auto' and 'required'.",
            "tool_choice",
        )
    kind = choice.get("type")
    if kind == "function":
        return _named_error(choice, {"type", "function"}, names, "tool_choice")
    if kind != "allowed_tools":
        return (
            f"Invalid value: '{kind}'. Supported values are: 'function', 'allowed_tools' and "
            "'custom'.",
            "tool_choice.type",
        )
    if set(choice) != {"type", "allowed_tools"}:
        extra = sorted(set(choice) ^ {"type", "allowed_tools"})[0]
        return f"Unrecognized or missing parameter: 'tool_choice.{extra}'.", f"tool_choice.{extra}"
    allowed = choice["allowed_tools"]
    where = "tool_choice.allowed_tools"
    if not isinstance(allowed, dict) or set(allowed) != {"mode", "tools"}:
        return f"Invalid '{where}': expected an object with 'mode' and 'tools'.", where
    if allowed["mode"] not in ("auto", "required"):
        return (
            f"Invalid value: '{allowed['mode']}'. Supported values are: 'auto' and 'required'.",
            f"{where}.mode",
        )
    if not isinstance(allowed["tools"], list):
        return f"Invalid type for '{where}.tools': expected an array.", f"{where}.tools"
    for index, tool in enumerate(allowed["tools"]):
        fault = _named_error(tool, {"type", "function"}, names, f"{where}.tools[{index}]")
        if fault is not None:
            return fault
    return None


def _named_error(value: Any, fields: set[str], names: list[str], where: str) -> Fault | None:
    """A `{"type": "function", "function": {"name"}}` naming a declared function."""
    if not isinstance(value, dict) or set(value) != fields or value["type"] != "function":
        return f"Invalid '{where}': expected {{'type': 'function', 'function': {{'name'}}}}.", where
    function = value["function"]
    if not isinstance(function, dict) or set(function) != {"name"}:
        return f"Missing required parameter: '{where}.function.name'.", f"{where}.function.name"
    if function["name"] not in names:
        return (
            f"Invalid value for '{where}': function '{function['name']}' is not among the "
            "functions in 'tools'.",
            where,
        )
    return None


def allowed_calls(body: dict[str, Any]) -> tuple[frozenset[str], bool]:
    """The functions a (valid) request lets the model call, and whether it must call one:
    `none` none, `auto` and `required` any declared, a named `function` that one (which it
    must call), `allowed_tools` those listed (and one of them, when its mode is
    `required`)."""
    names = frozenset(declared(body))
    choice = body.get("tool_choice")
    if not names or choice == "none":
        return frozenset(), False
    if not isinstance(choice, dict):
        return names, choice == "required"
    if choice["type"] == "function":
        return frozenset({choice["function"]["name"]}), True
    allowed = choice["allowed_tools"]
    listed = frozenset(tool["function"]["name"] for tool in allowed["tools"])
    return listed, allowed["mode"] == "required"


def calls_error(allowed: tuple[frozenset[str], bool], called: list[str]) -> str | None:
    """Why a model under `allowed` (`allowed_calls`) could not answer by calling
    `called`, or None."""
    names, required = allowed
    for name in called:
        if name not in names:
            return (
                f"the scripted call to '{name}' is not one the request lets the model make "
                f"(it may call: {sorted(names)})"
            )
    if required and not called:
        return "the request's tool_choice requires a tool call, but the scripted answer has none"
    return None
