"""Issue 12, item 3: no NaN or infinity gets in, and no non-standard JSON comes out.

The bug: Python's json.loads reads a number out of a double's range (`1e309`) as
infinity. Anywhere the server does not look at the number (text.format, tool parameters,
tool_choice, annotations of input items) it was stored with the response, which then ran:
a plain create answered 500, a background one 503 with `x-should-retry: true` (so the
SDK sent it again), and its events and every GET carried `Infinity`, which no JSON parser
but Python's reads. The fix: such numbers (and NaN, Infinity) are refused at the edge
with a 400 `invalid_json` before anything is stored, and every JSON encoder of the server
refuses to write a non-finite number.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import serving
from tests.support.peek import count
from tests.support.server import ServerProcess
from tests.support.stores import Location, Stores

OUT_OF_RANGE = ["1e309", "-1e309", "1E400", "123456789e999"]
PLACES = {
    "text.format": '"text": {"format": {"type": "json_schema", "name": "s", '
    '"schema": {"type": "number", "maximum": @N@}}}',
    "tool parameters": '"tools": [{"type": "function", "name": "f", '
    '"parameters": {"type": "number", "minimum": @N@}}]',
    "tool_choice": '"tool_choice": {"type": "allowed_tools", "mode": "auto", '
    '"tools": [{"type": "function", "name": "f", "weight": @N@}]}',
    "annotations": '"input": [{"role": "assistant", "content": [{"type": "output_text", '
    '"text": "a", "annotations": [{"type": "file_citation", "index": @N@}]}]}]',
}
MODES = {
    "plain": "",
    "background": ', "background": true',
    "stream": ', "stream": true',
    "background-stream": ', "background": true, "stream": true',
}


@pytest.fixture(scope="module")
def served(stores: Stores, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(stores, tmp_path_factory.mktemp("nonfinite")) as process:
        yield process


@pytest.fixture(scope="module")
def http(served: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, timeout=30.0) as client:
        yield client


def stored(db: Location) -> int:
    return count(db, "SELECT count(*) FROM responses")


def body(place: str, number: str, mode: str) -> bytes:
    fields = PLACES[place].replace("@N@", number)
    if '"input"' not in fields:
        fields += ', "input": "hi"'
    return f'{{"model": "embedded", {fields}{MODES[mode]}}}'.encode()


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("number", OUT_OF_RANGE)
@pytest.mark.parametrize("place", list(PLACES))
def test_an_out_of_range_number_is_refused_before_anything_is_stored(
    served: ServerProcess, http: httpx.Client, place: str, number: str, mode: str
) -> None:
    before = stored(served.db)

    response = http.post(
        "/v1/responses",
        content=body(place, number, mode),
        headers={"content-type": "application/json"},
    )

    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_json", None)
    assert number in error["message"]
    assert "x-should-retry" not in response.headers
    assert stored(served.db) == before


def strict(text: str) -> Any:
    def refuse(name: str) -> None:
        raise AssertionError(f"non-standard JSON: {name}")

    return json.loads(text, parse_constant=refuse)


EXTREMES = '{"max": 1.7976931348623157e308, "min": 5e-324, "zero": -0.0, "big": 1' + "0" * 400 + "}"


@pytest.mark.parametrize("mode", list(MODES))
def test_extreme_finite_numbers_come_back_as_standard_json(http: httpx.Client, mode: str) -> None:
    raw = (
        '{"model": "embedded", "input": "hi", "text": {"format": {"type": "json_schema", '
        f'"name": "s", "schema": {EXTREMES}}}}}{MODES[mode]}}}'
    )
    response = http.post(
        "/v1/responses", content=raw.encode(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 200, response.text
    if "stream" in mode:
        events = [
            strict(line.removeprefix("data: "))
            for line in response.text.splitlines()
            if line.startswith("data: ")
        ]
        response_id = events[0]["response"]["id"]
    else:
        response_id = strict(response.text)["id"]
    fetched = http.get(f"/v1/responses/{response_id}")
    schema = strict(fetched.text)["text"]["format"]["schema"]
    assert schema["max"] == 1.7976931348623157e308
    assert schema["big"] == 10**400
    if mode.startswith("background"):
        replay = http.get(f"/v1/responses/{response_id}", params={"stream": "true"})
        for line in replay.text.splitlines():
            if line.startswith("data: "):
                strict(line.removeprefix("data: "))
