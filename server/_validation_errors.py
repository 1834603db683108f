"""How a pydantic ValidationError becomes the OpenAI-style 400: which parameter it names
(`input[2].content`, never pydantic's union branches) and which code it carries
(`unknown_parameter`, `missing_required_parameter`, `invalid_type`, `invalid_value`)."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ._errors import APIError

# Pydantic names each branch of a union in an error's location (`str`,
# `list[dict[str,any]]`, `ConversationRef`, ...); these are not fields. Matched exactly,
# never by prefix: `stream`, `store` and `strict` are fields that begin with `str`. Not
# `bytes`: no request model has a bytes branch, and a logprob has a field of that name.
_UNION_TAGS = frozenset({"str", "int", "float", "bool", "none"})
_UNION_TAG_PREFIXES = ("list[", "dict[", "literal[", "function-", "json-or-python[", "tuple[")

_TYPE_NAMES = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a decimal",
    "bool_type": "a boolean",
    "dict_type": "an object",
    "list_type": "an array",
    "model_type": "an object",
    "model_attributes_type": "an object",
}


def to_api_error(exc: ValidationError, path: str, models: frozenset[str]) -> APIError:
    """The 400 for the most specific of `exc`'s errors, its parameter prefixed by `path`;
    `models` are the names of the models validated (union branches, not fields)."""
    every = exc.errors(include_url=False)
    # Of a union's errors, report the most specific: those that reached deepest into the
    # value (`input[0]` is not an object, rather than `input` is not a string).
    depth = max(len(_fields(tuple(e["loc"]), models)) for e in every)
    errors = [e for e in every if len(_fields(tuple(e["loc"]), models)) == depth]
    first = errors[0]
    param = _join(path, tuple(first["loc"]), models)
    kind = first["type"]
    if kind == "extra_forbidden":
        return APIError(
            400, f"Unknown parameter: '{param}'.", param=param, code="unknown_parameter"
        )
    if kind == "missing":
        return APIError(
            400,
            f"Missing required parameter: '{param}'.",
            param=param,
            code="missing_required_parameter",
        )
    type_errors = [e for e in errors if e["type"] in _TYPE_NAMES]
    if type_errors and len(type_errors) == len(errors):
        expected = " or ".join(dict.fromkeys(_TYPE_NAMES[e["type"]] for e in type_errors))
        return invalid_type(param, expected, first["input"])
    value_error = next((e for e in errors if e["type"] not in _TYPE_NAMES), first)
    param = _join(path, tuple(value_error["loc"]), models)
    message = value_error["msg"].removeprefix("Value error, ")
    return APIError(
        400, f"Invalid value for '{param}': {message}.", param=param, code="invalid_value"
    )


def invalid_type(path: str, expected: str, value: Any) -> APIError:
    return APIError(
        400,
        f"Invalid type for '{path}': expected {expected}, but got {_json_type(value)} instead.",
        param=path,
        code="invalid_type",
    )


def _fields(loc: tuple[int | str, ...], models: frozenset[str]) -> tuple[int | str, ...]:
    return tuple(
        part
        for part in loc
        if isinstance(part, int)
        or not (part in _UNION_TAGS or part.startswith(_UNION_TAG_PREFIXES) or part in models)
    )


def _join(path: str, loc: tuple[int | str, ...], models: frozenset[str]) -> str:
    out = path
    for part in _fields(loc, models):
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else part
    return out


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
