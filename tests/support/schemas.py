"""Validate wire objects against the two vendored API schemas.

Two documents describe the Responses API and this server must satisfy both
(see ``schemas/SOURCES.md``):

* ``openresponses``: the Open Responses specification (JSON, OpenAPI 3.1);
* ``openai``: the subset of OpenAI's published OpenAPI document (YAML, OpenAPI 3.1).

OpenAPI 3.1 schemas are JSON Schema 2020-12, so each document is registered
whole as one resource and every ``#/components/...`` reference resolves inside
the document it came from. Validators are built once per schema name and cached.

Every ``validate_*`` function raises ``AssertionError`` naming the document, the
schema and each failing JSON path, so it reads well in a pytest failure.

Deliberate divergence: the ``error`` stream event has incompatible shapes in the
two documents (flat in OpenAI, nested under ``error`` in Open Responses), and the
openai SDK raises ``APIError`` on any payload with a top-level ``error`` key.
This project sends the flat OpenAI shape (docs/protocol.md section 10, item 5), so
``validate_event`` checks ``error`` events against the OpenAI schema only.

A JSON-schema ``text.format`` echoed in a Response cannot satisfy both either: Open
Responses declares its ``schema`` as ``null`` (not echoed) where OpenAI requires the schema
object, and OpenAI's document types ``description`` as a string where the API (and the
openai SDK) gives ``null`` when none was set, which Open Responses requires as a key. We
send OpenAI's shape with ``description: null``; ``validate_response`` checks the echoed
format against each document as that document words it (``_as_in``).

OpenAI's reasoning effort has `minimal` and `max`, which the openai SDK sends, where Open
Responses' ``ReasoningEffortEnum`` stops at `none` ... `xhigh`. We accept and echo
OpenAI's values; ``validate_response`` checks an echoed `minimal` or `max` against Open
Responses as `null` (no effort it names was asked for).

Likewise the reasoning-text events are named ``response.reasoning_text.delta`` /
``.done`` by OpenAI (and the openai SDK) but ``response.reasoning.delta`` / ``.done``
by Open Responses, with the same fields. We send OpenAI's names, and
``validate_event`` checks them against the Open Responses schema of the other name.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Final, Literal

import httpx
import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

__all__ = [
    "OPENAI",
    "OPENRESPONSES",
    "OPENRESPONSES_EVENT_ALIASES",
    "OPENRESPONSES_SKIPPED_EVENT_TYPES",
    "event_schema_name",
    "validate_compacted",
    "validate_error_envelope",
    "validate_event",
    "validate_item",
    "validate_item_list",
    "validate_response",
]

Document = Literal["openresponses", "openai"]

OPENRESPONSES: Final[Document] = "openresponses"
OPENAI: Final[Document] = "openai"

# Event types checked against the OpenAI schema only (see the module docstring).
OPENRESPONSES_SKIPPED_EVENT_TYPES: Final[frozenset[str]] = frozenset({"error"})
# OpenAI event type -> the Open Responses event type with the same shape.
OPENRESPONSES_EVENT_ALIASES: Final[Mapping[str, str]] = {
    "response.reasoning_text.delta": "response.reasoning.delta",
    "response.reasoning_text.done": "response.reasoning.done",
}

_DIR: Final = Path(__file__).parent / "schemas"
_FILES: Final[Mapping[Document, str]] = {
    OPENRESPONSES: "openresponses-openapi.json",
    OPENAI: "openai-openapi-responses-subset.yaml",
}
_URIS: Final[Mapping[Document, str]] = {
    OPENRESPONSES: "urn:durable-responses:schemas:openresponses",
    OPENAI: "urn:durable-responses:schemas:openai",
}
# Which component describes each kind of object, per document.
_RESPONSE: Final[Mapping[Document, str]] = {OPENRESPONSES: "ResponseResource", OPENAI: "Response"}
_ITEM: Final[Mapping[Document, str]] = {OPENRESPONSES: "ItemField", OPENAI: "OutputItem"}
# Open Responses has no HTTP error envelope; its streaming ``ErrorPayload`` has the
# same four required keys as OpenAI's ``Error`` and is checked against the inner object.
_ERROR_INNER: Final[Mapping[Document, str]] = {OPENRESPONSES: "ErrorPayload", OPENAI: "Error"}
# The union of stream events in each document.
_EVENT_UNION_OPENAI: Final = "ResponseStreamEvent"


@cache
def _document(doc: Document) -> dict[str, Any]:
    path = _DIR / _FILES[doc]
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        loaded: Any = json.loads(text)
    else:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        loaded = yaml.load(text, Loader=loader)
    if not isinstance(loaded, dict):
        raise TypeError(f"{path} is not a mapping")
    return loaded


def _schemas(doc: Document) -> dict[str, Any]:
    schemas: dict[str, Any] = _document(doc)["components"]["schemas"]
    return schemas


@lru_cache(maxsize=1)
def _registry() -> Registry[Any]:
    registry: Registry[Any] = Registry()
    for doc, uri in _URIS.items():
        resource = Resource.from_contents(_document(doc), default_specification=DRAFT202012)
        registry = registry.with_resource(uri, resource)
    return registry


@cache
def _validator(doc: Document, name: str) -> Draft202012Validator:
    if name not in _schemas(doc):
        raise KeyError(f"{doc}: no component schema named {name!r}")
    schema = {"$ref": f"{_URIS[doc]}#/components/schemas/{name}"}
    return Draft202012Validator(schema, registry=_registry())


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _type_const(schema: Mapping[str, Any]) -> str | None:
    """The single ``type`` value an event schema allows, if it pins one."""
    prop = schema.get("properties", {}).get("type", {})
    enum = prop.get("enum")
    if isinstance(enum, list) and len(enum) == 1 and isinstance(enum[0], str):
        return enum[0]
    const = prop.get("const")
    return const if isinstance(const, str) else None


@cache
def _event_schemas(doc: Document) -> Mapping[str, str]:
    """Map each stream event ``type`` to its component name in ``doc``."""
    schemas = _schemas(doc)
    if doc == OPENAI:
        names = [_ref_name(s["$ref"]) for s in schemas[_EVENT_UNION_OPENAI]["anyOf"]]
    else:
        # One schema per event type; the WebSocket envelopes are not SSE events.
        names = [n for n in schemas if n.endswith("StreamingEvent")]
    mapping: dict[str, str] = {}
    for name in names:
        event_type = _type_const(schemas[name])
        if event_type is None:
            raise ValueError(f"{doc}: event schema {name} does not pin its type")
        if event_type in mapping:
            raise ValueError(f"{doc}: two schemas for {event_type}: {mapping[event_type]}, {name}")
        mapping[event_type] = name
    return mapping


def event_schema_name(doc: Document, event_type: str) -> str | None:
    """The component that describes ``event_type`` in ``doc``, or None if it has none."""
    return _event_schemas(doc).get(event_type)


def _path(error: ValidationError) -> str:
    return "$" + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)


def _closest_branch(error: ValidationError) -> list[ValidationError]:
    """The failures of the oneOf/anyOf alternative that came closest to matching.

    Alternatives rejected on their ``type`` discriminator are skipped first, so a
    broken message is explained by the message schema, not by a reasoning item's.
    """
    branches: dict[Any, list[ValidationError]] = {}
    for sub in error.context or ():
        branches.setdefault(sub.schema_path[0], []).append(sub)

    def rejected_on_type(errors: list[ValidationError]) -> bool:
        return any(list(e.path) == ["type"] or e.validator == "type" for e in errors)

    candidates = [b for b in branches.values() if not rejected_on_type(b)]
    if not candidates:
        candidates = list(branches.values())
    return min(candidates, key=len)


def _describe(error: ValidationError, depth: int = 0) -> Iterable[str]:
    yield f"{'  ' * depth}- at {_path(error)}: {error.message}"
    # For oneOf/anyOf the top message only says "not valid under any"; show the
    # closest alternative's own failures, which is where the real problem is.
    if error.context and depth < 4:
        for sub in _closest_branch(error)[:5]:
            yield from _describe(sub, depth + 1)


def _check(doc: Document, name: str, obj: Any, what: str) -> None:
    errors = sorted(_validator(doc, name).iter_errors(obj), key=lambda e: list(map(str, e.path)))
    if not errors:
        return
    lines = [f"{what} does not validate against {doc} schema {name}:"]
    for error in errors[:10]:
        lines.extend(_describe(error))
    if len(errors) > 10:
        lines.append(f"... and {len(errors) - 10} more")
    raise AssertionError("\n".join(lines))


def validate_response(obj: Mapping[str, Any]) -> None:
    """Validate a Response object against Open Responses and OpenAI."""
    for doc in (OPENRESPONSES, OPENAI):
        _check(doc, _RESPONSE[doc], _as_in(doc, obj), f"response {obj.get('id')!r}")


# OpenAI's reasoning efforts that Open Responses' ReasoningEffortEnum lacks.
_OPENAI_ONLY_EFFORTS: Final[frozenset[str]] = frozenset({"minimal", "max"})


def _as_in(doc: Document, obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """`obj` with its echoed JSON-schema text format, and its reasoning effort, as `doc`
    words them (module docstring)."""
    reasoning = obj.get("reasoning")
    if (
        doc == OPENRESPONSES
        and isinstance(reasoning, Mapping)
        and reasoning.get("effort") in _OPENAI_ONLY_EFFORTS
    ):
        obj = {**obj, "reasoning": {**reasoning, "effort": None}}
    text = obj.get("text")
    fmt = text.get("format") if isinstance(text, Mapping) else None
    if not isinstance(fmt, Mapping) or fmt.get("type") != "json_schema":
        return obj
    if doc == OPENRESPONSES:
        fmt = {**fmt, "schema": None}
    elif fmt.get("description") is None:
        fmt = {k: v for k, v in fmt.items() if k != "description"}
    return {**obj, "text": {**text, "format": fmt}}


def validate_compacted(obj: Mapping[str, Any]) -> None:
    """Validate a compacted response (`POST /responses/compact`) against both documents."""
    for doc in (OPENRESPONSES, OPENAI):
        _check(doc, "CompactResource", obj, f"compacted response {obj.get('id')!r}")


def validate_item(item: Mapping[str, Any]) -> None:
    """Validate one output item (message, function_call, function_call_output, ...)."""
    for doc in (OPENRESPONSES, OPENAI):
        _check(doc, _ITEM[doc], item, f"item {item.get('type')!r} {item.get('id')!r}")


def validate_item_list(page: Mapping[str, Any], of: Literal["input_items", "conversation"]) -> None:
    """Validate a page of stored items (`input_items.list`, a conversation's items) against
    OpenAI's ResponseItemList / ConversationItemList (Open Responses has no such lists)."""
    name = "ResponseItemList" if of == "input_items" else "ConversationItemList"
    _check(OPENAI, name, page, f"{of} page")


def validate_event(event: Mapping[str, Any]) -> None:
    """Validate one decoded stream event against its per-type schema in both documents.

    An event type unknown to a document is a failure, except that ``error`` events
    are checked against OpenAI only and reasoning-text events are checked under
    their Open Responses name (see the module docstring).
    """
    event_type = event.get("type")
    if not isinstance(event_type, str):
        raise AssertionError(f"event has no string 'type': {event!r}")
    what = f"event {event_type} (seq {event.get('sequence_number')!r})"
    for doc in (OPENRESPONSES, OPENAI):
        checked: Mapping[str, Any] = event
        doc_type = event_type
        if doc == OPENRESPONSES:
            if event_type in OPENRESPONSES_SKIPPED_EVENT_TYPES:
                continue
            if event_type in OPENRESPONSES_EVENT_ALIASES:
                doc_type = OPENRESPONSES_EVENT_ALIASES[event_type]
                checked = {**event, "type": doc_type}
        name = event_schema_name(doc, doc_type)
        if name is None:
            raise AssertionError(f"{what}: {doc} has no schema for event type {doc_type!r}")
        if isinstance(checked.get("response"), Mapping):
            checked = {**checked, "response": _as_in(doc, checked["response"])}
        _check(doc, name, checked, what)


def refused(answer: httpx.Response, param: str, code: str) -> str:
    """The message of a 400 in the OpenAI envelope with this param and code."""
    assert answer.status_code == 400, answer.text
    validate_error_envelope(answer.json())
    error = answer.json()["error"]
    assert (error["param"], error["code"], error["type"]) == (param, code, "invalid_request_error")
    message: str = error["message"]
    return message


def validate_error_envelope(body: Mapping[str, Any]) -> None:
    """Validate an HTTP error body ``{"error": {message, type, param, code}}``."""
    _check(OPENAI, "ErrorResponse", body, "error body")
    inner = body.get("error")
    _check(OPENRESPONSES, _ERROR_INNER[OPENRESPONSES], inner, "error body's 'error'")
