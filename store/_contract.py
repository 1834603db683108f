"""`Store`: the one interface `recovery/` knows of the store, whichever backend is behind
it (SQLite in `store/sqlite/`, PostgreSQL in `store/postgres/`).

Both backends keep the same promises; each method's docstring in `store/sqlite/` is the
contract, and `tests/store/test_contract*.py` runs the same checks on both. Two rules
hold whatever the backend:

- Every write that a runner makes is fenced (`Fence`): it commits only while the lease
  it was given is still held, and raises `LeaseLost` otherwise.
- `on_events_committed` listeners get the rows of every commit that added events, this
  process's and, where the backend can tell (PostgreSQL's LISTEN/NOTIFY), other
  processes'. `on_signal` listeners hear other processes' `stop <response id>`,
  `free <response id>` and `lane <lane>`; a backend that cannot tell never calls them.
  Neither is needed for correctness: the runtime also polls.
- Methods are called on the event loop, except `renew_leases`, which any thread may
  call (the lease keeper's, so that a blocked event loop cannot lose a live lease). No
  method hands the caller's code to another thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Sequence
from typing import Literal, Protocol

from ._records import (
    Admission,
    ConversationRecord,
    EventRow,
    Fence,
    ItemRow,
    JournalEntry,
    NewResponse,
    NewSteer,
    ResponseRecord,
    SteerRecord,
)

Order = Literal["asc", "desc"]
CommitListener = Callable[[str, Sequence[EventRow]], None]  # (response id, rows)
SignalListener = Callable[[str, str], None]  # (kind, key): what another process wrote


class Store(Protocol):
    # -- responses: admission, claims, leases ------------------------------------------
    async def create_response(
        self,
        new: NewResponse,
        items: Sequence[ItemRow],
        events: Sequence[EventRow],
        admission: Admission | None = None,
        claim_for: tuple[str, float] | None = None,
    ) -> tuple[ResponseRecord, bool, ResponseRecord | None]: ...
    async def claim(
        self, response_id: str, owner: str, lease_ttl: float
    ) -> ResponseRecord | None: ...
    async def recover(
        self, response_id: str, owner: str, lease_ttl: float
    ) -> ResponseRecord | None: ...
    async def fix_conversation_upto(self, response_id: str, fence: Fence) -> int | None: ...
    async def orphans(self, limit: int = 5000) -> list[tuple[str, str]]: ...
    async def count_queued(self) -> int: ...
    async def lane_busy(self, lane: str) -> bool: ...
    async def running_turn(self, lane: str) -> ResponseRecord | None: ...
    async def idempotency_key(self, tenant: str, key: str) -> tuple[str, str] | None: ...
    async def is_lane_head(self, response_id: str) -> bool: ...
    async def next_in_lane(self, lane: str) -> str | None: ...
    def renew_leases(
        self, leases: Sequence[tuple[str, Fence]], lease_ttl: float
    ) -> concurrent.futures.Future[list[str]]: ...
    async def release_leases(self, leases: Sequence[tuple[str, Fence]]) -> None: ...
    async def release_lease(self, response_id: str, fence: Fence) -> None: ...
    async def stop_requests(self, owner: str) -> list[tuple[str, str]]: ...

    # -- a running response's writes -------------------------------------------------
    def append_events(
        self, response_id: str, fence: Fence, events: Sequence[EventRow], *, join: bool = False
    ) -> asyncio.Future[None]: ...
    async def save_snapshot(
        self,
        response_id: str,
        fence: Fence,
        *,
        snapshot: str,
        last_seq: int,
        events: Sequence[EventRow] = (),
        terminal: bool = False,
        status: str,
        step: int | None = None,
        conversation_items: Sequence[ItemRow] = (),
        logged: bool = False,
        discard: bool = False,
    ) -> None: ...
    async def cancel_queued(
        self, response_id: str, *, snapshot: str, last_seq: int, events: Sequence[EventRow]
    ) -> bool: ...
    async def request_cancel(self, response_id: str) -> bool: ...
    async def delete_response(self, response_id: str, tenant: str) -> bool: ...
    async def purge(self, before: float, batch: int = 500) -> tuple[int, int]: ...

    # -- reads ------------------------------------------------------------------------
    async def get_response(self, response_id: str, tenant: str) -> ResponseRecord | None: ...
    async def response_snapshot(self, response_id: str, tenant: str) -> tuple[str, bool] | None: ...
    async def read_events(
        self, response_id: str, after: int, limit: int = 1000
    ) -> list[EventRow]: ...
    async def list_response_items(
        self, response_id: str, *, after: str | None, order: Order, limit: int
    ) -> tuple[list[ItemRow], bool] | None: ...
    async def chain(
        self, response_id: str, tenant: str
    ) -> list[tuple[ResponseRecord, list[str]]]: ...
    async def find_items(self, tenant: str, item_ids: Sequence[str]) -> dict[str, str]: ...

    # -- the step records and the tool journal -----------------------------------------
    async def record_step(
        self,
        response_id: str,
        fence: Fence,
        step: int,
        items: str,
        *,
        events: Sequence[EventRow] = (),
    ) -> None: ...
    async def get_step(self, response_id: str, step: int) -> str | None: ...
    async def journal(self, response_id: str, step: int | None = None) -> list[JournalEntry]: ...
    async def claim_call(
        self,
        response_id: str,
        fence: Fence,
        *,
        call_id: str,
        tool: str,
        arguments: str,
        idempotency_key: str,
        step: int = 0,
        state: str = "claimed",
        output: str | None = None,
    ) -> None: ...
    async def reclaim_call(
        self, response_id: str, fence: Fence, call_id: str, *, step: int = 0
    ) -> None: ...
    async def finish_call(
        self,
        response_id: str,
        fence: Fence,
        call_id: str,
        *,
        state: str,
        output: str,
        step: int = 0,
    ) -> None: ...

    # -- steers (response.steer) ------------------------------------------------------
    async def add_steer(self, steer: NewSteer, *, max_waiting: int) -> None: ...
    async def steers_of(self, target_id: str) -> list[SteerRecord]: ...
    async def settle_steers(
        self, target_id: str, steer_ids: Sequence[str], *, state: str, error: str | None = None
    ) -> bool: ...
    async def unsettled_steers(self, limit: int = 100) -> list[tuple[str, str]]: ...

    # -- conversations ----------------------------------------------------------------
    async def create_conversation(
        self, conversation: ConversationRecord, items: Sequence[ItemRow]
    ) -> None: ...
    async def get_conversation(
        self, conversation_id: str, tenant: str
    ) -> ConversationRecord | None: ...
    async def update_conversation(
        self, conversation_id: str, tenant: str, metadata: str
    ) -> ConversationRecord | None: ...
    async def delete_conversation(self, conversation_id: str, tenant: str) -> bool: ...
    async def add_conversation_items(
        self,
        conversation_id: str,
        tenant: str,
        items: Sequence[ItemRow],
        *,
        check: Callable[[list[str], list[str]], None] | None = None,
    ) -> bool: ...
    async def list_conversation_items(
        self, conversation_id: str, *, after: str | None, order: Order, limit: int
    ) -> tuple[list[ItemRow], bool] | None: ...
    async def get_conversation_item(self, conversation_id: str, item_id: str) -> ItemRow | None: ...
    async def delete_conversation_item(
        self,
        conversation_id: str,
        item_id: str,
        *,
        check: Callable[[list[str], list[str]], None] | None = None,
    ) -> bool: ...
    async def conversation_history(self, conversation_id: str, upto: int | None) -> list[str]: ...
    async def taken_call_ids(
        self, lane: str, conversation_id: str | None, upto: int | None
    ) -> set[str]:
        """The call ids of the function calls and outputs in the inputs of the lane's
        turns that have not ended (they join its history as they end) and, with a
        conversation, in its items at positions from `upto` on (all with None): ids a
        new call of the lane may not take."""
        ...

    # -- health and notifications -------------------------------------------------------
    async def ping(self) -> None: ...
    def check_file(self) -> None: ...
    async def check_writable(self) -> None: ...
    def on_events_committed(self, listener: CommitListener) -> None: ...
    def on_commit(self, listener: Callable[[float, int], None]) -> None: ...
    def on_signal(self, listener: SignalListener) -> None: ...
