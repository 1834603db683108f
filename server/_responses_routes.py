"""/v1/responses routes (docs/protocol.md sections 2, 7, 8 and 12). The WebSocket on the same
path is server/_websocket*.py, which creates through `create_params` and `create_stream`."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.convertors import register_url_convertor
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from recovery import (
    EventRow,
    NotFound,
    ResponseRecord,
    ResponseStatus,
    Runtime,
    encode_event,
    normalize_input,
    synthesize_events,
    terminal_event,
)

from ._compact import compact_response
from ._context import context, read_body, tenant
from ._errors import APIError
from ._ids import IdConvertor
from ._input_tokens import count_input_tokens
from ._json_body import parse_json
from ._query import query_after, query_bool, query_include, query_int, query_order
from ._request_rules import validate_create
from ._settings import Settings
from ._sse import StreamSlot, stream_to


def raw_json(text: str, status: int = 200) -> Response:
    """A stored JSON text sent as is: no decode and re-encode on the hot read paths."""
    return Response(text, status_code=status, media_type="application/json")


async def create_response(request: Request) -> Response:
    ctx = context(request)
    body = parse_json(await read_body(request, ctx.settings.max_body_bytes))
    key = _idempotency_key(request)
    params = create_params(body, ctx.settings, key)
    # Every admission check comes before the create stores anything: a refused request
    # (the SDK retries a 429) must leave no response behind, run or queued.
    slot = ctx.streams.acquire(tenant(request)) if params.get("stream") else None
    try:
        return await _create(request, body, params, key, slot)
    except BaseException:
        if slot is not None:
            slot.release()
        raise


def create_params(body: dict[str, Any], settings: Settings, key: str | None) -> dict[str, Any]:
    """A create's body validated into the runtime's parameters, its input normalized into
    stored items; a 400 (APIError) for what is wrong. Shared by the HTTP route and the
    WebSocket's `response.create` (server/_websocket_session.py)."""
    params = validate_create(
        body,
        max_input_items=settings.max_input_items,
        max_tools=settings.max_tools,
        max_attachment_bytes=settings.max_attachment_bytes,
    )
    if key is not None and params.get("store") is False:
        raise APIError(
            400,
            "Idempotency-Key needs store=true: a response created with store=false is not "
            "kept once it ends, so a retry could not be given its result.",
            param="Idempotency-Key",
            code="invalid_parameter_combination",
        )
    params["input"] = normalize_input(params["input"])
    return params


@dataclass(frozen=True, slots=True)
class CreatedStream:
    """A streaming create, admitted: its response and its events. `on_close(finished)`
    must be called when the stream ends (False: its client went away before the end)."""

    record: ResponseRecord
    rows: AsyncIterator[list[EventRow]]
    on_close: Callable[[bool], None] | None = None


async def create_stream(
    runtime: Runtime,
    who: str,
    body: dict[str, Any],
    params: dict[str, Any],
    key: str | None,
) -> CreatedStream:
    """Admit a streaming create (`create_params`' parameters) and start its events: a
    background response's log from the start, a foreground one's run, or for a retried
    create (the same Idempotency-Key) the first response's events (G11). The caller holds
    the tenant's stream slot from before this call."""
    record, created = await runtime.create(
        params,
        tenant=who,
        idempotency_key=key,
        request_hash=_request_hash(body) if key is not None else None,
    )
    if record.background:  # the runtime started it, here or behind its lane
        return CreatedStream(record, runtime.follow(record.id, record.tenant, -1))
    if not created:
        final = await runtime.wait_final(record.id, record.tenant)
        return CreatedStream(record, _rows(synthesize_events(final)))
    runner, sink = runtime.start_foreground(record, stream=True)

    def on_close(finished: bool) -> None:
        # The client went away: stop the turn at its next safe point, unless it sent an
        # Idempotency-Key, which says it will retry and collect the result (G11).
        if not finished and key is None:
            runtime.stop_local(record.id)

    def shown() -> dict[str, Any]:  # the response as the stream showed it
        return {**runner.done.result(), "output": sink.shown()}

    rows = _to_its_end(sink.rows(), lambda: runner.lost, shown, runtime, record)
    return CreatedStream(record, rows, on_close)


async def _to_its_end(
    rows: AsyncIterator[list[EventRow]],
    lost: Callable[[], bool],
    shown: Callable[[], dict[str, Any]],
    runtime: Runtime,
    record: ResponseRecord,
) -> AsyncIterator[list[EventRow]]:
    """A foreground turn's events; when its runner lost the response (its lease) before
    the end, the end that the process which took it over stored, as the last event. Under
    `store: false` that end was deleted with the response: the stream ends failed, with
    the output it showed."""
    last = -1
    async for batch in rows:
        last = batch[-1].seq
        yield batch
    if lost():
        final = await _ended_elsewhere(runtime, record.id, record.tenant)
        if final is None:
            final = {**shown(), "status": ResponseStatus.FAILED, "error": _LOST}
        yield [encode_event(terminal_event(final, last + 1))]


async def _create(
    request: Request,
    body: dict[str, Any],
    params: dict[str, Any],
    key: str | None,
    slot: StreamSlot | None,
) -> Response:
    who = tenant(request)
    runtime = context(request).runtime
    if slot is not None:
        stream = await create_stream(runtime, who, body, params, key)
        return stream_to(request, stream.rows, on_close=stream.on_close, slot=slot)
    record, created = await runtime.create(
        params,
        tenant=who,
        idempotency_key=key,
        request_hash=_request_hash(body) if key is not None else None,
    )
    if not created:
        return await _created_before(request, record)
    if record.background:  # the runtime started it, here or behind its lane
        return raw_json(record.snapshot)

    runner, _ = runtime.start_foreground(record, stream=False)
    final = await _unless_disconnected(request, runner.done)
    if final is None:
        if key is None:  # see create_stream's on_close
            runtime.stop_local(record.id)
        return Response(status_code=499)
    if runner.final_json is not None:  # the end as committed, sent as stored
        return raw_json(runner.final_json)
    if runner.lost:
        elsewhere = await _ended_elsewhere(runtime, record.id, who)
        if elsewhere is None:
            raise APIError(500, _LOST["message"], type="server_error")
        return JSONResponse(elsewhere)
    return JSONResponse(final)  # its end could not be saved: the failure the runner made up


_LOST = {
    "code": "server_error",
    "message": "The server lost this response to another of its processes, which ended it; "
    "under store: false that end is not kept.",
}


async def _ended_elsewhere(runtime: Runtime, response_id: str, who: str) -> dict[str, Any] | None:
    """The end of a foreground response whose lease this process lost (stopped past its
    TTL): the process that took it over ends it, and that end, not what this process
    could no longer commit, is the answer. None under `store: false`: the end was deleted
    with the response."""
    try:
        return await runtime.wait_final(response_id, who)
    except NotFound:
        return None


def _idempotency_key(request: Request) -> str | None:
    keys = request.headers.getlist("idempotency-key")
    if len(keys) > 1:  # which one a retry would send is anyone's guess: refused
        raise APIError(
            400,
            f"The Idempotency-Key header was sent {len(keys)} times: send it once.",
            param="Idempotency-Key",
            code="invalid_value",
        )
    key = keys[0] if keys else None
    if key is not None and not 1 <= len(key) <= 255:
        raise APIError(
            400,
            "The Idempotency-Key header must be 1 to 255 characters long.",
            param="Idempotency-Key",
            code="invalid_value",
        )
    return key


def _request_hash(body: dict[str, Any]) -> str:
    canonical = json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


async def _created_before(request: Request, record: ResponseRecord) -> Response:
    """A retried create (same Idempotency-Key) that does not stream: the first response,
    run once (G11)."""
    ctx = context(request)
    if record.background:
        return raw_json((await ctx.runtime.get(record.id, record.tenant)).snapshot)
    return JSONResponse(await ctx.runtime.wait_final(record.id, record.tenant))


async def _rows(events: list[dict[str, Any]]) -> AsyncIterator[list[EventRow]]:
    yield [encode_event(event) for event in events]


async def _unless_disconnected(
    request: Request, done: asyncio.Future[dict[str, Any]]
) -> dict[str, Any] | None:
    """Wait for `done`; None if the client disconnects first."""

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    watcher: asyncio.Future[None] = asyncio.ensure_future(disconnected())
    waiting: list[asyncio.Future[Any]] = [watcher, done]
    try:
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    return done.result() if done.done() else None


async def get_response(request: Request) -> Response:
    ctx = context(request)
    response_id = request.path_params["response_id"]
    who = tenant(request)
    snapshot, background = await ctx.runtime.snapshot(response_id, who)
    query = request.query_params
    if query:
        query_include(query)
        query_bool(query, "include_obfuscation")  # no delta is padded here: nothing to leave out
    if not query_bool(query, "stream"):
        if "starting_after" in query:
            raise APIError(
                400,
                "starting_after only applies to a stream: set stream=true to replay the "
                "events after it, or leave it out to retrieve the response.",
                param="starting_after",
                code="invalid_parameter_combination",
            )
        return raw_json(snapshot)
    if not background:
        raise APIError(
            400,
            "This response cannot be streamed because it was not created with background=true.",
            param="stream",
            code="invalid_value",
        )
    after = query_int(query, "starting_after", default=-1, low=-1)
    assert after is not None
    return stream_to(request, ctx.runtime.follow(response_id, who, after))


async def cancel_response(request: Request) -> Response:
    ctx = context(request)
    await read_body(request, ctx.settings.max_body_bytes)  # empty or ignored (SDK sends none)
    record = await ctx.runtime.cancel(request.path_params["response_id"], tenant(request))
    return raw_json(record.snapshot)


async def delete_response(request: Request) -> Response:
    ctx = context(request)
    response_id = request.path_params["response_id"]
    await ctx.runtime.delete(response_id, tenant(request))
    return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})


async def list_input_items(request: Request) -> Response:
    ctx = context(request)
    response_id = request.path_params["response_id"]
    record = await ctx.runtime.get(response_id, tenant(request))
    query = request.query_params
    query_include(query)
    limit = query_int(query, "limit", default=20, low=1, high=100)
    assert limit is not None
    after = query_after(query)
    page = await ctx.inspector.input_items(
        record, after=after, order=query_order(query), limit=limit
    )
    return list_page(page, after)


def list_page(page: tuple[list[Any], bool] | None, after: str | None) -> Response:
    if page is None:
        raise APIError(
            400, f"No item with id '{after}' in this list.", param="after", code="invalid_value"
        )
    rows, has_more = page
    data = ",".join(row.item for row in rows)
    first = json.dumps(rows[0].item_id) if rows else "null"
    last = json.dumps(rows[-1].item_id) if rows else "null"
    return raw_json(
        f'{{"object":"list","data":[{data}],"first_id":{first},"last_id":{last},'
        f'"has_more":{"true" if has_more else "false"}}}'
    )


class ResponseIdConvertor(IdConvertor):
    """`{name:response_id}`: an id, but not the names of the routes beside the ids
    (`input_tokens`, `compact`), so that another method on those paths is a 405 naming
    theirs rather than a lookup of a response by that name."""

    regex = "(?!(?:input_tokens|compact)(?:/|$))" + IdConvertor.regex


register_url_convertor("response_id", ResponseIdConvertor())

ROUTES = [
    Route("/responses", create_response, methods=["POST"]),
    # Paths beside the ids: `{response_id:response_id}` does not read these names.
    Route("/responses/input_tokens", count_input_tokens, methods=["POST"]),
    Route("/responses/compact", compact_response, methods=["POST"]),
    Route("/responses/{response_id:response_id}", get_response, methods=["GET"]),
    Route("/responses/{response_id:response_id}", delete_response, methods=["DELETE"]),
    Route("/responses/{response_id:response_id}/cancel", cancel_response, methods=["POST"]),
    Route("/responses/{response_id:response_id}/input_items", list_input_items, methods=["GET"]),
]
