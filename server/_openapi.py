"""The API's own OpenAPI 3.1 document, served at /openapi.json and /v1/openapi.json.

What a request may carry is generated from the very models that validate it
(`_request_models.py`), with this server's configured limits (input items, tools): what we
accept is what we document. The tagged unions that `_request_rules.py` dispatches by hand
(input items, content parts, tools, tool_choice) are wired in here from the models of
each branch. What JSON Schema cannot say (nesting depth, parameters that exclude each
other, tool pairing) is said in descriptions. The response models below only document:
responses are built elsewhere, and a schemathesis test holds them to this document.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.json_schema import SkipJsonSchema, models_json_schema
from starlette.requests import Request
from starlette.responses import Response

from . import _request_models as v
from ._auth import _EXEMPT as NO_KEY_NEEDED  # the probes
from ._compact import CompactRequest
from ._conversations_routes import MAX_ITEMS as MAX_CONVERSATION_ITEMS
from ._input_tokens import CountInputTokens
from ._json_body import MAX_JSON_DEPTH
from ._query import INT64_MAX
from ._settings import Settings

Json = dict[str, Any]

_REF = "#/components/schemas/{model}"


# -- response shapes (documentation only) ---------------------------------------------


class _Out(BaseModel):
    """A response shape: every field listed is always present; more may be added."""

    model_config = ConfigDict(extra="allow")


class ErrorObject(_Out):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(_Out):
    error: ErrorObject


class InputTokensDetails(_Out):
    cached_tokens: int
    cache_write_tokens: int


class OutputTokensDetails(_Out):
    reasoning_tokens: int


class Usage(_Out):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ResponseError(_Out):
    code: str
    message: str


class IncompleteDetails(_Out):
    reason: str


class ReasoningConfig(_Out):
    effort: str | None
    summary: str | None


class ConversationId(_Out):
    id: str


Status = Literal["in_progress", "completed", "incomplete"]
Part = v.InputText | v.InputImage | v.InputFile | v.OutputText | v.Refusal


class MessageItem(_Out):
    type: Literal["message"]
    id: str
    role: Literal["user", "assistant", "system", "developer"]
    content: list[Part]
    status: Status
    phase: Literal["commentary", "final_answer"] | SkipJsonSchema[None] = None


class FunctionCallItem(_Out):
    type: Literal["function_call"]
    id: str
    call_id: str
    name: str
    arguments: str
    status: Status


class FunctionCallOutputItem(_Out):
    type: Literal["function_call_output"]
    id: str
    call_id: str
    output: str | list[Part]
    status: Status


class ReasoningItem(_Out):
    type: Literal["reasoning"]
    id: str
    summary: list[Json] | SkipJsonSchema[None] = None  # absent when the client gave none


class CompactionItem(_Out):
    type: Literal["compaction"]
    id: str
    encrypted_content: str  # opaque to clients: only this server reads its own back
    created_by: str | SkipJsonSchema[None] = None  # absent unless the client gave one


Item = MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem | CompactionItem
_ITEM_SHAPES = (
    MessageItem,
    FunctionCallItem,
    FunctionCallOutputItem,
    ReasoningItem,
    CompactionItem,
)


class ResponseObject(_Out):
    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]
    completed_at: int | None
    error: ResponseError | None
    incomplete_details: IncompleteDetails | None
    output: list[Item]
    usage: Usage
    instructions: str | None
    max_output_tokens: int | None
    max_tool_calls: int | None
    model: str
    parallel_tool_calls: bool
    previous_response_id: str | None
    reasoning: ReasoningConfig
    service_tier: str
    store: bool
    temperature: float
    text: Json
    tool_choice: (
        Literal["none", "auto", "required"] | v.ToolChoiceFunction | v.ToolChoiceAllowedTools
    )
    tools: list[v.FunctionTool]
    top_logprobs: int
    top_p: float
    truncation: Literal["auto", "disabled"]
    metadata: dict[str, str]
    prompt_cache_key: str | None
    safety_identifier: str | None
    presence_penalty: float
    frequency_penalty: float
    conversation: ConversationId | None
    background: bool
    user: str | SkipJsonSchema[None] = None  # present only when the request gave one


class ItemList(_Out):
    object: Literal["list"]
    data: list[Item]
    first_id: str | None
    last_id: str | None
    has_more: bool


class Conversation(_Out):
    id: str
    object: Literal["conversation"]
    created_at: int
    metadata: dict[str, str]


class Deleted(_Out):
    id: str
    object: Literal["response.deleted", "conversation.deleted"]
    deleted: Literal[True]


class ModelObject(_Out):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(_Out):
    object: Literal["list"]
    data: list[ModelObject]


class InputTokenCount(_Out):
    object: Literal["response.input_tokens"]
    input_tokens: int


class CompactedResponse(_Out):
    id: str
    object: Literal["response.compaction"]
    created_at: int
    output: list[Item]  # the history's user messages, then one compaction item
    usage: Usage


class Health(_Out):
    status: str
    reason: str | SkipJsonSchema[None] = None  # why not ready (a 503)


_REQUESTS: list[type[BaseModel]] = [
    v.CreateResponse,
    CountInputTokens,
    CompactRequest,
    v.CreateConversation,
    v.UpdateConversation,
    v.AddConversationItems,
    *v.ITEM_MODELS.values(),
    *v.PART_MODELS.values(),
    *v.TOOL_CHOICE_MODELS.values(),
    v.FunctionTool,
]
_RESPONSES: list[type[BaseModel]] = [
    ErrorResponse,
    ResponseObject,
    ItemList,
    Conversation,
    Deleted,
    ModelObject,
    ModelList,
    InputTokenCount,
    CompactedResponse,
    Health,
]


# -- the document ---------------------------------------------------------------------


def _ref(model: type[BaseModel]) -> Json:
    return {"$ref": _REF.format(model=model.__name__)}


def _any_of(models: Iterable[type[BaseModel]]) -> Json:
    return {"anyOf": [_ref(m) for m in models]}


def _replace(properties: Json, name: str, schema: Json) -> None:
    """Put `schema` (an anyOf) in place of the generated schema of a field that
    `_request_rules.py` checks by hand, keeping whether the field may be null."""
    generated = properties[name]
    nullable = {"type": "null"} in generated.get("anyOf", [])
    branches = [*schema["anyOf"], {"type": "null"}] if nullable else schema["anyOf"]
    properties[name] = {**schema, "anyOf": branches}


def _components(settings: Settings) -> Json:
    pairs = [(m, "validation") for m in _REQUESTS] + [(m, "serialization") for m in _RESPONSES]
    _, top = models_json_schema(pairs, ref_template=_REF)  # type: ignore[arg-type]
    schemas: Json = top["$defs"]
    items = {"type": "array", "items": _any_of(v.ITEM_MODELS.values())}
    parts = {"type": "array", "items": _any_of(v.PART_MODELS.values())}
    tool_choices = [
        {"enum": ["none", "auto", "required"]},
        *_any_of(v.TOOL_CHOICE_MODELS.values())["anyOf"],
    ]
    limits: dict[str, Json] = {
        "CreateResponse.input": {
            "anyOf": [{"type": "string"}, {**items, "maxItems": settings.max_input_items}],
            "description": "A string (one user message) or input items. Required unless"
            " `conversation` or `previous_response_id` is given.",
        },
        "CreateResponse.tools": {
            "anyOf": [
                {"type": "array", "items": _ref(v.FunctionTool), "maxItems": settings.max_tools}
            ],
            "description": "Only function tools are supported here.",
        },
        "CreateResponse.tool_choice": {
            "anyOf": tool_choices,
            "description": "A function named here must be declared in `tools`.",
        },
        "CountInputTokens.input": {
            "anyOf": [{"type": "string"}, {**items, "maxItems": settings.max_input_items}],
            "description": "As for a create.",
        },
        "CountInputTokens.tools": {
            "anyOf": [
                {"type": "array", "items": _ref(v.FunctionTool), "maxItems": settings.max_tools}
            ],
            "description": "Only function tools are supported here.",
        },
        "CountInputTokens.tool_choice": {
            "anyOf": tool_choices,
            "description": "A function named here must be declared in `tools`.",
        },
        "CompactRequest.input": {
            "anyOf": [{"type": "string"}, {**items, "maxItems": settings.max_input_items}],
            "description": "As for a create. Required unless `previous_response_id` is given.",
        },
        "CreateConversation.items": {"anyOf": [{**items, "maxItems": MAX_CONVERSATION_ITEMS}]},
        "AddConversationItems.items": {"anyOf": [{**items, "maxItems": MAX_CONVERSATION_ITEMS}]},
        "Message.content": {"anyOf": [{"type": "string"}, parts]},
        "FunctionCallOutput.output": {"anyOf": [{"type": "string"}, parts]},
    }
    for where, schema in limits.items():
        model, field = where.split(".")
        _replace(schemas[model]["properties"], field, schema)
    return schemas


def _json(model: type[BaseModel], description: str = "OK") -> Json:
    return {"description": description, "content": {"application/json": {"schema": _ref(model)}}}


_SSE = {
    "text/event-stream": {
        "schema": {"type": "string"},
        "description": "Server-sent events: `event: <type>` and one `data:` line of JSON per"
        " event, `sequence_number` from 0, ending with `response.completed`,"
        " `response.incomplete` or `response.failed`; `: keep-alive` comments between.",
    }
}

_ERRORS = {
    400: "Invalid request: a body, parameter or header is wrong.",
    401: "No API key, or an unknown one (when the server has keys).",
    404: "Not found, or owned by another API key.",
    409: "The conversation is busy and `multitask_strategy` is `reject`.",
    413: "The request body is larger than the server accepts.",
    429: "Too many open streams or queued responses for this API key; see `retry-after`."
    " (For a compaction: the upstream model's rate limit.)",
    502: "The model failed (an upstream's error, after its retries); try again.",
    500: "An unexpected server error (never expected; reported as a bug).",
    503: "The store is unavailable or the server is shutting down; retry.",
}


_REQUEST_ID = {"x-request-id": {"$ref": "#/components/headers/RequestId"}}


def _operation(
    summary: str,
    ok: Json,
    errors: tuple[int, ...],
    *,
    parameters: list[Json],
    body: type[BaseModel] | None,
) -> Json:
    responses: Json = {"200": ok}
    for status in (*errors, 500):
        responses[str(status)] = _json(ErrorResponse, _ERRORS[status])
    responses = {status: {**answer, "headers": _REQUEST_ID} for status, answer in responses.items()}
    operation: Json = {"summary": summary, "responses": responses}
    if parameters:
        operation["parameters"] = parameters
    if body is not None:
        media = {"application/json": {"schema": _ref(body)}}
        operation["requestBody"] = {"required": True, "content": media}
    return operation


def _path(name: str) -> Json:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _query(name: str, schema: Json, description: str) -> Json:
    return {"name": name, "in": "query", "schema": schema, "description": description}


_PAGE = [
    _query("limit", {"type": "integer", "minimum": 1, "maximum": 100}, "Items per page (20)."),
    _query("after", {"type": "string"}, "The id of an item of the list (else a 400)."),
    _query("order", {"enum": ["asc", "desc"]}, "By position: `desc` (default) or `asc`."),
]
_STREAM = _query("stream", {"type": "boolean"}, "Stream the events of a background response.")
_STARTING_AFTER = _query(
    "starting_after",
    {"type": "integer", "minimum": -1, "maximum": INT64_MAX},
    "With stream=true only (else a 400): only events after this sequence number.",
)
_IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
    "description": "A retried create with the same key and body returns the first response"
    " and runs nothing again; the same key with another body is a 400"
    " `idempotency_key_reused`. A key needs `store` not false (else a 400).",
}
_RESPONSE = [_path("response_id")]
_CONVERSATION = [_path("conversation_id")]
_ITEM = [*_CONVERSATION, _path("item_id")]
_STREAM_OR_JSON = {
    "description": "The response (JSON), or its events (SSE) when streaming.",
    "content": {"application/json": {"schema": _ref(ResponseObject)}, **_SSE},
}
_ONE_ITEM = {
    "description": "The item.",
    "content": {"application/json": {"schema": _any_of(_ITEM_SHAPES)}},
}
_DOCUMENT = {"description": "OpenAPI 3.1.", "content": {"application/json": {}}}

# path, method, summary, 200 answer, error statuses (500 is added), parameters, body
_OPERATIONS: list[tuple[str, str, str, Json, tuple[int, ...], list[Json], Any]] = [
    ("/v1/responses", "post", "Create a response", _STREAM_OR_JSON,
     (400, 401, 404, 409, 413, 429, 503), [_IDEMPOTENCY_KEY], v.CreateResponse),
    ("/v1/responses/input_tokens", "post",
     "Count a create's input tokens (an estimate for a model that cannot count)",
     _json(InputTokenCount), (400, 401, 404, 413, 503), [], CountInputTokens),
    ("/v1/responses/compact", "post",
     "Compact a history: its user messages, then one compaction item holding the summary",
     _json(CompactedResponse), (400, 401, 404, 413, 429, 502, 503), [], CompactRequest),
    ("/v1/responses/{response_id}", "get", "Get a response, or stream its events",
     _STREAM_OR_JSON, (400, 401, 404, 429, 503), [*_RESPONSE, _STREAM, _STARTING_AFTER], None),
    ("/v1/responses/{response_id}", "delete", "Delete a finished response", _json(Deleted),
     (400, 401, 404, 503), _RESPONSE, None),
    ("/v1/responses/{response_id}/cancel", "post", "Cancel a background response",
     _json(ResponseObject), (400, 401, 404, 413, 503), _RESPONSE, None),
    ("/v1/responses/{response_id}/input_items", "get", "List a response's input items",
     _json(ItemList), (400, 401, 404, 503), [*_RESPONSE, *_PAGE], None),
    ("/v1/conversations", "post", "Create a conversation", _json(Conversation),
     (400, 401, 413, 503), [], v.CreateConversation),
    ("/v1/conversations/{conversation_id}", "get", "Get a conversation", _json(Conversation),
     (401, 404, 503), _CONVERSATION, None),
    ("/v1/conversations/{conversation_id}", "post", "Update a conversation's metadata",
     _json(Conversation), (400, 401, 404, 413, 503), _CONVERSATION, v.UpdateConversation),
    ("/v1/conversations/{conversation_id}", "delete", "Delete a conversation", _json(Deleted),
     (401, 404, 503), _CONVERSATION, None),
    ("/v1/conversations/{conversation_id}/items", "post", "Add items to a conversation",
     _json(ItemList), (400, 401, 404, 413, 503), _CONVERSATION, v.AddConversationItems),
    ("/v1/conversations/{conversation_id}/items", "get", "List a conversation's items",
     _json(ItemList), (400, 401, 404, 503), [*_CONVERSATION, *_PAGE], None),
    ("/v1/conversations/{conversation_id}/items/{item_id}", "get", "Get a conversation item",
     _ONE_ITEM, (401, 404, 503), _ITEM, None),
    ("/v1/conversations/{conversation_id}/items/{item_id}", "delete",
     "Delete a conversation item", _json(Conversation), (401, 404, 503), _ITEM, None),
    ("/v1/models", "get", "List the models (agents, then the upstream's)", _json(ModelList),
     (401, 503), [], None),
    ("/v1/models/{model}", "get", "Get a model", _json(ModelObject), (401, 404, 503),
     [_path("model")], None),
    ("/healthz", "get", "The process is alive", _json(Health), (401, 503), [],
     None),
    ("/readyz", "get", "The server can take work (store, recovery scan)", _json(Health),
     (401, 503), [], None),
    ("/openapi.json", "get", "This document", _DOCUMENT, (401,), [], None),
]  # fmt: skip
# Their 503 says why, in the body of a 200, not in the error envelope.
_HEALTH_PATHS = ("/healthz", "/readyz")


def _paths() -> Json:
    paths: Json = {}
    for path, method, summary, ok, errors, parameters, body in _OPERATIONS:
        operation = _operation(summary, ok, errors, parameters=parameters, body=body)
        if path in _HEALTH_PATHS:
            operation["responses"]["503"] = {**ok, "headers": _REQUEST_ID}
        if path in NO_KEY_NEEDED:
            operation["security"] = []
            operation["responses"].pop("401", None)
        paths.setdefault(path, {})[method] = operation
    return paths


_DESCRIPTION = f"""\
A self-hosted server for the OpenAI Responses API that never loses an agent's work.

Every `/v1` route is also served without the prefix (`/responses`), and this document at
`/v1/openapi.json` too. Request bodies are JSON objects of at most {{max_body}} bytes,
nested at most {MAX_JSON_DEPTH} levels deep, with finite numbers only (no NaN,
Infinity, or a number out of a double's range such as `1e309`); anything else is a 400
`invalid_json`. Every error is `{{"error": {{"message", "type", "param", "code"}}}}` and
every response has an `x-request-id` header. Constraints JSON Schema cannot express are
checked too: `conversation` and `previous_response_id` exclude each other, `background`
needs `store` true, `stream_options` needs `stream` true, and tool outputs must answer
calls of the history they follow. A `model` that no agent of this server serves is a 404
`model_not_found` when the server has no default agent. A compaction item stands for the
items it summarised: a model is sent its summary in their place. Its `encrypted_content`
is opaque; one this server did not make is a 400 (`invalid_encrypted_content`) unless the
server's model reads it (a Responses upstream).
"""


def build_document(settings: Settings) -> Json:
    """The OpenAPI 3.1 document of an app with these settings."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "durable-responses",
            "version": "0.1.0",
            "description": _DESCRIPTION.replace("{max_body}", str(settings.max_body_bytes)),
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": _paths(),
        "components": {
            "schemas": _components(settings),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "headers": {
                "RequestId": {
                    "required": True,
                    "schema": {"type": "string"},
                    "description": "This request's id, also in the server's log lines.",
                }
            },
        },
    }


def openapi_endpoint(document: Json) -> Any:
    """The route handler serving `document`, encoded once."""
    body = json.dumps(document, separators=(",", ":"), allow_nan=False).encode()

    async def openapi(request: Request) -> Response:
        return Response(body, media_type="application/json")

    return openapi
