"""A minimal JSON value that a JSON schema accepts: the embedded model's answer to a
request whose `text.format` is a `json_schema`, so that structured outputs
(`client.responses.parse(text_format=Model)`) work offline.

It covers what structured-output schemas use: `$ref` into the schema's own `$defs` /
`definitions`, `type` (or a list of types), `const`, `enum`, `anyOf` / `oneOf` (a `null`
branch first: the smallest value), `allOf`, an object's `required` properties, `minItems`,
`minLength`, numeric bounds and a few string formats. Anything else falls back to the
simplest value of its type, and it never raises: the schema is the client's. A budget of
nodes and a depth bound keep a recursive or hostile schema from running away.
"""

from __future__ import annotations

import math
from typing import Any

MAX_DEPTH = 32
MAX_NODES = 10_000
MAX_REPEAT = 64  # at most this many array items or string characters are made

_FORMATS = {
    "date-time": "1970-01-01T00:00:00Z",
    "date": "1970-01-01",
    "time": "00:00:00Z",
    "email": "a@example.com",
    "uri": "https://example.com",
    "uuid": "00000000-0000-0000-0000-000000000000",
}


def minimal_instance(schema: Any) -> Any:
    return _Builder(schema).build(schema, 0)


class _Builder:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.nodes = 0

    def build(self, node: Any, depth: int) -> Any:
        self.nodes += 1
        if depth > MAX_DEPTH or self.nodes > MAX_NODES or not isinstance(node, dict):
            return None  # `true`, `{}`-like or not a schema: anything goes
        node = self._flatten(node, depth)
        if "const" in node:
            return node["const"]
        enum = node.get("enum")
        if isinstance(enum, list) and enum:
            return enum[0]
        for key in ("anyOf", "oneOf"):
            branches = node.get(key)
            if isinstance(branches, list) and branches:
                return self.build(self._simplest(branches, depth), depth + 1)
        return self._of_type(node, _type_of(node), depth)

    def _flatten(self, node: dict[str, Any], depth: int) -> dict[str, Any]:
        """`node` with its `$ref` and `allOf` merged in."""
        ref = node.get("$ref")
        if isinstance(ref, str) and depth < MAX_DEPTH:
            target = self._resolve(ref)
            node = {
                **self._flatten(target, depth + 1),
                **{k: v for k, v in node.items() if k != "$ref"},
            }
        parts = node.get("allOf")
        if isinstance(parts, list) and depth < MAX_DEPTH:
            merged: dict[str, Any] = {k: v for k, v in node.items() if k != "allOf"}
            for part in parts:
                if isinstance(part, dict):
                    merged = _merge(merged, self._flatten(part, depth + 1))
            node = merged
        return node

    def _resolve(self, ref: str) -> dict[str, Any]:
        if not ref.startswith("#"):
            return {}
        node: Any = self.root
        for token in ref[1:].split("/")[1:] if ref != "#" else []:
            token = token.replace("~1", "/").replace("~0", "~")
            node = node.get(token) if isinstance(node, dict) else None
        return node if isinstance(node, dict) else {}

    def _simplest(self, branches: list[Any], depth: int) -> Any:
        for branch in branches:
            if isinstance(branch, dict) and _type_of(self._flatten(branch, depth)) == "null":
                return branch
        return branches[0]

    def _of_type(self, node: dict[str, Any], kind: str | None, depth: int) -> Any:
        if kind == "object":
            properties = node.get("properties")
            properties = properties if isinstance(properties, dict) else {}
            required = node.get("required")
            names = (
                [n for n in required if isinstance(n, str)] if isinstance(required, list) else []
            )
            return {name: self.build(properties.get(name, {}), depth + 1) for name in names}
        if kind == "array":
            items = node.get("items")
            count = min(_count(node.get("minItems")), MAX_REPEAT)
            return [self.build(items if isinstance(items, dict) else {}, depth + 1)] * count
        if kind == "string":
            text = _FORMATS.get(node.get("format") or "", "")
            return text + "a" * max(0, min(_count(node.get("minLength")), MAX_REPEAT) - len(text))
        if kind in ("integer", "number"):
            return _number(node, integer=kind == "integer")
        if kind == "boolean":
            return False
        return None


def _type_of(node: dict[str, Any]) -> str | None:
    kind = node.get("type")
    if isinstance(kind, list):
        return "null" if "null" in kind else next((k for k in kind if isinstance(k, str)), None)
    if isinstance(kind, str):
        return kind
    if "properties" in node or "required" in node:
        return "object"
    if "items" in node:
        return "array"
    return None


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    merged = {**a, **b}
    for key in ("properties",):
        if isinstance(a.get(key), dict) and isinstance(b.get(key), dict):
            merged[key] = {**a[key], **b[key]}
    if isinstance(a.get("required"), list) and isinstance(b.get("required"), list):
        merged["required"] = [*a["required"], *b["required"]]
    return merged


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _number(node: dict[str, Any], *, integer: bool) -> int | float:
    def bound(key: str) -> float | None:
        value = node.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return float(value) if math.isfinite(value) else None

    low, high = bound("minimum"), bound("maximum")
    above, below = bound("exclusiveMinimum"), bound("exclusiveMaximum")
    value = 0.0
    if low is not None and value < low:
        value = low
    if above is not None and value <= above:
        value = above + 1
    if high is not None and value > high:
        value = high
    if below is not None and value >= below:
        value = below - 1
    if integer:
        return math.ceil(value) if low is not None or above is not None else math.floor(value)
    return int(value) if value.is_integer() else value
