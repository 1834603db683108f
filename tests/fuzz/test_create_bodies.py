"""Fuzzing `POST /v1/responses` (issue 12, item 7): valid bodies, one part mutated at a time.

Each example takes one of a few valid create bodies (plain, items with a tool call and its
output, tools and tool_choice, a JSON-schema text format, metadata, background, stream, a
conversation) and changes one thing: a field (at any depth) replaced by other JSON
(nesting up to past the parser's own limit, out-of-range and non-finite numbers, huge
integers, unicode, NUL), removed, or joined by an unknown one; or the encoded body's
bytes (invalid UTF-8, a raw NUL, a cut). Against a real server process:

- no 5xx, and every error in the OpenAI envelope with an `x-request-id`;
- no hang: each request answers within its timeout (a stream runs to its end);
- a refused request stores nothing (the store's responses table, read beside the server);
- what is accepted comes back as standard JSON (no NaN or Infinity), in the answer, its
  events and a later GET.

Bounded: a fixed number of examples, derandomized so that CI runs the same ones (about
15 s here).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.support.schemas import validate_error_envelope
from tests.support.server import ServerProcess

Json = Any
Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Raw:
    """JSON text put into the body as is (what json.dumps cannot write: 1e309, NaN)."""

    text: str


def encode(value: Json, *, ascii_only: bool) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        fields = (
            f"{json.dumps(k, ensure_ascii=ascii_only)}:{encode(v, ascii_only=ascii_only)}"
            for k, v in value.items()
        )
        return "{" + ",".join(fields) + "}"
    if isinstance(value, list):
        return "[" + ",".join(encode(v, ascii_only=ascii_only) for v in value) + "]"
    return json.dumps(value, ensure_ascii=ascii_only)


# -- valid bodies -------------------------------------------------------------------------

CONVERSATION = "@conversation@"  # replaced by the id of a conversation made for the module

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
BODIES: list[dict[str, Json]] = [
    {"model": "embedded", "input": "hello"},
    {
        "model": "embedded",
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        "metadata": {"topic": "fuzz"},
        "temperature": 0.5,
        "top_p": 0.9,
        "max_output_tokens": 64,
        "parallel_tool_calls": False,
        "truncation": "disabled",
    },
    {
        "model": "embedded",
        "input": [
            {"role": "user", "content": "weather?"},
            {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            {
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Sunny.", "annotations": []}],
            },
            {"role": "user", "content": "thanks"},
        ],
        "tools": [{"type": "function", "name": "weather", "parameters": SCHEMA, "strict": True}],
        "tool_choice": {"type": "function", "name": "weather"},
    },
    {
        "model": "embedded",
        "input": "json please",
        "text": {"format": {"type": "json_schema", "name": "city", "schema": SCHEMA}},
        "reasoning": {"effort": "low"},
    },
    {"model": "embedded", "input": "later", "background": True, "metadata": {"k": "v"}},
    {"model": "embedded", "input": "stream", "stream": True, "stream_options": {}},
    {"model": "embedded", "input": "both", "background": True, "stream": True},
    {"model": "embedded", "input": "in a conversation", "conversation": CONVERSATION},
]


def paths(value: Json, prefix: Path_ = ()) -> Iterator[Path_]:
    """Every field and array element of `value`, at any depth."""
    children = value.items() if isinstance(value, dict) else enumerate(value)
    for key, child in children:
        yield (*prefix, key)
        if isinstance(child, dict | list) and child:
            yield from paths(child, (*prefix, key))


def copy(value: Json) -> Json:
    return json.loads(json.dumps(value))


# -- mutations ----------------------------------------------------------------------------

NON_FINITE = ["1e309", "-1e309", "1E400", "-2.5e99999", "NaN", "Infinity", "-Infinity"]
FINITE_EDGES = [0.0, -0.0, 5e-324, 1.7976931348623157e308, 2**53 + 1, 2**63, -(2**63) - 1]

text = st.text(alphabet=st.characters(codec="utf-8"), max_size=20)  # NUL included
leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([30, 400, 4000, 5000]).map(lambda n: Raw("1" + "0" * n))  # 5000: past
    # Python's 4300 digits, refused
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(FINITE_EDGES)
    | st.sampled_from(NON_FINITE).map(Raw)
    | text
)
json_values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
deep = st.builds(
    lambda depth, kind: (
        Raw("[" * depth + "]" * depth) if kind else Raw('{"a":' * depth + "1" + "}" * depth)
    ),
    st.one_of(st.integers(1, 70), st.integers(900, 1100)),
    st.booleans(),
)
replacement = json_values | deep


def like(value: Json) -> st.SearchStrategy[Json]:
    """Other values of the type of `value`: what a valid body may well hold there."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, int | float):
        return st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    if isinstance(value, str):
        return text | st.sampled_from(["", "\x00", "\u2028", "😀" * 50, "[[words 2]]"])
    if isinstance(value, list):
        return st.lists(json_values, max_size=3)
    return st.dictionaries(text, json_values, max_size=3)


@st.composite
def mutated_body(draw: st.DrawFn) -> dict[str, Json]:
    body = copy(draw(st.sampled_from(BODIES)))
    path = draw(st.sampled_from(list(paths(body))))
    *parents, last = path
    parent = body
    for key in parents:
        parent = parent[key]
    action = draw(st.sampled_from(["replace", "replace", "replace", "remove", "add"]))
    if action == "remove":
        del parent[last]
    elif action == "add" and isinstance(parent, dict):
        parent[draw(text.filter(lambda k: k not in parent))] = draw(replacement)
    else:
        parent[last] = draw(like(parent[last]) | replacement)
    return body


@st.composite
def corrupted(draw: st.DrawFn, raw: bytes) -> bytes:
    """`raw` with its bytes damaged: invalid UTF-8, a raw NUL, or cut short."""
    where = draw(st.integers(0, len(raw)))
    kind = draw(st.sampled_from(["bad-utf8", "nul", "cut"]))
    if kind == "cut":
        return raw[:where]
    damage = (
        b"\x00" if kind == "nul" else draw(st.sampled_from([b"\xff", b"\xc3(", b"\xed\xa0\x80"]))
    )
    return raw[:where] + damage + raw[where:]


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    body = draw(mutated_body())
    raw = encode(body, ascii_only=draw(st.booleans())).encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 9)) == 0:  # one in ten: damage the bytes as well
        raw = draw(corrupted(raw))
    return raw


# -- the server ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("fuzz")
    process = ServerProcess(folder / "responses.db", args=("--embedded-words", "3")).start()
    yield process
    process.kill()


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30.0) as client:
        yield client


@pytest.fixture(scope="module")
def conversation(http: httpx.Client) -> str:
    created = http.post("/v1/conversations", json={"items": []})
    assert created.status_code == 200, created.text
    conversation_id: str = created.json()["id"]
    return conversation_id


def stored(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        count: int = connection.execute("SELECT count(*) FROM responses").fetchone()[0]
        return count


def strict_json(text: str) -> Json:
    """Parse as standard JSON: NaN and Infinity fail."""

    def refuse(name: str) -> None:
        raise AssertionError(f"non-standard JSON ({name}) in {text[:200]!r}")

    return json.loads(text, parse_constant=refuse)


def check_refusal(response: httpx.Response) -> None:
    assert response.headers.get("x-request-id"), "every response needs an x-request-id"
    assert response.headers["content-type"].startswith("application/json"), response.text
    validate_error_envelope(strict_json(response.text))


def check_accepted(http: httpx.Client, response: httpx.Response) -> None:
    if response.headers["content-type"].startswith("text/event-stream"):
        events = [
            strict_json(line.removeprefix("data: "))
            for line in response.text.splitlines()
            if line.startswith("data: ")
        ]
        assert events, response.text
        response_id = events[0]["response"]["id"]
    else:
        response_id = strict_json(response.text)["id"]
    again = http.get(f"/v1/responses/{response_id}")
    assert again.status_code == 200, again.text
    strict_json(again.text)


@settings(
    max_examples=250,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(raw=requests())
def test_a_mutated_create_body_is_served_or_refused_cleanly(
    raw: bytes, server: ServerProcess, http: httpx.Client, conversation: str
) -> None:
    raw = raw.replace(CONVERSATION.encode(), conversation.encode())
    before = stored(server.db)
    response = http.post("/v1/responses", content=raw, headers={"content-type": "application/json"})
    event(f"HTTP {response.status_code}")  # shown by --hypothesis-show-statistics
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        check_refusal(response)
        assert stored(server.db) == before, f"refused ({response.status_code}) but stored"
    else:
        assert response.status_code == 200, response.text
        check_accepted(http, response)
