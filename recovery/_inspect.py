"""Read-only views of a runtime for the server, so that it never reads the store itself:
the gauges that /metrics shows, the pages of a response's input items, and the history a
new turn would start from (what an input token count counts, and a compaction compacts)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from store import ItemRow, ResponseRecord, Store

from ._errors import InvalidRequest, NotFound
from ._history import load_history
from ._response import unstored
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

    async def history(
        self,
        tenant: str,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """The items a turn created with these would start from, before its own input;
        refused as a create would refuse them (`turn_history`)."""
        return await turn_history(
            self._store,
            tenant,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
        )


async def turn_history(
    store: Store,
    tenant: str,
    *,
    previous_response_id: str | None = None,
    conversation_id: str | None = None,
) -> list[dict[str, Any]]:
    """The items a turn created with these would start from, before its own input;
    refused as a create would refuse them (an unknown previous response is a 400, an
    unknown conversation a 404)."""
    if previous_response_id:
        previous = await store.get_response(previous_response_id, tenant)
        if previous is None or unstored(previous.snapshot):
            raise InvalidRequest(
                f"Previous response with id '{previous_response_id}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
    elif conversation_id and await store.get_conversation(conversation_id, tenant) is None:
        raise NotFound(f"Conversation with id '{conversation_id}' not found.")
    return await load_history(
        store,
        tenant=tenant,
        previous_response_id=previous_response_id,
        conversation_id=conversation_id,
    )
