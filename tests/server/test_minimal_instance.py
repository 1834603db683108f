"""The embedded model's answer to a `json_schema` format, in process
(server/_minimal_instance.py).

The bug (a red-team report): the builder followed `$ref` and `allOf` with a depth bound
only, so a 238-byte schema whose definition is `allOf` of itself three times took about
3^16 merges (minutes of a blocked event loop, again after every restart, as the
recovered response ran again); an array's item was repeated as one shared value, so
nested `minItems` multiplied into a 34 MB answer (4 levels) or 2 GB of memory (5); and an
integer bound beyond a double's range raised OverflowError while the response ran. The
fix: every step counts against one budget, the instance's size as JSON is capped while it
is built, and what is out of bounds raises `UnbuildableSchema` (a 400 at create:
tests/integration/test_json_schema_bounds.py); numeric bounds are exact Python ints.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel

from recovery import ModelError, ModelRequest
from server import EmbeddedModel
from server._errors import APIError
from server._minimal_instance import MAX_BYTES, MAX_DEPTH, UnbuildableSchema, minimal_json
from server._validation_output import validate_text_format

BIG = 10**400  # a JSON integer no double can hold


def _self_all_of(k: int) -> dict[str, Any]:
    return {"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}] * k}}, "$ref": "#/$defs/a"}


def _self_any_of(k: int) -> dict[str, Any]:
    return {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}] * k}}, "$ref": "#/$defs/a"}


def _nested_arrays(levels: int, min_items: int = 64) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema, "minItems": min_items}
    return schema


def _wide(properties: int) -> dict[str, Any]:
    names = [f"p{i}" for i in range(properties)]
    return {
        "type": "object",
        "properties": {name: {"$ref": "#/$defs/S"} for name in names},
        "required": names,
        "$defs": {"S": {"type": "string"}},
    }


REFUSED = [
    pytest.param(_self_all_of(3), "levels deep", id="allOf-self-cycle-k3"),
    pytest.param(_self_all_of(4), "levels deep", id="allOf-self-cycle-k4"),
    pytest.param(_self_any_of(3), "steps", id="anyOf-self-cycle-k3"),
    pytest.param(
        {"$defs": {"a": {"oneOf": [{"items": {"$ref": "#/$defs/a"}, "minItems": 1}] * 4}}}
        | {"$ref": "#/$defs/a"},
        "steps",
        id="oneOf-items-cycle",
    ),
    pytest.param(
        {"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]},
        "levels deep",
        id="required-self-reference",
    ),
    pytest.param(
        {"type": "array", "prefixItems": [{"$ref": "#"}], "minItems": 1},
        "levels deep",
        id="prefixItems-self-reference",
    ),
    pytest.param(
        {"type": "object", "additionalProperties": {"$ref": "#"}, "required": ["x"]},
        "levels deep",
        id="additionalProperties-self-reference",
    ),
    pytest.param(
        {"anyOf": [{"type": "array", "items": {"$ref": "#"}, "minItems": 1}] * 2},
        "steps",
        id="every-branch-recurses",
    ),
    pytest.param(_nested_arrays(4), "bytes", id="nested-arrays-4"),
    pytest.param(_nested_arrays(5), "bytes", id="nested-arrays-5"),
    pytest.param({"type": "string", "minLength": BIG}, "bytes", id="minLength-huge"),
    pytest.param({"type": "array", "minItems": BIG}, "bytes", id="minItems-huge"),
    pytest.param(
        {"type": "array", "items": {"const": "x" * 1000}, "minItems": 1000},
        "bytes",
        id="const-repeated",
    ),
    pytest.param(_wide(5_000), "steps", id="too-many-properties"),
    pytest.param({"$ref": "#/$defs/missing"}, "names no schema", id="ref-to-nothing"),
    pytest.param({"$ref": "https://example.com/s"}, "names no schema", id="remote-ref"),
    pytest.param(
        {"type": "integer", "exclusiveMinimum": int("9" * 4300)},
        "too many digits",
        id="bound-past-the-digit-limit",
    ),
]


@pytest.mark.parametrize(("schema", "reason"), REFUSED)
def test_a_schema_out_of_bounds_is_refused_saying_why(schema: dict[str, Any], reason: str) -> None:
    with pytest.raises(UnbuildableSchema, match=reason):
        minimal_json(schema)


class Address(BaseModel):
    city: str
    zip_code: int


class Person(BaseModel):
    name: str
    kind: Literal["friend", "colleague"]
    home: Address
    work: Address | None
    tags: list[str]


class Tree(BaseModel):
    label: str
    children: list[Tree]


ANSWERED = [
    pytest.param(Person.model_json_schema(), id="pydantic-model"),
    pytest.param(Tree.model_json_schema(), id="recursive-pydantic-model"),
    pytest.param(
        {"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}}
        | {"required": ["next"]},
        id="linked-list",
    ),
    pytest.param(
        {"$defs": {"v": {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/v"}}]}}}
        | {"$ref": "#/$defs/v"},
        id="recursive-array-without-minItems",
    ),
    pytest.param(
        {"anyOf": [{"type": "array", "items": {"$ref": "#"}, "minItems": 1}, {"type": "string"}]},
        id="recursive-branch-first",
    ),
    pytest.param(_nested_arrays(2), id="nested-arrays-2"),
    pytest.param(_wide(500), id="500-properties"),
    pytest.param(
        {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]}
        | {"minItems": 3, "items": {"type": "boolean"}},
        id="tuple",
    ),
    pytest.param(
        {"allOf": [{"properties": {"a": {"type": "integer", "minimum": 3}}, "required": ["a"]}]}
        | {"properties": {"b": {"const": {"k": [1, "x"]}}}, "required": ["b", "b"]},
        id="allOf-and-repeated-required",
    ),
    pytest.param(
        {"type": "object", "additionalProperties": {"type": "string", "minLength": 2}}
        | {"required": ["x"]},
        id="required-from-additionalProperties",
    ),
    pytest.param({"type": "string", "format": ["not", "a", "name"]}, id="odd-format"),
    pytest.param({"type": "array", "items": {"type": "integer"}, "minItems": 100}, id="100-items"),
]


@pytest.mark.parametrize("schema", ANSWERED)
def test_a_schema_within_bounds_gets_an_instance_it_accepts(schema: dict[str, Any]) -> None:
    text = minimal_json(schema)

    assert len(text) <= MAX_BYTES
    Draft202012Validator(schema).validate(json.loads(text))


def test_a_pydantic_model_parses_the_answer() -> None:
    person = Person.model_validate_json(minimal_json(Person.model_json_schema()))

    assert person.work is None  # the `null` branch: the smallest value


def test_a_recursion_with_a_way_out_takes_it() -> None:
    schema = {
        "anyOf": [{"type": "array", "items": {"$ref": "#"}, "minItems": 1}, {"type": "string"}]
    }

    assert json.loads(minimal_json(schema)) == ""


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param({"type": "number", "minimum": BIG}, BIG, id="minimum"),
        pytest.param({"type": "integer", "exclusiveMinimum": BIG}, BIG + 1, id="exclusiveMinimum"),
        pytest.param({"type": "integer", "maximum": -BIG}, -BIG, id="maximum"),
        pytest.param({"type": "number", "exclusiveMaximum": -BIG}, -BIG - 1, id="exclusiveMaximum"),
        pytest.param({"type": "integer", "minimum": 1e300}, int(1e300), id="large-float"),
        pytest.param({"type": "integer", "exclusiveMinimum": 2.5}, 3, id="fraction"),
        pytest.param({"type": "number", "exclusiveMinimum": 0.5}, 1.5, id="number-fraction"),
    ],
)
def test_numeric_bounds_are_exact_at_any_magnitude(schema: dict[str, Any], expected: Any) -> None:
    value = json.loads(minimal_json(schema))

    assert value == expected
    Draft202012Validator(schema).validate(value)


def test_nesting_up_to_the_depth_bound_is_answered() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(MAX_DEPTH):
        schema = {"type": "array", "items": schema, "minItems": 1}

    assert json.loads(minimal_json(schema)) is not None
    with pytest.raises(UnbuildableSchema, match="levels deep"):
        minimal_json({"type": "array", "items": schema, "minItems": 1})


# -- where the bounds are enforced: at create, and when a stored response runs --------------


def test_the_create_check_refuses_it_as_a_400_naming_the_schema() -> None:
    text_format = {"type": "json_schema", "name": "loop", "schema": _self_all_of(3)}

    with pytest.raises(APIError) as refused:
        validate_text_format(text_format, path="text.format")

    error = refused.value
    assert (error.status, error.param, error.code) == (
        400,
        "text.format.schema",
        "invalid_json_schema",
    )
    assert error.message.startswith("Invalid schema for response_format 'loop': it nests")


async def test_a_stored_schema_out_of_bounds_fails_its_response_without_a_traceback() -> None:
    """A response stored before the create check (recovered after an upgrade) runs the
    builder again: it ends `failed`, saying why, rather than blocking the server."""
    request = ModelRequest(
        model="embedded",
        instructions=None,
        input=[{"type": "message", "role": "user", "content": "hi"}],
        tools=[],
        text_format={"type": "json_schema", "name": "arrays", "schema": _nested_arrays(5)},
    )

    with pytest.raises(ModelError) as failed:
        async for _ in EmbeddedModel().stream(request):
            pass

    assert failed.value.code == "invalid_prompt"
    assert "Invalid schema for response_format 'arrays'" in failed.value.message
