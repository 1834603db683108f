"""A request body's JSON: standard JSON only, an object, nested at most MAX_JSON_DEPTH
levels, with finite numbers (`parse_json`), before any model sees it."""

from __future__ import annotations

import json
import math
from typing import Any

from ._errors import APIError
from ._validation_base import Json

# Real requests stay far below it (a tool's parameter schema is the deepest part); without
# a bound a body a few hundred levels deep parses, then exhausts the recursion limit of
# whichever recursive code meets it next (validation, encoding, the store).
MAX_JSON_DEPTH = 64
MAX_INT_DIGITS = 4300


def parse_json(body: bytes) -> Json:
    """The request body as a JSON object, or a 400 `invalid_json`.

    Stricter than `json.loads`: NaN, Infinity and numbers out of the range of a double
    (`1e309`) are refused rather than read as non-finite floats, which no standard JSON
    encoder can write back; so are lone surrogates and nesting past MAX_JSON_DEPTH."""
    if not body.strip():
        raise _invalid_json("The body is empty; send a JSON object.")
    try:
        value = json.loads(
            body,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
        )
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


def _bounded_int(text: str) -> int:
    # Python's own bound on reading an integer (its error would tell the client to change
    # an interpreter setting); no request needs a number nearly this long.
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"The number {text[:32]}... has more than {MAX_INT_DIGITS} digits.")
    return int(text)


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
