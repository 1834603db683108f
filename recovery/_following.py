"""How clients read responses: a stored response, its snapshot, its final form, and its
events followed from the log then live until the terminal one (G7).

Correctness never depends on this process (docs/guarantees.md, Where state lives): a
stream reads committed events from the log, and a wake-up from the in-process broker
(_broker.py) only saves it a poll. A response driven here wakes its streams at every
commit; one driven by another process is polled every `poll_interval`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from store import EventRow, ResponseRecord, Store

from ._broker import Broker
from ._errors import NotFound
from ._observer import current_response_id
from ._response import unstored
from ._runs import Runs
from ._settings import RuntimeSettings
from ._status import TERMINAL_EVENTS, ResponseStatus

PAGE_ROWS = 64  # the most events `follow` reads from the log at once
PAGE_CHARS = 64 * 1024  # and fewer when they are large: about this much


class Following:
    def __init__(self, store: Store, settings: RuntimeSettings, broker: Broker, runs: Runs) -> None:
        self._store = store
        self._settings = settings
        self._broker = broker
        self._runs = runs

    async def get(self, response_id: str, tenant: str) -> ResponseRecord:
        """A stored response (one created with `store: false` is never found: it is kept
        only while it runs, for the runtime's own use)."""
        record = await self._store.get_response(response_id, tenant)
        if record is None or unstored(record.snapshot):
            raise NotFound(f"Response with id '{response_id}' not found.")
        current_response_id.set(record.id)
        return record

    async def snapshot(self, response_id: str, tenant: str) -> tuple[str, bool]:
        """(snapshot JSON, background) of a response, for the GET that polls it."""
        found = await self._store.response_snapshot(response_id, tenant)
        if found is None or unstored(found[0]):
            raise NotFound(f"Response with id '{response_id}' not found.")
        current_response_id.set(response_id)
        return found

    async def wait_final(self, response_id: str, tenant: str) -> dict[str, Any]:
        """The response once it is terminal (it is driven here or by another process;
        a dead process's foreground responses are ended by the recovery scan)."""
        while True:
            record = await self.get(response_id, tenant)
            if ResponseStatus(record.status).is_terminal:
                final: dict[str, Any] = json.loads(record.snapshot)
                return final
            runner = self._runs.runner(response_id)
            if runner is not None:
                await asyncio.shield(runner.done)
            else:
                await asyncio.sleep(self._settings.poll_interval)

    async def follow(
        self, response_id: str, tenant: str, after: int
    ) -> AsyncIterator[list[EventRow]]:
        """The response's events after `after`, from the log, then live until the terminal
        event (G7), in batches as committed. Ends at once if the response is already past
        `after` and terminal. The log is read a page at a time (`_next_page`), each only
        when the previous batch was taken, so that a stream's consumer sets its pace."""
        poll = self._settings.poll_interval
        check_status = True
        handed: Sequence[EventRow] = ()  # committed rows the broker handed over
        page = PAGE_ROWS
        while True:
            if handed and handed[0].seq == after + 1:
                rows = list(handed)  # the next rows, committed: no need to read them back
            else:
                # One page, read when the consumer asks for it: a slow reader holds one.
                rows = await self._store.read_events(response_id, after, limit=page)
                page = _next_page(rows)
            handed = ()
            if rows:
                ends = next((i for i, r in enumerate(rows) if r.type in TERMINAL_EVENTS), None)
                if ends is not None:
                    yield rows[: ends + 1]
                    return
                yield rows
                after = rows[-1].seq
                continue
            if check_status:
                record = await self._store.get_response(response_id, tenant)
                if record is None or ResponseStatus(record.status).is_terminal:
                    if not await self._store.read_events(response_id, after, limit=1):
                        return
                    continue
            # Driven here: every commit wakes us, so polling is only a fallback.
            local = self._runs.runner(response_id) is not None
            woke = await self._broker.wait(response_id, after, poll * 20 if local else poll)
            check_status = woke is None
            handed = woke or ()


def _next_page(rows: Sequence[EventRow]) -> int:
    """How many events `follow` reads next: PAGE_ROWS, or after a page of large events
    (a long answer's `done` events, a large tool output) about PAGE_CHARS of them, and
    at least one, whatever its size."""
    largest = max((len(row.data) for row in rows), default=0)
    return max(1, min(PAGE_ROWS, PAGE_CHARS // max(largest, 1)))
