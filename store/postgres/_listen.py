"""What other processes committed, heard through LISTEN/NOTIFY.

Every write that appends events sends `pg_notify` inside its own transaction, so a
notification is delivered exactly when, and only if, the events are committed. Its
payload names the writer (the store instance), the response and the range of sequence
numbers; a process reads the rows of a range another process wrote and gives them to its
`on_events_committed` listeners, as it gives its own commits' rows (store/postgres/_base.py).
The payload never carries the events themselves: NOTIFY payloads are limited to 8000
bytes.

Writes that a driver or a lane elsewhere must act on send a *signal* the same way:

    stop <response id>   a cancel or a steer was recorded for a running response
    lane <lane>          a turn of the lane ended (or a queued one was cancelled): the
                         next one may start
    free <response id>   a lease was released (a hand-over): the turn may be taken now

One dedicated connection, outside the pool, listens. It is checked every few seconds and
opened again, with back-off, when it drops; notifications sent while it was down are
lost, so correctness never depends on them: followers and scans keep polling, slowly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from .._records import EventRow

if TYPE_CHECKING:
    from ._sql import Conn

log = logging.getLogger("store")

EVENTS = "durable_responses_events"
SIGNALS = "durable_responses_signals"
CHECK_EVERY = 5.0  # seconds between checks that the listening connection still answers
TIMEOUT = 10.0
BACKOFF = (0.1, 5.0)  # first and longest wait before connecting again

FetchRows = Callable[[str, int, int], Awaitable[list[EventRow]]]  # (response id, first, last)
DeliverRows = Callable[[str, Sequence[EventRow]], None]
DeliverSignal = Callable[[str, str], None]  # (kind, key)


def events_payload(instance: str, response_id: str, events: Sequence[EventRow]) -> str:
    return f"{events_prefix(instance)}{response_id} {events[0].seq} {events[-1].seq}"


def events_prefix(instance: str) -> str:
    """The payload's start: SQL appends `<response id> <first> <last>`."""
    return f"{instance} "


def signal_payload(instance: str, kind: str) -> str:
    """The payload's start: SQL appends the key (a response id or a lane)."""
    return f"{instance} {kind} "


class Listener:
    def __init__(
        self,
        connect: Callable[[], Awaitable[Conn]],
        instance: str,
        fetch: FetchRows,
        deliver: DeliverRows,
        signal: DeliverSignal,
    ) -> None:
        self._connect = connect
        self._instance = instance
        self._fetch = fetch
        self._deliver = deliver
        self._signal = signal
        self._pending: dict[str, tuple[int, int]] = {}  # response id -> (first, last)
        self._wake = asyncio.Event()
        self.listening = False

    async def run(self) -> None:
        """Listen, and deliver what is heard, until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._deliver_forever())
            tg.create_task(self._listen_forever())

    async def _listen_forever(self) -> None:
        wait = BACKOFF[0]
        while True:
            try:
                await self._listen_once()
                wait = BACKOFF[0]  # it worked for a while: the next drop retries soon
                await asyncio.sleep(wait)
            except Exception as exc:  # any failure: connect again, later
                log.warning(
                    "store: the LISTEN connection failed (%s); retrying in %.1fs", exc, wait
                )
                await asyncio.sleep(wait)
                wait = min(wait * 2, BACKOFF[1])

    async def _listen_once(self) -> None:
        # asyncio.timeout, not wait_for: on 3.11, wait_for can swallow a cancel that
        # arrives as its awaitable finishes, and the store's close would wait forever.
        conn = await _connect_whole(self._connect)
        try:
            lost = asyncio.Event()
            conn.add_termination_listener(lambda _: lost.set())
            await conn.add_listener(EVENTS, self._on_events)
            await conn.add_listener(SIGNALS, self._on_signal)
            self.listening = True
            while not lost.is_set():
                try:
                    async with asyncio.timeout(CHECK_EVERY):
                        await lost.wait()
                except TimeoutError:
                    await conn.execute("SELECT 1", timeout=TIMEOUT)  # raises if it is gone
            log.warning("store: the LISTEN connection was closed; connecting again")
        finally:
            self.listening = False
            conn.terminate()

    def _on_events(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        try:
            instance, response_id, first, last = str(payload).split(" ")
            span = (int(first), int(last))
        except ValueError:
            log.warning("store: an unreadable notification: %r", payload)
            return
        if instance == self._instance:
            return  # ours: delivered after our own commit already
        if response_id in self._pending:
            earlier = self._pending[response_id]
            span = (min(earlier[0], span[0]), max(earlier[1], span[1]))
        self._pending[response_id] = span
        self._wake.set()

    def _on_signal(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        parts = str(payload).split(" ", 2)
        if len(parts) != 3:
            log.warning("store: an unreadable notification: %r", payload)
            return
        instance, kind, key = parts
        if instance != self._instance:
            self._signal(kind, key)

    async def _deliver_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            pending, self._pending = self._pending, {}
            for response_id, (first, last) in pending.items():
                try:
                    rows = await self._fetch(response_id, first, last)
                except Exception as exc:  # the followers' poll finds them
                    log.debug("store: could not read notified events: %s", exc)
                    continue
                if rows:
                    try:
                        self._deliver(response_id, rows)
                    except Exception:  # a listener's bug must not stop the deliveries
                        log.exception("store: an events listener failed")


async def _connect_whole(connect: Callable[[], Awaitable[Conn]]) -> Conn:
    """Connect (bounded by the connection's own timeout). A cancel that arrives meanwhile
    waits for the attempt to end, closes what it opened, and then goes on: asyncpg leaves
    an error nobody retrieves behind a connect cancelled midway."""
    attempt = asyncio.ensure_future(connect())  # awaited on every path below
    try:
        return await asyncio.shield(attempt)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            (await attempt).terminate()
        raise
