"""/v1/conversations routes (docs/protocol.md section 2)."""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from recovery import NotFound, new_id, normalize_item
from store import ConversationRecord, ItemRow

from ._context import context, read_body, tenant
from ._json_body import parse_json
from ._query import query_int, query_order
from ._request_models import AddConversationItems, CreateConversation, UpdateConversation
from ._request_rules import validate_items
from ._responses_routes import list_page, raw_json
from ._validation_base import validate

MAX_ITEMS = 20


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _conversation(record: ConversationRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "object": "conversation",
        "created_at": int(record.created_at),
        "metadata": json.loads(record.metadata),
    }


def _not_found(conversation_id: str) -> NotFound:
    return NotFound(f"Conversation with id '{conversation_id}' not found.")


async def _body(request: Request) -> dict[str, Any]:
    return parse_json(await read_body(request, context(request).settings.max_body_bytes))


async def _item_rows(
    request: Request, items: list[Any], conversation_id: str | None = None
) -> list[ItemRow]:
    """Validated, normalized rows of `items` to append to a conversation (a new one
    without `conversation_id`). A `function_call_output` must answer a call of the
    conversation not yet answered (docs/guarantees.md G5): such an item would make every later
    history that includes it inconsistent. A call still waiting for its output is fine:
    the client may send the output later, in a turn's input."""
    validated = validate_items(items, path="items")
    await context(request).runtime.check_input(
        validated,
        tenant=tenant(request),
        conversation_id=conversation_id,
        allow_pending=True,
        param="items",
    )
    normalized = [normalize_item(item) for item in validated]
    return [ItemRow(item["id"], _dumps(item)) for item in normalized]


async def create_conversation(request: Request) -> Response:
    body = validate(CreateConversation, await _body(request))
    items = body.get("items") or []
    if len(items) > MAX_ITEMS:
        validate_items(items, path="items", limit=MAX_ITEMS)
    record = ConversationRecord(
        id=new_id("conv"),
        tenant=tenant(request),
        created_at=time.time(),
        metadata=_dumps(body.get("metadata") or {}),
    )
    rows = await _item_rows(request, items)
    await context(request).runtime.store.create_conversation(record, rows)
    return JSONResponse(_conversation(record))


async def _get(request: Request) -> ConversationRecord:
    conversation_id = request.path_params["conversation_id"]
    record = await context(request).runtime.store.get_conversation(conversation_id, tenant(request))
    if record is None:
        raise _not_found(conversation_id)
    return record


async def get_conversation(request: Request) -> Response:
    return JSONResponse(_conversation(await _get(request)))


async def update_conversation(request: Request) -> Response:
    body = validate(UpdateConversation, await _body(request))
    conversation_id = request.path_params["conversation_id"]
    record = await context(request).runtime.store.update_conversation(
        conversation_id, tenant(request), _dumps(body.get("metadata") or {})
    )
    if record is None:
        raise _not_found(conversation_id)
    return JSONResponse(_conversation(record))


async def delete_conversation(request: Request) -> Response:
    conversation_id = request.path_params["conversation_id"]
    if not await context(request).runtime.store.delete_conversation(
        conversation_id, tenant(request)
    ):
        raise _not_found(conversation_id)
    return JSONResponse({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


async def add_items(request: Request) -> Response:
    body = validate(AddConversationItems, await _body(request))
    validate_items(body["items"], path="items", limit=MAX_ITEMS)
    record = await _get(request)
    rows = await _item_rows(request, body["items"], record.id)
    conversation_id = record.id
    if not await context(request).runtime.store.add_conversation_items(
        conversation_id, tenant(request), rows
    ):
        raise _not_found(conversation_id)
    return list_page((rows, False), None)


async def list_items(request: Request) -> Response:
    record = await _get(request)
    query = request.query_params
    limit = query_int(query, "limit", default=20, low=1, high=100)
    assert limit is not None
    after = query.get("after")
    page = await context(request).runtime.store.list_conversation_items(
        record.id, after=after, order=query_order(query), limit=limit
    )
    return list_page(page, after)


async def get_item(request: Request) -> Response:
    record = await _get(request)
    item_id = request.path_params["item_id"]
    row = await context(request).runtime.store.get_conversation_item(record.id, item_id)
    if row is None:
        raise NotFound(f"Item with id '{item_id}' not found.")
    return raw_json(row.item)


async def delete_item(request: Request) -> Response:
    record = await _get(request)
    item_id = request.path_params["item_id"]
    if not await context(request).runtime.store.delete_conversation_item(record.id, item_id):
        raise NotFound(f"Item with id '{item_id}' not found.")
    return JSONResponse(_conversation(record))


ROUTES = [
    Route("/conversations", create_conversation, methods=["POST"]),
    Route("/conversations/{conversation_id}", get_conversation, methods=["GET"]),
    Route("/conversations/{conversation_id}", update_conversation, methods=["POST"]),
    Route("/conversations/{conversation_id}", delete_conversation, methods=["DELETE"]),
    Route("/conversations/{conversation_id}/items", add_items, methods=["POST"]),
    Route("/conversations/{conversation_id}/items", list_items, methods=["GET"]),
    Route("/conversations/{conversation_id}/items/{item_id}", get_item, methods=["GET"]),
    Route("/conversations/{conversation_id}/items/{item_id}", delete_item, methods=["DELETE"]),
]
