"""The context one turn runs in, named: what its tool calls and workflow steps need.

A `Turn` holds the response's id, the fence every write of the turn goes through, the
store, the runtime's settings, the observer and the turn's stop signal. The runner builds
one when it is made and hands it to the tool phase and to a workflow's context, so that
neither reaches back through the runner, or the runtime behind it, for any of these.

A lost lease is a control-flow signal here, not an error: `lease_held` turns the store's
`LeaseLost` into `TurnStopped("lease_lost")`, a BaseException, so that a workflow handler
or a tool that catches `Exception` cannot swallow it, and the runner ends the turn
without writing (docs/guarantees.md, Terms: Lease).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

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

    __slots__ = ("cancelled", "draining", "reason", "steered")

    def __init__(self) -> None:
        self.reason: str | None = None  # "cancelled", "interrupt", "rollback" or "steer"
        self.draining = False
        self.steered = False  # a `response.steer` asked, whichever reason won
        self.cancelled = asyncio.Event()  # set at the request: tools see ToolContext.cancelled

    def request(self, reason: str) -> None:
        """Ask the turn to stop; of several requests the strongest decides how it ends:
        a cancel, then a rollback, then an interrupt, then a steer."""
        self.steered = self.steered or reason == "steer"
        if self.reason is None or _STRENGTH.get(reason, 0) > _STRENGTH.get(self.reason, 0):
            self.reason = reason
        self.cancelled.set()

    def drain(self) -> None:
        self.draining = True

    @property
    def requested(self) -> bool:
        return self.reason is not None

    async def wait(self, seconds: float) -> None:
        """Sleep `seconds` (a retry's backoff), woken by a stop request, then `check`: a
        cancel must not wait for a retry that a 429's Retry-After may put a minute off."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.cancelled.wait(), seconds)
        self.check()

    def check(self) -> None:
        """Raise TurnStopped if the turn was asked to stop, or to pause for a shutdown."""
        if self.reason is not None:
            raise TurnStopped(self.reason)
        if self.draining:
            raise TurnStopped(SHUTDOWN)


@dataclass(frozen=True, slots=True)
class Turn:
    """One running turn's durable context (see the module docstring)."""

    response_id: str
    fence: Fence  # (owner, epoch): every write of the turn is conditional on it (G8)
    store: Store
    settings: RuntimeSettings
    observer: Observer
    stop: Stop


@contextmanager
def lease_held() -> Iterator[None]:
    """Around a fenced write of a turn: LeaseLost becomes TurnStopped("lease_lost")."""
    try:
        yield
    except LeaseLost as exc:
        raise TurnStopped(LEASE_LOST) from exc
