"""Query strings, read into values or OpenAI-style 400s naming the parameter."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from starlette.datastructures import QueryParams

from ._errors import APIError
from ._validation_output import check_include


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


def query_after(query: Mapping[str, str]) -> str | None:
    """The item id a page starts after. No stored id holds a NUL character (PostgreSQL's
    text cannot), so one here names no item: a 400, as for an unknown id, not a store
    error."""
    after = query.get("after")
    if after is not None and "\x00" in after:
        raise APIError(
            400, "No item with this id in this list.", param="after", code="invalid_value"
        )
    return after


def query_include(query: QueryParams) -> None:
    """Check the `include[]` values of a read as a create's `include` is checked: unknown
    values and hosted tools' are a 400 naming them. A stored object holds what its create
    asked for; a read's `include` adds nothing to it (docs/protocol.md, section 8)."""
    for index, value in enumerate([*query.getlist("include[]"), *query.getlist("include")]):
        check_include(value, f"include[{index}]")
