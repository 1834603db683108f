"""A minimal JSON value that a JSON schema accepts: the embedded model's answer to a
request whose `text.format` is a `json_schema`, so that structured outputs
(`client.responses.parse(text_format=Model)`) work offline.

It covers what structured-output schemas use: `$ref` (a JSON pointer into the schema
itself: `#`, `#/$defs/...`), `type` (or a list of types), `const`, `enum`, `anyOf` /
`oneOf` (a `null` branch first, then a scalar one), `allOf`, an object's `required`
properties (from `properties`, else `additionalProperties`), `minItems` (from
`prefixItems`, then `items`), `minLength`, numeric bounds (exactly: an integer bound
beyond a double's range stays an integer) and a few string formats. Anything else falls
back to the simplest value of its type.

The schema is the client's, so building is bounded, and what cannot be built within the
bounds raises `UnbuildableSchema` (saying why, for the client) rather than running away
or answering a value the schema refuses:

- MAX_STEPS: every expansion step counts against one budget (a schema node built, a
  `$ref` or `allOf` followed, a key merged, a `required` name, an element of a `const`),
  so a `$ref` cycle through `allOf` (about k^depth nodes for k branches) stops within
  milliseconds instead of minutes;
- MAX_DEPTH: nesting, counting each `$ref` and `allOf` followed: a schema whose every
  branch recurses has no finite instance (an `anyOf` branch that recurses too deep gives
  way to the next one);
- MAX_BYTES: the instance's size as compact JSON, counted exactly while it is built. An
  array's `items` instance is built once and repeated, so `minItems` costs no work, but
  nested arrays multiply sizes, and the product is what is capped;
- a `$ref` that names nothing in the schema, and a number too long to write.

The create check (`_validation_output.py`) builds the instance once, to refuse such a
schema with a 400 before anything is stored; the embedded model builds it again, within
the same bounds, when it answers.
"""

from __future__ import annotations

import json
import math
from json.encoder import encode_basestring_ascii
from typing import Any

# A step costs 1-3 microseconds (measured on a loaded 2-core machine: 4,000 steps, the
# worst case, took 10 ms there), and the create runs the builder on the event loop.
# 4,000 is about 2,000 properties reached through `$ref`s: far more than structured
# outputs use, and refusing beyond it is what keeps one request from stalling the rest.
MAX_STEPS = 4_000
MAX_DEPTH = 32  # OpenAI allows 10 levels of nesting; an `anyOf` is a level here too
MAX_BYTES = 256 * 1024  # about 64k tokens of JSON: the smallest answer, not a large one

_FORMATS = {
    "date-time": "1970-01-01T00:00:00Z",
    "date": "1970-01-01",
    "time": "00:00:00Z",
    "email": "a@example.com",
    "uri": "https://example.com",
    "uuid": "00000000-0000-0000-0000-000000000000",
}

_RANKS = {"null": 0, "boolean": 1, "integer": 1, "number": 1, "string": 1}  # `anyOf` order
_COMPACT = (",", ":")  # how the answer is written: JSON without spaces


class UnbuildableSchema(ValueError):
    """The schema's minimal instance cannot be built within the bounds; the message
    completes "Invalid schema for response_format 'name': ..." for the client."""


class _TooDeep(UnbuildableSchema):
    """Past MAX_DEPTH: another `anyOf` / `oneOf` branch may still bottom out."""


def minimal_json(schema: Any) -> str:
    """The smallest value `schema` accepts, as compact JSON; `UnbuildableSchema` if it is
    out of bounds.

    It is built as JSON text, not as a value to encode afterwards: a repeated array item
    is then one string joined many times at C speed, where encoding a value of the same
    size would walk every repetition."""
    return _Builder(schema).build(schema, 0)


class _Builder:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.steps = 0
        self.targets: dict[str, dict[str, Any]] = {}  # `$ref` -> its schema, flattened
        self.given: dict[int, str] = {}  # each `const` / `enum` value is encoded once

    def spend(self, steps: int) -> None:
        self.steps += steps
        if self.steps > MAX_STEPS:
            raise UnbuildableSchema(
                f"building its smallest instance takes more than {MAX_STEPS} steps (each "
                "property, item, branch and $ref followed is one): the schema is too large, "
                "or a $ref cycle through anyOf or oneOf makes it so."
            )

    def build(self, node: Any, depth: int) -> str:
        self.spend(1)
        _check_depth(depth)
        if not isinstance(node, dict):
            return "null"  # `true`, or not a schema: anything goes
        node = self._flatten(node, depth)
        if "const" in node:
            return self._given(node["const"])
        enum = node.get("enum")
        if isinstance(enum, list) and enum:
            return self._given(enum[0])
        for key in ("anyOf", "oneOf"):
            branches = node.get(key)
            if isinstance(branches, list) and branches:
                return self._any_of(branches, depth)
        kind = self._type_of(node)
        if kind == "object":
            return self._object(node, depth)
        if kind == "array":
            return self._array(node, depth)
        if kind == "string":
            return self._string(node)
        if kind in ("integer", "number"):
            return _number_text(_number(node, integer=kind == "integer"))
        return "false" if kind == "boolean" else "null"

    def _flatten(self, node: dict[str, Any], depth: int) -> dict[str, Any]:
        """`node` with its `$ref` and `allOf` merged in; `node` itself (no copy) if it
        has neither, as most nodes do."""
        if "$ref" not in node and "allOf" not in node:
            return node
        ref, parts = node.get("$ref"), node.get("allOf")
        if isinstance(ref, str):
            target = self._flattened(ref, depth + 1)
            self.spend(1 + _copying(len(target) + len(node)))
            rest = {k: v for k, v in node.items() if k != "$ref"}
            node = {**target, **rest} if rest else target  # (never changed: shared)
        if isinstance(parts, list):
            _check_depth(depth + 1)
            self.spend(1 + _copying(len(node)))
            merged = {k: v for k, v in node.items() if k != "allOf"}
            for part in parts:
                self.spend(1)
                if isinstance(part, dict):
                    merged = self._merge(merged, self._flatten(part, depth + 1))
            node = merged
        return node

    def _merge(self, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        """`b` over `a` (allOf), their `properties` and `required` names together."""
        self.spend(_copying(len(a) + len(b)))
        merged = {**a, **b}
        if isinstance(a.get("properties"), dict) and isinstance(b.get("properties"), dict):
            self.spend(_copying(len(a["properties"]) + len(b["properties"])))
            merged["properties"] = {**a["properties"], **b["properties"]}
        if isinstance(a.get("required"), list) and isinstance(b.get("required"), list):
            self.spend(_copying(len(a["required"]) + len(b["required"])))
            merged["required"] = [*a["required"], *b["required"]]
        return merged

    def _flattened(self, ref: str, depth: int) -> dict[str, Any]:
        """The schema `ref` names, flattened once: a `$ref` cycle never finishes flattening,
        so only what bottoms out is kept."""
        _check_depth(depth)
        target = self.targets.get(ref)
        if target is None:
            target = self.targets[ref] = self._flatten(self._pointer(ref), depth)
        return target

    def _pointer(self, ref: str) -> dict[str, Any]:
        """The schema a `#`-relative JSON pointer (RFC 6901) names in the root."""
        node: Any = self.root if ref == "#" or ref.startswith("#/") else None
        self.spend(_copying(ref.count("/")))  # before a long pointer is split
        for token in ref[2:].split("/") if ref.startswith("#/") else ():
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict):
                node = node.get(token)
            elif isinstance(node, list) and token.isascii() and token.isdigit():
                node = node[int(token)] if len(token) < 10 and int(token) < len(node) else None
            else:
                node = None
        if isinstance(node, bool):
            return {}  # `true`: anything goes (`false` accepts nothing: nor does any value)
        if not isinstance(node, dict):
            shown = ref if len(ref) <= 64 else ref[:61] + "..."
            raise UnbuildableSchema(
                f"its $ref '{shown}' names no schema in it (only JSON pointers into the "
                "schema itself, such as '#/$defs/Name', are supported)."
            )
        return node

    def _any_of(self, branches: list[Any], depth: int) -> str:
        """The first branch that builds, simplest first; a branch that recurses too deep
        gives way to the next, within the one budget of steps."""
        *others, last = self._ordered(branches, depth)
        for branch in others:
            try:
                return self.build(branch, depth + 1)
            except _TooDeep:
                pass
        return self.build(last, depth + 1)

    def _ordered(self, branches: list[Any], depth: int) -> list[Any]:
        """`null` branches first (the smallest value), then scalar ones (they cannot
        recurse), then the rest, each group in the schema's order."""
        self.spend(len(branches))
        return sorted(branches, key=lambda branch: self._rank(branch, depth))

    def _rank(self, branch: Any, depth: int) -> int:
        if not isinstance(branch, dict):
            return 2
        try:
            node = self._flatten(branch, depth + 1)
        except _TooDeep:
            return 2
        if "const" in node or "enum" in node:
            return 1
        return _RANKS.get(self._type_of(node) or "", 2)

    def _type_of(self, node: dict[str, Any]) -> str | None:
        kind = node.get("type")
        if isinstance(kind, list):
            self.spend(_copying(len(kind)))
            return "null" if "null" in kind else next((k for k in kind if isinstance(k, str)), None)
        if isinstance(kind, str):
            return kind
        if "properties" in node or "required" in node:
            return "object"
        if "items" in node or "prefixItems" in node:
            return "array"
        return None

    def _object(self, node: dict[str, Any], depth: int) -> str:
        properties = node.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        others = node.get("additionalProperties")
        others = others if isinstance(others, dict) else {}
        required = node.get("required")
        required = required if isinstance(required, list) else []
        self.spend(_copying(len(required)))
        names = dict.fromkeys(n for n in required if isinstance(n, str))  # each name once
        members: list[str] = []
        size = 1 + max(len(names), 1)  # braces and commas
        for name in names:
            member = f"{_text(name)}:{self.build(properties.get(name, others), depth + 1)}"
            size = _capped(size + len(member))
            members.append(member)
        return "{" + ",".join(members) + "}"

    def _array(self, node: dict[str, Any], depth: int) -> str:
        items, prefix = node.get("items"), node.get("prefixItems")
        if isinstance(items, list):  # the tuple form of drafts before 2020-12
            items, prefix = node.get("additionalItems"), items
        prefix = prefix if isinstance(prefix, list) else []
        count = _count(node.get("minItems"))
        elements: list[str] = []
        size = 1 + max(count, 1)  # brackets and commas
        for schema in prefix[:count]:
            elements.append(self.build(schema, depth + 1))
            size = _capped(size + len(elements[-1]))
        rest = count - len(elements)
        if rest > 0:
            # Built once and repeated: the work is one item's; the size, all of them,
            # is checked before the text is joined.
            item = self.build(items if isinstance(items, dict) else {}, depth + 1)
            _capped(size + rest * len(item))
            elements += [item] * rest
        return "[" + ",".join(elements) + "]"

    def _string(self, node: dict[str, Any]) -> str:
        form = node.get("format")
        text = _FORMATS.get(form, "") if isinstance(form, str) else ""
        length = max(len(text), _count(node.get("minLength")))
        _capped(length + 2)  # before the string is made
        return _text(text.ljust(length, "a"))

    def _given(self, value: Any) -> str:
        """A value the schema gives (`const`, `enum`), encoded once however often a `$ref`
        brings it back, and measured (bounded) before it is encoded."""
        text = self.given.get(id(value))
        if text is None:
            self._measure(value, 0)
            text = self.given[id(value)] = json.dumps(value, separators=_COMPACT)
        return text

    def _measure(self, value: Any, size: int) -> int:
        """`size` plus the compact JSON length of `value`, refused once past MAX_BYTES."""
        self.spend(1)
        if isinstance(value, dict):
            size += 1 + max(len(value), 1)
            for key, item in value.items():
                size = self._measure(item, _capped(size + len(_text(key)) + 1))
            return size
        if isinstance(value, list):
            size += 1 + max(len(value), 1)
            for item in value:
                size = self._measure(item, size)
            return size
        return _capped(size + len(_text(value) if isinstance(value, str) else _number_text(value)))


def _copying(keys: int) -> int:
    """The steps that copying or scanning `keys` keys costs: about an eighth of building a
    node each (measured), so that a large schema merged again and again costs its size."""
    return keys // 8


def _check_depth(depth: int) -> None:
    if depth > MAX_DEPTH:
        raise _TooDeep(
            f"it nests more than {MAX_DEPTH} levels deep, counting each $ref and allOf "
            "followed (a schema that always recurses has no finite instance)."
        )


def _capped(size: int) -> int:
    if size > MAX_BYTES:
        raise UnbuildableSchema(
            f"its smallest instance is larger than {MAX_BYTES} bytes of JSON (minItems or "
            "minLength too large, or arrays nested in arrays multiplying them)."
        )
    return size


def _text(text: str) -> str:
    """`text` as a JSON string, refused before it is encoded if it could not fit."""
    _capped(len(text) + 2)
    return encode_basestring_ascii(text)  # as json.dumps writes it, without its overhead


def _number_text(value: Any) -> str:
    """A number (or `true`, `false`, `null`) as json.dumps writes it, without its
    overhead (a few microseconds a call, for a `const` of many numbers)."""
    if value is None or isinstance(value, bool):
        return "null" if value is None else "true" if value else "false"
    try:
        return int.__repr__(value) if isinstance(value, int) else json.dumps(value)
    except ValueError:  # an integer past `sys.get_int_max_str_digits()`
        raise UnbuildableSchema(
            "a number its bounds ask for has too many digits to be written."
        ) from None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _bound(node: dict[str, Any], key: str) -> int | float | None:
    """A numeric bound as given: a JSON integer stays an exact Python int, whatever its
    size (converting one beyond a double's range to float raises OverflowError)."""
    value = node.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None  # not JSON: the body's parser refuses it, but the schema is anyone's
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _number(node: dict[str, Any], *, integer: bool) -> int | float:
    """The value nearest 0 within the bounds (an integer for `integer`); integral bounds
    are exact ints, so that `exclusiveMinimum` + 1 is past the bound at any magnitude."""
    low, high = _bound(node, "minimum"), _bound(node, "maximum")
    above, below = _bound(node, "exclusiveMinimum"), _bound(node, "exclusiveMaximum")
    value: int | float = 0
    if low is not None and value < low:
        value = low
    if above is not None and value <= above:
        value = math.floor(above) + 1 if integer else above + 1
    if high is not None and value > high:
        value = high
    if below is not None and value >= below:
        value = math.ceil(below) - 1 if integer else below - 1
    if integer and isinstance(value, float):  # a fractional minimum (up) or maximum (down)
        return math.ceil(value) if value > 0 else math.floor(value)
    return value
