"""One accepted WebSocket (docs/protocol.md section 13): its reader, its lanes, its steers
and its idle timer, all in one task group.

Each client message is one JSON event, handled in the order received:

    response.create  a create with `stream: true`, by the HTTP route's own code path
                     (`create_params`, `create_stream`), on the lane of its `stream_id`
                     (_websocket_lanes.py)
    response.steer   committed at once, in order (_websocket_steer.py)
    response.follow  this server's extension: the rest of a background response's log,
                     like GET /v1/responses/{id}?stream=true&starting_after=N, on a lane

A message that cannot be handled gets an `error` event (the HTTP envelope's error) and
the socket goes on; so does a bug in one message's handling (logged, `server_error`).
When the client goes, or the socket has been idle `--ws-idle-timeout` seconds (closed
1000), every task of the socket ends with it, and a foreground response still streaming
is stopped as an HTTP stream's would be. At shutdown the socket is closed with 1001.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from starlette.types import Message
from starlette.websockets import WebSocket

from recovery import EventRow, NotFound

from ._context import AppContext
from ._errors import APIError
from ._json_body import parse_json
from ._responses_routes import CreatedStream, create_params, create_stream
from ._websocket_events import Event, Outbox, error_event
from ._websocket_lanes import Lanes, Target, Targets
from ._websocket_steer import SocketSteering

EVENT_TYPES = ("response.create", "response.steer", "response.follow")


class _Closed(Exception):
    """The socket has ended (the client went, or it was closed): its tasks end too."""


class Session:
    """One accepted socket: its reader, its lanes, its steers and its idle timer."""

    def __init__(self, websocket: WebSocket, ctx: AppContext, who: str) -> None:
        self._websocket = websocket
        self._ctx = ctx
        self._who = who
        self._settings = ctx.settings
        self._out = Outbox(websocket)
        self._targets = Targets()

    async def run(self) -> None:
        try:
            await self._serve()
        except asyncio.CancelledError:  # the server is shutting down
            await asyncio.shield(self._out.close(1001, "The server is shutting down."))
            raise

    async def _serve(self) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                self._lanes = Lanes(
                    tg,
                    self._out,
                    self._ctx.streams.pacer,
                    self._targets,
                    self._after_end,
                    self._follow_successor,
                )
                self._steering = SocketSteering(
                    self._ctx.runtime,
                    self._who,
                    self._settings,
                    self._out,
                    self._targets,
                    self._spawn,
                    self._follow_late,
                )
                tg.create_task(self._watch_idle())
                await self._read()
                raise _Closed
        except* _Closed:
            pass

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self._tg.create_task(work)

    # -- reading ---------------------------------------------------------------------

    async def _read(self) -> None:
        """Handle the client's messages in order until it goes."""
        while not self._out.closed:
            message = await self._websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            self._out.touch()
            try:
                await self._handle(message)
            except Exception as exc:  # a bug in this message's handling: the socket goes on
                await self._out.error(exc)

    async def _handle(self, message: Message) -> None:
        try:
            event = self._event_of(message)
        except APIError as error:
            await self._out.event(error_event(error))
            return
        kind = event.get("type")
        if kind == "response.steer":
            await self._steering.steer(event)
            return
        stream_id = event.pop("stream_id", None)
        try:
            if stream_id is not None and not isinstance(stream_id, str):
                raise APIError(
                    400, "'stream_id' must be a string.", param="stream_id", code="invalid_type"
                )
            if kind == "response.create":
                self._lanes.submit(stream_id, lambda: self._create(event, stream_id))
            elif kind == "response.follow":
                self._lanes.submit(stream_id, lambda: self._follow(event, stream_id))
            else:
                raise _unknown_type(kind)
        except APIError as error:
            # A `stream_id` that is not a string is echoed by no event, this one included.
            tag = stream_id if isinstance(stream_id, str) else None
            await self._out.event(error_event(error, tag))

    def _event_of(self, message: Message) -> Event:
        """A client message as an event object; a 400 (or 413) for what is not one."""
        text = message.get("text")
        if text is None:
            raise APIError(
                400,
                "Binary messages are not accepted: send each event as a JSON text message.",
                code="invalid_json",
            )
        limit = self._settings.ws_message_limit
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise APIError(
                413,
                f"The message is too large ({size} bytes; the limit is {limit} bytes).",
                code="request_too_large",
            )
        return parse_json(text.encode("utf-8", "surrogatepass"))

    # -- lanes' jobs -------------------------------------------------------------------

    async def _create(self, event: Event, stream_id: str | None) -> None:
        """A `response.create`: an HTTP create with `stream: true`."""
        try:
            body = {k: v for k, v in event.items() if k != "type"}
            if body.get("stream", True) is not True:
                raise APIError(
                    400,
                    "WebSocket mode always streams: leave 'stream' out or set it to true.",
                    param="stream",
                    code="invalid_value",
                )
            body["stream"] = True
            params = create_params(body, self._settings, None)
            slot = self._ctx.streams.acquire(self._who)
        except Exception as exc:
            await self._out.error(exc, stream_id)
            return
        creating = asyncio.ensure_future(
            create_stream(self._ctx.runtime, self._who, body, params, None)
        )
        try:
            # Shielded: a socket that closes while the create commits must not leave a
            # foreground response admitted and never run; it is stopped instead, as an
            # HTTP create's is when its client goes away.
            created = await asyncio.shield(creating)
        except BaseException as exc:
            slot.release()
            if not isinstance(exc, Exception):
                creating.add_done_callback(_stop_if_created)
                raise
            await self._out.error(exc, stream_id)
            return
        target = Target(created.record.id, stream_id)
        await self._lanes.stream(target, created.rows, slot, created.on_close)

    async def _follow(self, event: Event, stream_id: str | None) -> None:
        """A `response.follow`: the rest of a background response's log, then the
        outcomes of all its steers and its successors."""
        try:
            response_id, after = _follow_params(event)
            slot = self._ctx.streams.acquire(self._who)
        except Exception as exc:
            await self._out.error(exc, stream_id)
            return
        try:
            rows = await self._followed(response_id, after)
        except BaseException as exc:
            slot.release()
            if not isinstance(exc, Exception):
                raise
            await self._out.error(exc, stream_id)
            return
        target = Target(response_id, stream_id, last_seq=max(after, 0), all_steers=True)
        self._targets.followed.add(response_id)
        await self._lanes.stream(target, rows, slot)

    async def _followed(self, response_id: str, after: int) -> AsyncIterator[list[EventRow]]:
        """Its events after `after`: 404 `response_not_found` for an id of no response of
        this tenant (the log is read only after this check), 400 for a foreground one."""
        runtime = self._ctx.runtime
        try:
            if "\x00" in response_id:  # names nothing on either store (server/_ids.py)
                raise NotFound("")
            _, background = await runtime.snapshot(response_id, self._who)
        except NotFound:
            raise APIError(
                404,
                f"Response with id '{response_id}' not found.",
                param="response_id",
                code="response_not_found",
            ) from None
        if not background:
            raise APIError(
                400,
                "This response cannot be followed because it was not created with background=true.",
                param="response_id",
                code="invalid_value",
            )
        return runtime.follow(response_id, self._who, after)

    async def _after_end(self, target: Target) -> list[str]:
        return await self._steering.after_end(target)

    def _follow_successor(self, successor_id: str) -> AsyncIterator[list[EventRow]]:
        return self._ctx.runtime.follow(successor_id, self._who, -1)

    def _follow_late(self, known: Target, successor_id: str) -> None:
        """A steer accepted just as its target's stream here ended was applied: follow
        its successor on the target's lane, unless this socket follows it already."""
        if successor_id in self._targets.followed:
            return
        self._targets.followed.add(successor_id)

        async def job() -> None:
            slot = self._ctx.streams.acquire(self._who)
            target = Target(successor_id, known.stream_id)
            await self._lanes.stream(target, self._follow_successor(successor_id), slot)

        self._lanes.submit(known.stream_id, job)

    # -- idleness ----------------------------------------------------------------------

    async def _watch_idle(self) -> None:
        """Close the socket (1000) once it has been idle `--ws-idle-timeout` seconds: no
        message from the client, and no response streaming or steer awaited on it."""
        timeout = self._settings.ws_idle_timeout
        while True:
            left = self._out.last_activity + timeout - time.monotonic()
            if left > 0:
                await asyncio.sleep(left)
                continue
            if self._lanes.busy or self._steering.watched:
                self._out.touch()
                continue
            await self._out.close(1000, f"Idle for {timeout:g} seconds.")
            raise _Closed


def _stop_if_created(creating: asyncio.Future[CreatedStream]) -> None:
    """The create a closed socket was waiting for has ended: stop its response, if it
    made a foreground one (its client has gone)."""
    if creating.cancelled() or creating.exception() is not None:
        return
    created = creating.result()
    if created.on_close is not None:
        created.on_close(False)


def _unknown_type(kind: Any) -> APIError:
    supported = ", ".join(EVENT_TYPES)
    if kind is None:
        return APIError(
            400,
            f"Missing required parameter: 'type' (one of {supported}).",
            param="type",
            code="missing_required_parameter",
        )
    return APIError(
        400,
        f"Invalid value: {str(kind)[:64]!r}. Supported event types are: {supported}.",
        param="type",
        code="invalid_value",
    )


def _follow_params(event: Event) -> tuple[str, int]:
    """(response_id, starting_after) of a `response.follow`, or a 400 naming the field."""
    unknown = sorted(set(event) - {"type", "response_id", "starting_after"})
    if unknown:
        raise APIError(
            400,
            f"Unknown parameter: '{unknown[0]}'.",
            param=unknown[0],
            code="unknown_parameter",
        )
    response_id = event.get("response_id")
    if not isinstance(response_id, str) or not response_id:
        raise APIError(
            400,
            "Missing required parameter: 'response_id'.",
            param="response_id",
            code="missing_required_parameter",
        )
    after = event.get("starting_after", -1)
    if isinstance(after, bool) or not isinstance(after, int) or not -1 <= after < 2**63:
        raise APIError(
            400,
            "'starting_after' must be an integer, -1 or more.",
            param="starting_after",
            code="invalid_value",
        )
    return response_id, after
