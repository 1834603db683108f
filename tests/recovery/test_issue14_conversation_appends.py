"""Issue 14: items appended to a conversation are checked against its stored items in the
append's own transaction.

The bug: the conversation routes read the conversation's history, checked tool pairing
against it (G5), and appended the items in a later transaction. Two appends of an output
for the same call, made together, both read the history before either wrote, both passed,
and the conversation held two outputs for one call, which every later turn's history
carries to the model. The fix: `Conversations.add_items` (recovery/_conversations.py)
hands the check to `store.add_conversation_items(check=...)`, which runs it inside the
append's transaction, so an append sees every append committed before it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from recovery import (
    Agent,
    Conversations,
    InvalidRequest,
    ModelEvent,
    ModelRequest,
    NotFound,
    Runtime,
    RuntimeSettings,
    open_store,
)

CALL = {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "42"}


class NoModel:
    name = "none"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        raise AssertionError("no turn runs here")
        yield


@pytest.fixture
async def conversations(tmp_path: Path) -> AsyncIterator[Conversations]:
    async with open_store(tmp_path / "conversations.db") as store:
        yield Conversations(Runtime(store, Agent(), NoModel(), RuntimeSettings()))


async def stored_types(
    conversations: Conversations, conversation_id: str, tenant: str = ""
) -> list[str]:
    record = await conversations.get(conversation_id, tenant)
    page = await conversations.list_items(record, after=None, order="asc", limit=100)
    assert page is not None
    return [json.loads(row.item)["type"] for row in page[0]]


@pytest.mark.parametrize("appends", [2, 5])
async def test_concurrent_outputs_for_one_call_only_one_is_appended(
    conversations: Conversations, appends: int
) -> None:
    record = await conversations.create("", {}, [CALL])

    results = await asyncio.gather(
        *(conversations.add_items(record.id, "", [dict(OUTPUT)]) for _ in range(appends)),
        return_exceptions=True,
    )

    refused = [r for r in results if isinstance(r, InvalidRequest)]
    assert len(refused) == appends - 1, results
    assert {r.code for r in refused} == {"duplicate_tool_output"}
    assert await stored_types(conversations, record.id) == ["function_call", "function_call_output"]


async def test_a_refused_append_does_not_undo_one_committed_with_it(
    conversations: Conversations,
) -> None:
    """Appends to two conversations commit in one batch; the refused one is rolled back
    alone (the writer commits the others one by one), and reaches only its own caller."""
    first = await conversations.create("", {}, [CALL])
    second = await conversations.create("", {}, [CALL])

    results = await asyncio.gather(
        conversations.add_items(first.id, "", [dict(OUTPUT)]),
        conversations.add_items(second.id, "", [{**OUTPUT, "call_id": "call_ghost"}]),
        return_exceptions=True,
    )

    assert not isinstance(results[0], BaseException)
    assert isinstance(results[1], InvalidRequest) and results[1].code == "tool_call_not_found"
    assert await stored_types(conversations, first.id) == ["function_call", "function_call_output"]
    assert await stored_types(conversations, second.id) == ["function_call"]


async def test_an_append_to_a_missing_conversation_is_not_found_before_its_items_are_checked(
    conversations: Conversations,
) -> None:
    with pytest.raises(NotFound, match="conv_nope"):
        await conversations.add_items("conv_nope", "", [{**OUTPUT, "call_id": "call_ghost"}])


async def test_another_tenants_conversation_is_not_found(conversations: Conversations) -> None:
    record = await conversations.create("tenant-a", {}, [CALL])

    with pytest.raises(NotFound):
        await conversations.add_items(record.id, "tenant-b", [dict(OUTPUT)])
    assert await stored_types(conversations, record.id, "tenant-a") == ["function_call"]
