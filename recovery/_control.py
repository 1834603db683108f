"""How clients control responses: cancel (G9) and delete. A stop asked here reaches the
turn's runner at once when it is driven in this process; otherwise the store carries it
to whichever process drives the turn (its heartbeat, _upkeep.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from store import ResponseRecord, Store

from ._emitter import Emitter
from ._errors import InvalidRequest, NotFound
from ._following import Following
from ._json import dumps
from ._runs import Runs
from ._settings import RuntimeSettings
from ._sinks import encode
from ._status import ResponseStatus


class Control:
    def __init__(
        self, store: Store, settings: RuntimeSettings, runs: Runs, following: Following
    ) -> None:
        self._store = store
        self._settings = settings
        self._runs = runs
        self._following = following

    async def cancel(self, response_id: str, tenant: str) -> ResponseRecord:
        """Cancel a background response (G9): idempotent, durable, honoured by whichever
        process drives it. A response that ended otherwise first cannot be cancelled."""
        get = self._following.get
        record = await get(response_id, tenant)
        if not record.background:
            raise InvalidRequest("Cannot cancel a synchronous response.", param="response_id")
        if record.status == ResponseStatus.QUEUED and await self._cancel_queued(record):
            record = await get(response_id, tenant)
        elif not ResponseStatus(record.status).is_terminal:
            if await self._store.request_cancel(response_id):
                self._runs.stop(response_id)
            record = await self._wait_terminal(response_id, tenant)
        status = ResponseStatus(record.status)
        if status.is_terminal and status is not ResponseStatus.CANCELLED:
            article = "an" if status is ResponseStatus.INCOMPLETE else "a"
            raise InvalidRequest(
                f"Cannot cancel {article} {status.value} response.", param="response_id"
            )
        return record

    async def _cancel_queued(self, record: ResponseRecord) -> bool:
        emitter = Emitter(json.loads(record.snapshot), record.last_seq + 1)
        terminal = emitter.finish(ResponseStatus.CANCELLED)
        return await self._store.cancel_queued(
            record.id,
            snapshot=dumps(emitter.response),
            last_seq=terminal["sequence_number"],
            events=[encode(terminal)],
        )

    async def _wait_terminal(self, response_id: str, tenant: str) -> ResponseRecord:
        deadline = time.monotonic() + self._settings.cancel_wait
        while True:
            record = await self._following.get(response_id, tenant)
            if ResponseStatus(record.status).is_terminal or time.monotonic() >= deadline:
                return record
            runner = self._runs.runner(response_id)
            if runner is not None:
                remaining = max(deadline - time.monotonic(), 0.0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(runner.done), remaining)
            else:
                await asyncio.sleep(self._settings.poll_interval)

    async def delete(self, response_id: str, tenant: str) -> None:
        record = await self._following.get(response_id, tenant)
        if not ResponseStatus(record.status).is_terminal:
            raise InvalidRequest(
                "Cannot delete a response that is still running; cancel it first.",
                param="response_id",
            )
        if not await self._store.delete_response(response_id, tenant):
            raise NotFound(f"Response with id '{response_id}' not found.")
