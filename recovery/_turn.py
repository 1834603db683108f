"""The context one turn runs in, named: what its tool calls and workflow steps need.

A `Turn` holds the response's id, the fence every write of the turn goes through, the
store, the runtime's settings, the observer, the turn's stop signal and the bodies (of
tools and workflow steps) it started that still run. The runner builds
one when it is made and hands it to the tool phase and to a workflow's context, so that
neither reaches back through the runner, or the runtime behind it, for any of these.

A lost lease is a control-flow signal here, not an error: `lease_held` turns the store's
`LeaseLost` into `TurnStopped("lease_lost")`, a BaseException, so that a workflow handler
or a tool that catches `Exception` cannot swallow it, and the runner ends the turn
without writing (docs/guarantees.md, Terms: Lease).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from store import Fence, LeaseLost, Store

from ._errors import TurnStopped
from ._observer import Observer
from ._settings import RuntimeSettings

LEASE_LOST = "lease_lost"  # TurnStopped's reason when a fenced write found another owner
SHUTDOWN = "shutdown"  # TurnStopped's reason when a drain pauses the turn at a boundary


_STRENGTH = {"steer": 1, "interrupt": 2, "rollback": 3, "cancelled": 4}


class Stop:
    """Whether the turn was asked to stop, and why. A stop request (a cancel, a steer)
    ends the turn at its next safe point; a drain (a graceful shutdown) pauses it at its
    next step boundary without ending it, for another process to resume."""

    __slots__ = ("_woken", "cancelled", "draining", "reason", "steered")

    def __init__(self) -> None:
        self.reason: str | None = None  # "cancelled", "interrupt", "rollback" or "steer"
        self.draining = False
        self.steered = False  # a `response.steer` asked, whichever reason won
        self.cancelled = asyncio.Event()  # set at the request: tools see ToolContext.cancelled
        self._woken = asyncio.Event()  # set at a request or a drain: ends `wait`

    def request(self, reason: str) -> None:
        """Ask the turn to stop; of several requests the strongest decides how it ends:
        a cancel, then a rollback, then an interrupt, then a steer."""
        self.steered = self.steered or reason == "steer"
        if self.reason is None or _STRENGTH.get(reason, 0) > _STRENGTH.get(self.reason, 0):
            self.reason = reason
        self.cancelled.set()
        self._woken.set()

    def drain(self) -> None:
        self.draining = True
        self._woken.set()

    @property
    def requested(self) -> bool:
        return self.reason is not None

    async def wait(self, seconds: float) -> None:
        """Sleep `seconds` (a retry's backoff), woken by a stop request or a drain, then
        `check`: neither a cancel nor a graceful shutdown may wait for a retry that a 429's
        Retry-After may put a minute off."""
        with suppress(TimeoutError):
            await asyncio.wait_for(self._woken.wait(), seconds)
        self.check()

    def check(self) -> None:
        """Raise TurnStopped if the turn was asked to stop, or to pause for a shutdown."""
        if self.reason is not None:
            raise TurnStopped(self.reason)
        if self.draining:
            raise TurnStopped(SHUTDOWN)


class Bodies:
    """The tool and step bodies a turn started, while they run. A turn that ends
    cancelled or paused by a shutdown is handed over (its lease released, for another
    process to take it at once) only if none of them still runs (G3, G8). The turn waits
    for every body it starts, so none normally does; but a thread cannot be stopped: a
    plain tool's thread let go at its timeout, or a plain workflow step's thread whose
    waiting task the event loop's closing cancelled (its entry left `claimed`), may still
    act, and another process that took the turn at once could run the call again while it
    does, or fail closed a call about to finish. Such a turn keeps its lease until the
    lease expires instead."""

    __slots__ = ("_bodies",)

    def __init__(self) -> None:
        self._bodies: set[asyncio.Future[Any]] = set()

    def add(self, body: asyncio.Future[Any]) -> None:
        """Count `body` (a thread's future, not a task waiting for it) until it ends."""
        if not body.done():
            self._bodies.add(body)
            body.add_done_callback(self._bodies.discard)

    @property
    def running(self) -> bool:
        return any(not body.done() for body in self._bodies)


@dataclass(frozen=True, slots=True)
class Turn:
    """One running turn's durable context (see the module docstring)."""

    response_id: str
    fence: Fence  # (owner, epoch): every write of the turn is conditional on it (G8)
    store: Store
    settings: RuntimeSettings
    observer: Observer
    stop: Stop
    bodies: Bodies = field(default_factory=Bodies)  # started and still running (G3, G8)


@contextmanager
def lease_held() -> Iterator[None]:
    """Around a fenced write of a turn: LeaseLost becomes TurnStopped("lease_lost")."""
    try:
        yield
    except LeaseLost as exc:
        raise TurnStopped(LEASE_LOST) from exc
