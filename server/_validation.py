"""Request bodies and query strings, validated into plain dicts or OpenAI-style 400s.

Bodies are checked in two layers so that every error names its parameter the way
OpenAI does (`input[2].content`, `tools[0].type`): pydantic models with `extra="forbid"`
for the fixed shapes, and small dispatch functions for the `type`-tagged unions (input
items, content parts, tools, tool_choice), which pick the model by tag and build the path
themselves. `_validation_errors.py` turns pydantic's errors into those 400s, and
`_openapi.py` documents the same models. What a request asks of the answer (`text`,
`reasoning`, `include`) is checked in `_validation_output.py`; what the server cannot
honour is refused there and here (input files), never dropped.

Before any of that, a body must be standard JSON: an object, nested at most
MAX_JSON_DEPTH levels, with finite numbers only (`parse_json`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, WithJsonSchema

from ._errors import APIError
from ._validation_base import Json, _Strict
from ._validation_base import validate as validate  # also the routes'
from ._validation_errors import invalid_type
from ._validation_output import Include, ReasoningParam, TextParam, check_output_options

# -- content parts and items ----------------------------------------------------------


class InputText(_Strict):
    type: Literal["input_text"]
    text: str


class InputImage(_Strict):
    type: Literal["input_image"]
    detail: Literal["low", "high", "auto", "original"] = "auto"
    image_url: str  # a URL or a data: URL; images by `file_id` are refused (no Files API)
    file_id: Annotated[None, WithJsonSchema({"type": "null"})] = None


class InputFile(_Strict):
    type: Literal["input_file"]
    file_id: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None


class OutputText(_Strict):
    type: Literal["output_text"]
    text: str
    annotations: list[Json] = Field(default_factory=list)
    logprobs: list[Json] = Field(default_factory=list)


class Refusal(_Strict):
    type: Literal["refusal"]
    refusal: str


# `input_file` (InputFile, kept to document stored items) is refused: no model is sent
# files yet, and a part the model never sees must not be accepted (_validate_part).
PART_MODELS: dict[str, type[_Strict]] = {
    "input_text": InputText,
    "input_image": InputImage,
    "output_text": OutputText,
    "refusal": Refusal,
}


class Message(_Strict):
    type: Literal["message"] | None = None
    id: str | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[Json]
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    phase: Literal["commentary", "final_answer"] | None = None


class FunctionCall(_Strict):
    type: Literal["function_call"]
    id: str | None = None
    call_id: Annotated[str, Field(min_length=1, max_length=64)]
    name: Annotated[str, Field(min_length=1)]
    arguments: str
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    namespace: str | None = None


class FunctionCallOutput(_Strict):
    type: Literal["function_call_output"]
    id: str | None = None
    call_id: Annotated[str, Field(min_length=1, max_length=64)]
    output: str | list[Json]
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class Reasoning(_Strict):
    type: Literal["reasoning"]
    id: str | None = None
    summary: list[Json] = Field(default_factory=list)
    content: list[Json] | None = None
    encrypted_content: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


ITEM_MODELS: dict[str, type[_Strict]] = {
    "message": Message,
    "function_call": FunctionCall,
    "function_call_output": FunctionCallOutput,
    "reasoning": Reasoning,
}


class ToolChoiceFunction(_Strict):
    type: Literal["function"]
    name: str


class ToolChoiceAllowedTools(_Strict):
    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[Json]


TOOL_CHOICE_MODELS: dict[str, type[_Strict]] = {
    "function": ToolChoiceFunction,
    "allowed_tools": ToolChoiceAllowedTools,
}


# The field of an item that holds content parts, by item type.
_PARTS_KEY = {"message": "content", "function_call_output": "output"}


class FunctionTool(_Strict):
    type: Literal["function"]
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")]
    description: str | None = None
    parameters: Json | None = None
    strict: bool | None = None
    defer_loading: bool | None = None
    allowed_callers: list[str] | None = None
    output_schema: Json | None = None


# -- create ---------------------------------------------------------------------------


def check_metadata(value: dict[str, str]) -> dict[str, str]:
    if len(value) > 16:
        raise ValueError("metadata can have at most 16 key-value pairs")
    for key, item in value.items():
        if len(key) > 64:
            raise ValueError(f"metadata key '{key[:16]}...' is longer than 64 characters")
        if len(item) > 512:
            raise ValueError(f"metadata value of '{key}' is longer than 512 characters")
    return value


Metadata = Annotated[
    dict[str, str],
    AfterValidator(check_metadata),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": 16,
            "propertyNames": {"maxLength": 64},
            "additionalProperties": {"type": "string", "maxLength": 512},
        }
    ),
]


class ConversationRef(_Strict):
    id: str


class StreamOptions(_Strict):
    include_obfuscation: bool | None = None


class CreateResponse(_Strict):
    model: str
    input: str | list[Json] | None = None
    instructions: str | None = None
    tools: list[Json] | None = None
    tool_choice: Literal["none", "auto", "required"] | Json | None = None
    parallel_tool_calls: bool | None = None
    previous_response_id: str | None = None
    conversation: str | ConversationRef | None = None
    store: bool | None = None
    background: bool | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    metadata: Metadata | None = None
    max_output_tokens: Annotated[int, Field(ge=16)] | None = None
    max_tool_calls: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    include: Include | None = None
    text: TextParam | None = None
    reasoning: ReasoningParam | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    safety_identifier: Annotated[str, Field(max_length=64)] | None = None
    user: str | None = None
    service_tier: (
        Literal["auto", "default", "flex", "scale", "priority", "fast", "ultrafast"] | None
    ) = None
    # Extension (docs/protocol.md section 10): what to do when the lane is busy.
    multitask_strategy: Literal["reject", "enqueue", "interrupt", "rollback"] | None = None
    # Known but not supported here: refused with a clear message
    # (_validation_output.UNSUPPORTED_PARAMETERS).
    prompt: Annotated[Json | None, WithJsonSchema({"type": "null"})] = None
    context_management: Annotated[Any, WithJsonSchema({"type": "null"})] = None
    # 2026 additions that only tune the service: accepted and ignored.
    access_programs: Any = None
    background_options: Any = None
    image: Any = None
    moderation: Any = None
    prompt_cache_options: Any = None


# Deepest nesting of arrays and objects a JSON body may have (the body itself is level 1).
# Real requests stay far below it (a tool's parameter schema is the deepest part); without
# a bound a body a few hundred levels deep parses, then exhausts the recursion limit of
# whichever recursive code meets it next (validation, encoding, the store).
MAX_JSON_DEPTH = 64


def parse_json(body: bytes) -> Json:
    """The request body as a JSON object, or a 400 `invalid_json`.

    Stricter than `json.loads`: NaN, Infinity and numbers out of the range of a double
    (`1e309`) are refused rather than read as non-finite floats, which no standard JSON
    encoder can write back; so are lone surrogates and nesting past MAX_JSON_DEPTH."""
    if not body.strip():
        raise _invalid_json("The body is empty; send a JSON object.")
    try:
        value = json.loads(body, parse_constant=_reject_constant, parse_float=_finite_float)
        # A lone surrogate (a JSON "\\ud800" escape) parses, but can be neither stored
        # nor sent back: refuse it here rather than fail in the store.
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except ValueError as exc:  # JSONDecodeError and UnicodeError are ValueErrors
        raise _invalid_json(f"({exc})") from None
    except RecursionError:
        raise _invalid_json(f"(It is nested more than {MAX_JSON_DEPTH} levels deep.)") from None
    if not isinstance(value, dict):
        raise APIError(400, "The request body must be a JSON object.", code="invalid_json")
    if _nested_deeper_than(value, MAX_JSON_DEPTH):
        raise _invalid_json(f"(It is nested more than {MAX_JSON_DEPTH} levels deep.)")
    return value


def _invalid_json(detail: str) -> APIError:
    return APIError(
        400, f"We could not parse the JSON body of your request. {detail}", code="invalid_json"
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"The number {text[:32]} is out of range: numbers must be finite.")
    return number


def _nested_deeper_than(value: Json, limit: int) -> bool:
    """Whether arrays and objects nest more than `limit` levels (iterative: no recursion)."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        node, depth = pending.pop()
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, dict | list):
                if depth == limit:
                    return True
                pending.append((child, depth + 1))
    return False


def validate_create(body: Json, *, max_input_items: int = 2048, max_tools: int = 128) -> Json:
    params = validate(CreateResponse, body)
    check_output_options(params)
    if isinstance(params.get("conversation"), dict):
        params["conversation"] = params["conversation"]["id"]
    if params.get("conversation") and params.get("previous_response_id"):
        raise APIError(
            400,
            "Parameters 'conversation' and 'previous_response_id' cannot be used together.",
            param="conversation",
            code="invalid_parameter_combination",
        )
    if params.get("input") is None:
        if not (params.get("conversation") or params.get("previous_response_id")):
            raise APIError(
                400,
                "Missing required parameter: 'input'.",
                param="input",
                code="missing_required_parameter",
            )
        params["input"] = []
    elif isinstance(params["input"], list):
        params["input"] = validate_items(params["input"], path="input", limit=max_input_items)
    _check_length(params.get("tools") or [], "tools", max_tools)
    params["tools"] = [
        validate_tool(tool, path=f"tools[{i}]") for i, tool in enumerate(params.get("tools") or [])
    ]
    _check_tool_choice(params)
    if params.get("background") and params.get("store") is False:
        raise APIError(
            400, "Background mode requires store=true.", param="store", code="invalid_value"
        )
    if params.get("stream_options") and not params.get("stream"):
        raise APIError(
            400,
            "stream_options can only be set when stream is true.",
            param="stream_options",
            code="invalid_value",
        )
    for name in (
        "access_programs",
        "background_options",
        "context_management",
        "image",
        "moderation",
        "prompt_cache_options",
        "prompt",
    ):
        params.pop(name, None)
    return params


def _check_length(items: list[Any], path: str, limit: int) -> None:
    if len(items) > limit:
        raise APIError(
            400,
            f"Invalid '{path}': array too long. Expected an array with maximum length {limit}, "
            f"but got an array with length {len(items)} instead.",
            param=path,
            code="array_above_max_length",
        )


def validate_items(items: list[Any], *, path: str, limit: int | None = None) -> list[Json]:
    if limit is not None:
        _check_length(items, path, limit)
    return [validate_item(item, path=f"{path}[{i}]") for i, item in enumerate(items)]


def validate_item(item: Any, *, path: str) -> Json:
    if not isinstance(item, Mapping):
        raise invalid_type(path, "an object", item)
    kind = item.get("type") or "message"
    model = ITEM_MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise APIError(
            400,
            f"Input item type '{kind}' is not supported by this server. Supported types: "
            f"{', '.join(sorted(ITEM_MODELS))}.",
            param=f"{path}.type",
            code="unsupported_value",
        )
    value = validate(model, dict(item), path=path)
    key = _PARTS_KEY.get(kind)  # a reasoning item's `content` is not made of these parts
    parts = value.get(key) if key else None
    if key and isinstance(parts, list):
        value[key] = [
            _validate_part(part, path=f"{path}.{key}[{i}]") for i, part in enumerate(parts)
        ]
    return value


def _validate_part(part: Any, *, path: str) -> Json:
    if not isinstance(part, Mapping):
        raise invalid_type(path, "an object", part)
    kind = part.get("type")
    _refuse_unsent_part(part, path)
    model = PART_MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise APIError(
            400,
            f"Invalid value: '{kind}'. Supported values are: {', '.join(map(repr, PART_MODELS))}.",
            param=f"{path}.type",
            code="invalid_value",
        )
    return validate(model, dict(part), path=path)


def _refuse_unsent_part(part: Mapping[str, Any], path: str) -> None:
    """Refuse a content part no model would be sent (rather than drop it): files, and
    images by `file_id`, need a Files API this server does not have."""
    if part.get("type") == "input_file":
        raise APIError(
            400,
            f"Invalid content part '{path}': file inputs ('input_file') are not supported by "
            "this server yet; no model would see the file. Send its text as 'input_text' "
            "(or an image as 'input_image' with an image_url).",
            param=path,
            code="unsupported_value",
        )
    if part.get("type") == "input_image" and part.get("file_id") is not None:
        raise APIError(
            400,
            f"Invalid content part '{path}': images by 'file_id' are not supported by this "
            "server (it has no Files API); send the image as 'image_url', a URL or a "
            "data: URL.",
            param=path,
            code="unsupported_value",
        )


def validate_tool(tool: Any, *, path: str) -> Json:
    if not isinstance(tool, Mapping):
        raise invalid_type(path, "an object", tool)
    kind = tool.get("type")
    if kind != "function":
        raise APIError(
            400,
            f"Tool type '{kind}' is not supported by this server; only 'function' tools are.",
            param=f"{path}.type",
            code="unsupported_value",
        )
    value = validate(FunctionTool, dict(tool), path=path)
    value.setdefault("description", None)
    value.setdefault("parameters", None)
    value.setdefault("strict", True)
    return value


def _check_tool_choice(params: Json) -> None:
    choice = params.get("tool_choice")
    if not isinstance(choice, dict):
        return
    kind = choice.get("type")
    model = TOOL_CHOICE_MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise APIError(
            400,
            f"Tool choice type '{kind}' is not supported by this server.",
            param="tool_choice.type",
            code="unsupported_value",
        )
    params["tool_choice"] = choice = validate(model, choice, path="tool_choice")
    if kind == "function" and choice["name"] not in {tool["name"] for tool in params["tools"]}:
        raise APIError(
            400,
            f"Tool choice '{choice['name']}' not found in 'tools' parameter.",
            param="tool_choice",
            code="invalid_value",
        )


# -- conversations --------------------------------------------------------------------


class CreateConversation(_Strict):
    items: list[Json] | None = None
    metadata: Metadata | None = None


class UpdateConversation(_Strict):
    metadata: Metadata | None


class AddConversationItems(_Strict):
    items: list[Json]


# -- query strings --------------------------------------------------------------------


def query_list(query: Mapping[str, str], multi: list[tuple[str, str]], name: str) -> list[str]:
    """`include[]=a&include[]=b` (the SDK's brackets) or `include=a`."""
    return [v for k, v in multi if k in (name, f"{name}[]")]


def query_bool(query: Mapping[str, str], name: str, default: bool = False) -> bool:
    value = query.get(name)
    if value is None:
        return default
    if value.lower() in ("true", "1"):
        return True
    if value.lower() in ("false", "0"):
        return False
    raise APIError(
        400,
        f"Invalid value for '{name}': expected a boolean (true or false), got '{value}'.",
        param=name,
        code="invalid_value",
    )


# Query integers are stored and compared as SQLite integers: signed 64-bit.
INT64_MAX = 2**63 - 1
_INTEGER = re.compile(r"-?[0-9]+")


def query_int(
    query: Mapping[str, str], name: str, *, default: int | None, low: int, high: int = INT64_MAX
) -> int | None:
    value = query.get(name)
    if value is None:
        return default
    try:
        if not _INTEGER.fullmatch(value):  # int() also reads "1_000", " 5", other scripts' digits
            raise ValueError(value)
        number = int(value)
    except ValueError:
        raise APIError(
            400,
            f"Invalid type for '{name}': expected an integer, but got '{value}' instead.",
            param=name,
            code="invalid_type",
        ) from None
    if not low <= number <= high:
        bound = f"between {low} and {high}"
        raise APIError(
            400,
            f"Invalid value for '{name}': must be {bound}, got {number}.",
            param=name,
            code="invalid_value",
        )
    return number


def query_order(query: Mapping[str, str]) -> Literal["asc", "desc"]:
    value = query.get("order", "desc")
    if value == "asc":
        return "asc"
    if value == "desc":
        return "desc"
    raise APIError(
        400,
        f"Invalid value for 'order': expected 'asc' or 'desc', got '{value}'.",
        param="order",
        code="invalid_value",
    )
