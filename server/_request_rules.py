"""Request bodies validated into plain dicts or OpenAI-style 400s: the create request, its
input items, content parts, tools and tool_choice, and conversation items.

Bodies are checked in two layers so that every error names its parameter the way
OpenAI does (`input[2].content`, `tools[0].type`): pydantic models with `extra="forbid"`
for the fixed shapes (`_request_models.py`), and small dispatch functions here for the
`type`-tagged unions (input items, content parts, tools, tool_choice), which pick the
model by tag and build the path themselves. `_validation_errors.py` turns pydantic's
errors into those 400s, and `_openapi.py` documents the same models. What a request asks
of the answer (`text`, `reasoning`, `include`) is checked in `_validation_output.py`; what
the server cannot honour is refused there and here (image and file forms no model can be
sent: `_attachments.py`), never dropped.

Before any of that, a body must be standard JSON (`_json_body.parse_json`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._attachments import check_sizes, refuse_unsent_part
from ._errors import APIError
from ._request_models import (
    ITEM_MODELS,
    PART_MODELS,
    TOOL_CHOICE_MODELS,
    CreateResponse,
    FunctionTool,
)
from ._validation_base import Json, validate
from ._validation_errors import invalid_type
from ._validation_output import check_output_options

# The field of an item that holds content parts, by item type.
_PARTS_KEY = {"message": "content", "function_call_output": "output"}


def validate_create(
    body: Json,
    *,
    max_input_items: int = 2048,
    max_tools: int = 128,
    max_attachment_bytes: int = 5 * 1024 * 1024,
) -> Json:
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
        _check_unique_ids(params["input"], path="input")
        check_sizes(params["input"], path="input", max_bytes=max_attachment_bytes)
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


def _check_unique_ids(items: list[Json], *, path: str) -> None:
    """Refuse two items of one input with the same id (an `item_reference` counts as the
    item it names): a response's items are listed, paged and referred to by id."""
    seen: set[str] = set()
    for index, item in enumerate(items):
        item_id = item.get("id")
        if item_id is None:
            continue
        if item_id in seen:
            raise APIError(
                400,
                f"Duplicate item found with id '{item_id}'. Remove duplicate items from your "
                "input and try again.",
                param=f"{path}[{index}].id",
                code="duplicate_item",
            )
        seen.add(item_id)


def validate_item(item: Any, *, path: str) -> Json:
    if not isinstance(item, Mapping):
        raise invalid_type(path, "an object", item)
    kind = _item_type(item)
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
    if kind == "item_reference":
        value["type"] = kind
    key = _PARTS_KEY.get(kind)  # a reasoning item's `content` is not made of these parts
    parts = value.get(key) if key else None
    if key and isinstance(parts, list):
        allowed = _SAID if value.get("role") == "assistant" else _GIVEN
        value[key] = [
            _validate_part(part, path=f"{path}.{key}[{i}]", allowed=allowed)
            for i, part in enumerate(parts)
        ]
    return value


# What the model said (an assistant message's parts), and what it is given (every other
# message's, and a tool output's): as OpenAI, neither kind is accepted in place of the
# other, which a model's API would refuse only once the turn runs.
_SAID = ("output_text", "refusal")
_GIVEN = ("input_text", "input_image", "input_file")


def _item_type(item: Mapping[str, Any]) -> Any:
    """An item's type. Without one it is a message, unless it holds nothing but an `id`:
    then it is an `item_reference`, whose `type` OpenAI's schema lets clients leave out."""
    kind = item.get("type")
    if kind is not None:
        return kind
    if "id" in item and item.keys() <= {"id", "type"}:
        return "item_reference"
    return "message"


def _validate_part(part: Any, *, path: str, allowed: tuple[str, ...]) -> Json:
    if not isinstance(part, Mapping):
        raise invalid_type(path, "an object", part)
    kind = part.get("type")
    refuse_unsent_part(part, path)  # images and files: _attachments.py
    model = PART_MODELS.get(kind) if kind in allowed else None
    if model is None:
        raise APIError(
            400,
            f"Invalid value: '{kind}'. Supported values are: {', '.join(map(repr, allowed))}.",
            param=f"{path}.type",
            code="invalid_value",
        )
    return validate(model, dict(part), path=path)


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
    # Left None when the client leaves it out: an upstream applies its own default (a
    # Responses upstream makes the tool strict if its schema can be; Chat Completions does
    # not), where an explicit value is sent as given. The Response echoes `true`, as OpenAI.
    value.setdefault("strict", None)
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
    # Whether a named tool exists is checked at admission, where the agent's own tools
    # are known too.
    params["tool_choice"] = validate(model, choice, path="tool_choice")
