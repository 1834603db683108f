"""`response.steer` on a socket (docs/protocol.md section 13): the event checked, its input
stored as a create's would be, the steer committed by the runtime (`Runtime.steer`,
recovery/_steering.py), and what becomes of it told to the client.

- Refused (a bad event, an unknown or finished target, too many steers):
  `response.steer.failed`, the input handed back, without an id.
- Accepted: `response.steer.accepted`, only after the runtime committed it. If this
  socket streams the target, its lane ties the steer to that stream (`Targets`): once the
  target's terminal event is out, `after_end` waits for the outcomes of the steers
  accepted for it here, follows the successors (`applied`), and tells the others
  (`response.steer.pending`, `response.steer.failed`). Any other target (one streamed by
  another socket, or created over HTTP, or one of this socket's that had already ended)
  is watched on its own, and its events are the steer events only.

Steer events carry the `sequence_number` of the last event of the target sent on this
socket (0 if none) and the target's `stream_id` when its lane has one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from recovery import (
    Runtime,
    SteerOutcome,
    SteerRefused,
    StoreError,
    Unavailable,
    normalize_input,
)

from ._attachments import check_sizes
from ._errors import APIError
from ._request_rules import validate_items
from ._settings import Settings
from ._websocket_events import Outbox, steer_event, steer_failed
from ._websocket_lanes import Target, Targets

log = logging.getLogger("server")

Item = dict[str, Any]

MAX_WATCHED = 256  # steers of targets not streamed here whose outcome a socket awaits
_EVENT_KEYS = frozenset({"type", "previous_response_id", "input"})
_MESSAGE_KEYS = frozenset({"type", "role", "content"})
_PART_TYPES = frozenset({"input_text", "input_image", "input_file"})


class InvalidSteer(Exception):
    """A `response.steer` event that cannot be accepted as sent (`invalid_input`)."""


def steer_input(value: Any, settings: Settings) -> list[Item]:
    """A steer's input as stored input items (ids given), by the create's rules; only
    user messages of text, images and files. InvalidSteer naming what is wrong."""
    if isinstance(value, str) and value:
        items: list[Any] = [{"role": "user", "content": value}]
    elif isinstance(value, list) and value:
        items = value
        for i, item in enumerate(items):
            _check_message(item, f"input[{i}]")
    else:
        raise InvalidSteer("'input' must be a non-empty string or a non-empty list of messages.")
    try:
        checked = validate_items(items, path="input", limit=settings.max_input_items)
        check_sizes(checked, path="input", max_bytes=settings.max_attachment_bytes)
    except APIError as error:
        raise InvalidSteer(error.message) from None
    return normalize_input(checked)


def _check_message(item: Any, path: str) -> None:
    if not isinstance(item, dict):
        raise InvalidSteer(f"'{path}' must be a message object.")
    extra = sorted(set(item) - _MESSAGE_KEYS)
    if extra:
        raise InvalidSteer(
            f"'{path}.{extra[0]}' is not accepted: a steer's messages hold only type, role"
            " and content."
        )
    if item.get("type", "message") != "message" or item.get("role") != "user":
        raise InvalidSteer(f"'{path}' must be a user message: steering takes user input only.")
    content = item.get("content")
    if isinstance(content, str) and content:
        return
    if not isinstance(content, list) or not content:
        raise InvalidSteer(f"'{path}.content' must be a non-empty string or list of parts.")
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in _PART_TYPES:
            raise InvalidSteer(
                f"'{path}.content[{j}]' must be an input_text, input_image or input_file part."
            )


def _target_of(event: dict[str, Any]) -> str:
    target = event.get("previous_response_id")
    return target if isinstance(target, str) else ""


class SocketSteering:
    """The steers of one socket."""

    def __init__(
        self,
        runtime: Runtime,
        who: str,
        settings: Settings,
        out: Outbox,
        targets: Targets,
        spawn: Callable[[Coroutine[Any, Any, None]], object],
        follow_late: Callable[[Target, str], None],
    ) -> None:
        self._runtime = runtime
        self._who = who
        self._settings = settings
        self._out = out
        self._targets = targets
        self._spawn = spawn  # starts a task in the socket's task group
        self._follow_late = follow_late  # follows a successor on a finished target's lane
        self.watched = 0

    async def steer(self, event: dict[str, Any]) -> None:
        """Handle one `response.steer` event."""
        target_id = _target_of(event)
        try:
            items = self._checked(event, target_id)
            if self.watched >= MAX_WATCHED and self._targets.streaming(target_id) is None:
                raise SteerRefused(
                    "too_many_pending_steers",
                    f"This socket awaits the outcome of {MAX_WATCHED} steers already.",
                )
            accepted = await self._runtime.steer(target_id, items, tenant=self._who)
        except InvalidSteer as exc:
            await self._failed("invalid_input", str(exc), target_id, event.get("input"))
            return
        except SteerRefused as refused:
            await self._failed(refused.code, refused.message, target_id, event.get("input"))
            return
        except (StoreError, Unavailable) as exc:  # the commit may or may not have happened
            await self._out.error(_unknown_outcome(exc), self._stream_of(target_id))
            return
        streaming = self._targets.streaming(target_id)
        known = streaming or self._targets.known(target_id)
        steer = {"id": accepted.id, "previous_response_id": target_id}
        if streaming is not None:
            # Before any await: the lane, ending meanwhile, must find it to await its
            # outcome. The send lock is first come, first served, so `accepted` still goes
            # out before the outcome the lane may tell.
            streaming.steer_ids.append(accepted.id)
            await self._out.event(steer_event("accepted", steer, *_place(known)))
            return
        await self._out.event(steer_event("accepted", steer, *_place(known)))
        self.watched += 1
        self._spawn(self._watch(target_id, accepted.id, known))

    def _checked(self, event: dict[str, Any], target_id: str) -> list[Item]:
        extra = sorted(set(event) - _EVENT_KEYS)
        if extra:
            raise InvalidSteer(
                f"Unknown parameter: '{extra[0]}'. A response.steer holds only type,"
                " previous_response_id and input; its lane is its target's."
            )
        if not target_id:
            raise InvalidSteer("'previous_response_id' must be the id of the response to steer.")
        if "\x00" in target_id:  # names nothing on either store (server/_ids.py)
            raise SteerRefused("response_not_found", f"Response with id '{target_id}' not found.")
        return steer_input(event.get("input"), self._settings)

    async def after_end(self, target: Target) -> list[str]:
        """Once `target`'s stream has ended: tell the outcomes of its steers (those
        accepted here; after a `response.follow`, all of them) in submission order; the
        successors to follow next, in order, each once."""
        if not target.steer_ids and not target.all_steers:
            return []
        ids = None if target.all_steers else target.steer_ids
        outcomes = await self._runtime.steer_outcomes(target.id, tenant=self._who, steer_ids=ids)
        successors: list[str] = []
        for outcome in outcomes:
            if outcome.state == "applied" and outcome.successor_id is not None:
                if outcome.successor_id not in successors:
                    successors.append(outcome.successor_id)
            else:
                await self._tell(outcome, target)
        return successors

    async def _watch(self, target_id: str, steer_id: str, known: Target | None) -> None:
        """The outcome of a steer of a target this socket does not stream."""
        try:
            outcomes = await self._runtime.steer_outcomes(
                target_id, tenant=self._who, steer_ids=[steer_id]
            )
            for outcome in outcomes:
                if outcome.state != "applied":
                    await self._tell(outcome, known)
                elif known is not None and outcome.successor_id is not None:
                    self._follow_late(known, outcome.successor_id)
        except Exception as exc:
            await self._out.error(exc, known.stream_id if known else None)
        finally:
            self.watched -= 1

    async def _tell(self, outcome: SteerOutcome, target: Target | None) -> None:
        """A `pending` or `failed` outcome as its event."""
        if outcome.state == "pending":
            steer = {"id": outcome.steer_id, "previous_response_id": outcome.previous_response_id}
            event = steer_event(
                "pending",
                steer,
                *_place(target),
                reason="waiting_for_required_input",
                required_input=outcome.required_input,
            )
        else:
            sequence_number, stream_id = _place(target)
            event = steer_failed(
                outcome.code or "successor_creation_failed",
                outcome.message or "The steering input could not be applied.",
                target_id=outcome.previous_response_id,
                input=outcome.input,
                steer_id=outcome.steer_id,
                sequence_number=sequence_number,
                stream_id=stream_id,
            )
        await self._out.event(event)

    async def _failed(self, code: str, message: str, target_id: str, input: Any) -> None:
        sequence_number, stream_id = _place(self._targets.known(target_id))
        await self._out.event(
            steer_failed(
                code,
                message,
                target_id=target_id,
                input=input,
                sequence_number=sequence_number,
                stream_id=stream_id,
            )
        )

    def _stream_of(self, target_id: str) -> str | None:
        known = self._targets.known(target_id)
        return known.stream_id if known else None


def _place(target: Target | None) -> tuple[int, str | None]:
    """(sequence_number, stream_id) of a steer event about `target`."""
    if target is None:
        return 0, None
    return target.last_seq, target.stream_id


def _unknown_outcome(exc: Exception) -> APIError:
    log.error("steer not confirmed: %s", exc)
    return APIError(
        503,
        "The store is unavailable: this steer may or may not have been accepted; follow the"
        " response to see whether it was applied before sending it again.",
        type="server_error",
    )
