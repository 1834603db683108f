"""A `text.format` JSON schema the embedded model cannot answer within bounds is refused
at create; numeric bounds of any size are answered exactly (a red-team report).

The bugs: the embedded model answers a `json_schema` format with a minimal instance of
the schema, built with a depth bound only. A 238-byte schema whose definition is `allOf`
of itself (three times) blocked the event loop for minutes, and again after every
restart, since the recovered response ran again; four arrays nested with `minItems` 64
(294 bytes) made a 34 MB answer, five used over 2 GB; and `minimum: 1e400` written as an
integer ended the response `failed` with `server_error` and a logged traceback. The fix
(server/_minimal_instance.py): one budget of steps, a depth bound and a size cap, checked
at create (a 400 `invalid_json_schema`, `param: text.format.schema`, nothing stored) and
again when a stored response runs; bounds are exact integers. The builder's own cases are
tests/server/test_minimal_instance.py.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.integration._responses_support import MODEL, post_stream, text_of
from tests.support.peek import count
from tests.support.schemas import validate_error_envelope
from tests.support.server import ServerProcess
from tests.support.waiting import wait_terminal


def _self_all_of(k: int) -> dict[str, Any]:
    return {"$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}] * k}}, "$ref": "#/$defs/a"}


def _nested_arrays(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(levels):
        schema = {"type": "array", "items": schema, "minItems": 64}
    return schema


HOSTILE = [
    pytest.param(_self_all_of(3), "levels deep", id="allOf-self-cycle-k3"),
    pytest.param(_self_all_of(4), "levels deep", id="allOf-self-cycle-k4"),
    pytest.param(
        {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}] * 4}}, "$ref": "#/$defs/a"},
        "steps",
        id="anyOf-self-cycle-k4",
    ),
    pytest.param(_nested_arrays(4), "bytes", id="nested-arrays-4"),
    pytest.param(_nested_arrays(5), "bytes", id="nested-arrays-5"),
]
MODES = {
    "background": {"background": True},
    "plain": {},
}


def _format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"format": {"type": "json_schema", "name": "x", "schema": schema}}


def _stored(server: ServerProcess) -> int:
    return count(server.db, "SELECT count(*) FROM responses")


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(("schema", "reason"), HOSTILE)
def test_a_schema_out_of_bounds_is_refused_at_once_and_the_server_keeps_answering(
    server: ServerProcess, http: httpx.Client, schema: dict[str, Any], reason: str, mode: str
) -> None:
    before = _stored(server)
    body = {"model": "m", "input": "hi", "text": _format(schema), **MODES[mode]}

    answer = http.post("/v1/responses", json=body)  # (before the fix: minutes, or GBs)

    assert answer.status_code == 400, answer.text
    validate_error_envelope(answer.json())
    error = answer.json()["error"]
    assert (error["param"], error["code"]) == ("text.format.schema", "invalid_json_schema")
    assert error["message"].startswith("Invalid schema for response_format 'x': ")
    assert reason in error["message"]
    assert _stored(server) == before  # nothing stored, so nothing to recover and rerun
    assert http.get("/healthz", timeout=10).status_code == 200


def test_a_streamed_create_is_refused_before_its_stream_starts(
    server: ServerProcess, http: httpx.Client
) -> None:
    body = {"model": MODEL, "input": "hi", "text": _format(_self_all_of(3)), "stream": True}

    answer = http.post("/v1/responses", json=body)

    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == "text.format.schema"


BIG = 10**400  # an integer beyond a double's range: JSON allows it


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        pytest.param({"type": "number", "minimum": BIG}, str(BIG), id="minimum"),
        pytest.param({"type": "integer", "exclusiveMinimum": BIG}, str(BIG + 1), id="exclusive"),
        pytest.param({"type": "number", "maximum": -BIG}, str(-BIG), id="maximum"),
    ],
)
def test_a_bound_beyond_a_double_is_answered_exactly_in_the_background(
    http: httpx.Client, schema: dict[str, Any], expected: str
) -> None:
    body = {"model": MODEL, "input": "hi", "text": _format(schema), "background": True}
    created = http.post("/v1/responses", json=body)
    assert created.status_code == 200, created.text

    final = wait_terminal(http, created.json()["id"])

    assert final["status"] == "completed", final["error"]
    assert text_of(final) == expected


def test_a_recursive_schema_with_a_way_out_is_answered(http: httpx.Client) -> None:
    """Bounds refuse what has no answer within them, not recursion as such."""
    node = {
        "type": "object",
        "properties": {
            "label": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
            "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]},
        },
        "required": ["label", "children", "next"],
        "additionalProperties": False,
    }
    schema = {"$defs": {"node": node}, "$ref": "#/$defs/node"}

    events = post_stream(http, input="hi", text=_format(schema))

    final = events[-1]["response"]
    assert final["status"] == "completed"
    assert text_of(final) == '{"label":"","children":[],"next":null}'
