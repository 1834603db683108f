"""What an OpenAI Chat Completions endpoint refuses with a 400, for the fake upstream:
malformed message content parts (images, files), a malformed or non-strict
`response_format`, and a `json_object` request whose messages never say "json".

Each rule returns (message, param) in the words OpenAI uses, or None; `answer_error`
checks a scripted answer against the `response_format` it must honour (a real model
under structured outputs only ever answers valid JSON, so a script that does not is a
test's mistake, reported as loudly).
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
    return _format_error(body.get("response_format"), messages)


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
