"""/v1/conversations routes (docs/protocol.md section 2)."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from recovery import ConversationRecord, Conversations

from ._attachments import check_sizes
from ._context import context, read_body, tenant
from ._errors import APIError
from ._ids import IdConvertor  # noqa: F401 (registers `{name:id}` before the routes below)
from ._json_body import parse_json
from ._query import query_after, query_include, query_int, query_order
from ._request_models import AddConversationItems, CreateConversation, UpdateConversation
from ._request_rules import validate_items
from ._responses_routes import list_page, raw_json
from ._validation_base import validate

MAX_ITEMS = 20


def _conversation(record: ConversationRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "object": "conversation",
        "created_at": int(record.created_at),
        "metadata": json.loads(record.metadata),
    }


def _conversations(request: Request) -> Conversations:
    return context(request).conversations


async def _body(request: Request) -> dict[str, Any]:
    return parse_json(await read_body(request, context(request).settings.max_body_bytes))


async def _get(request: Request) -> ConversationRecord:
    return await _conversations(request).get(
        request.path_params["conversation_id"], tenant(request)
    )


def _refuse_idempotency_key(request: Request) -> None:
    """Only `POST /v1/responses` keeps Idempotency-Keys (G11). A retry here would not be
    recognised and would add a second conversation, or the items again: refused by
    name rather than ignored."""
    if "idempotency-key" in request.headers:
        raise APIError(
            400,
            "Idempotency-Key is honoured only by POST /v1/responses: a retry of this request"
            " would not be recognised, and would add a second conversation or the same"
            " items again. Send it without the header.",
            param="Idempotency-Key",
            code="unsupported_parameter",
        )


async def create_conversation(request: Request) -> Response:
    _refuse_idempotency_key(request)
    body = validate(CreateConversation, await _body(request))
    items = validate_items(body.get("items") or [], path="items", limit=MAX_ITEMS)
    check_sizes(items, path="items", max_bytes=context(request).settings.max_attachment_bytes)
    record = await _conversations(request).create(
        tenant(request), body.get("metadata") or {}, items
    )
    return JSONResponse(_conversation(record))


async def get_conversation(request: Request) -> Response:
    return JSONResponse(_conversation(await _get(request)))


async def update_conversation(request: Request) -> Response:
    body = validate(UpdateConversation, await _body(request))
    record = await _conversations(request).update(
        request.path_params["conversation_id"], tenant(request), body.get("metadata") or {}
    )
    return JSONResponse(_conversation(record))


async def delete_conversation(request: Request) -> Response:
    conversation_id = request.path_params["conversation_id"]
    await _conversations(request).delete(conversation_id, tenant(request))
    return JSONResponse({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


async def add_items(request: Request) -> Response:
    """Append items. A `function_call_output` must answer a call of the conversation not
    yet answered (docs/guarantees.md G5): such an item would make every later history that
    includes it inconsistent. A call still waiting for its output is fine: the client may
    send the output later, in a turn's input."""
    _refuse_idempotency_key(request)
    query_include(request.query_params)
    body = validate(AddConversationItems, await _body(request))
    items = validate_items(body["items"], path="items", limit=MAX_ITEMS)
    check_sizes(items, path="items", max_bytes=context(request).settings.max_attachment_bytes)
    conversation_id = request.path_params["conversation_id"]
    rows = await _conversations(request).add_items(conversation_id, tenant(request), items)
    return list_page((rows, False), None)


async def list_items(request: Request) -> Response:
    record = await _get(request)
    query = request.query_params
    query_include(query)
    limit = query_int(query, "limit", default=20, low=1, high=100)
    assert limit is not None
    after = query_after(query)
    page = await _conversations(request).list_items(
        record, after=after, order=query_order(query), limit=limit
    )
    return list_page(page, after)


async def get_item(request: Request) -> Response:
    query_include(request.query_params)
    record = await _get(request)
    row = await _conversations(request).get_item(record, request.path_params["item_id"])
    return raw_json(row.item)


async def delete_item(request: Request) -> Response:
    record = await _get(request)
    await _conversations(request).delete_item(record, request.path_params["item_id"])
    return JSONResponse(_conversation(record))


ROUTES = [
    Route("/conversations", create_conversation, methods=["POST"]),
    Route("/conversations/{conversation_id:id}", get_conversation, methods=["GET"]),
    Route("/conversations/{conversation_id:id}", update_conversation, methods=["POST"]),
    Route("/conversations/{conversation_id:id}", delete_conversation, methods=["DELETE"]),
    Route("/conversations/{conversation_id:id}/items", add_items, methods=["POST"]),
    Route("/conversations/{conversation_id:id}/items", list_items, methods=["GET"]),
    Route("/conversations/{conversation_id:id}/items/{item_id:id}", get_item, methods=["GET"]),
    Route(
        "/conversations/{conversation_id:id}/items/{item_id:id}", delete_item, methods=["DELETE"]
    ),
]
