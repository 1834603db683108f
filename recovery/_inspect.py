"""Read-only views of a runtime for the server, so that it never reads the store itself:
the gauges that /metrics shows, and the pages of a response's input items."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from store import ItemRow, ResponseRecord

from ._status import ResponseStatus

if TYPE_CHECKING:
    from ._runtime import Runtime


@dataclass(frozen=True, slots=True)
class Gauges:
    active_runs: int  # turns this process is running
    queued: int  # queued responses in the store, any process's
    awaiting_recovery: int  # running responses whose lease expired, not yet taken again
    ready: bool  # the first recovery scan is done


class Inspector:
    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._store = runtime.store

    async def gauges(self) -> Gauges:
        queued = await self._store.count_queued()
        orphans = await self._store.orphans()
        return Gauges(
            active_runs=self._runtime.active_runs,
            queued=queued,
            awaiting_recovery=sum(1 for _, s in orphans if s == ResponseStatus.IN_PROGRESS),
            ready=self._runtime.ready.is_set(),
        )

    async def input_items(
        self,
        response: ResponseRecord,
        *,
        after: str | None,
        order: Literal["asc", "desc"],
        limit: int,
    ) -> tuple[list[ItemRow], bool] | None:
        """A page of a response's input items; None if `after` names none of them."""
        return await self._store.list_response_items(
            response.id, after=after, order=order, limit=limit
        )
