"""What every request model shares: the strict base class and `validate`, which turns
pydantic's errors into OpenAI-style 400s naming the parameter (`_validation_errors.py`).

Every model of a request subclasses `_Strict`, wherever it is declared: the names of
those classes are what `validate` strips from pydantic's error locations (union branches,
not fields)."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ._validation_errors import to_api_error

Json = dict[str, Any]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def validate(model: type[_Strict], value: Any, *, path: str = "") -> Json:
    """Validate `value` against `model`; raise the OpenAI-style 400 for the first error."""
    try:
        return model.model_validate(value).model_dump(exclude_unset=True, by_alias=True)
    except ValidationError as exc:
        raise to_api_error(exc, path, _model_names()) from None


@cache
def _model_names() -> frozenset[str]:
    names: set[str] = set()
    pending: list[type[_Strict]] = [_Strict]
    while pending:
        cls = pending.pop()
        names.add(cls.__name__)
        pending.extend(cls.__subclasses__())
    return frozenset(names)
