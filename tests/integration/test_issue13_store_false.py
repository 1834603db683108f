"""Issue 13: `store: false` was echoed but ignored: the response was kept like any other,
retrievable, listable and usable as `previous_response_id` for the whole retention.

Now, as OpenAI: a response created with `store: false` is never found (GET, input items,
delete, cancel: 404; `previous_response_id`: 400 `previous_response_not_found`). The
server keeps its rows only while it runs (a crash must still end it) and deletes them,
with its input items, events, steps and journal, in the transaction that records its end,
also when a crash ends it. A `conversation` it belongs to still receives its items.
Background mode and an `Idempotency-Key` need `store` true (400).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import StartServer, make_client
from tests.integration._responses_support import MODEL, SLOW, checked_events, checked_response
from tests.support.peek import count, query
from tests.support.server import ServerProcess
from tests.support.stores import Location
from tests.support.waiting import wait_until

TABLES = ("responses", "response_items", "events", "steps", "journal", "idempotency_keys")
LOOKUP = '[[call lookup {"city": "Paris"}]] weather please'


def rows_of(db: Location, response_id: str) -> dict[str, int]:
    """How many rows each table holds for the response."""
    counts = {}
    for table in TABLES:
        column = "id" if table == "responses" else "response_id"
        counts[table] = count(db, f"SELECT count(*) FROM {table} WHERE {column} = ?", response_id)
    return counts


def kept(db: Location, response_id: str) -> bool:
    return any(rows_of(db, response_id).values())


@pytest.fixture
def tool_server(start_server: StartServer, tmp_path: Path) -> ServerProcess:
    """A server whose agent has server tools (so a run writes steps and journal rows)."""
    return start_server(
        "--agent",
        "tests.agents.tool_agent:agent",
        "--embedded-delay-ms",
        "0",
        env={"SIDE_EFFECTS_DIR": str(tmp_path / "effects")},
    )


@pytest.fixture
def sdk(tool_server: ServerProcess) -> Iterator[openai.OpenAI]:
    with make_client(tool_server.url) as client:
        yield client


def assert_not_found(sdk: openai.OpenAI, response_id: str) -> None:
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(response_id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.input_items.list(response_id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.cancel(response_id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.delete(response_id)
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(model=MODEL, input="and then?", previous_response_id=response_id)
    assert caught.value.code == "previous_response_not_found"
    assert caught.value.param == "previous_response_id"


def test_a_finished_store_false_response_is_gone_with_all_its_rows(
    sdk: openai.OpenAI, tool_server: ServerProcess
) -> None:
    response = checked_response(sdk.responses.create(model=MODEL, input=LOOKUP, store=False))

    assert response.status == "completed"
    assert response.store is False
    types = [item.type for item in response.output]
    assert types == ["function_call", "function_call_output", "message"]  # a server tool ran
    assert not kept(tool_server.db, response.id), rows_of(tool_server.db, response.id)
    assert_not_found(sdk, response.id)


def test_a_stored_response_keeps_its_rows(sdk: openai.OpenAI, tool_server: ServerProcess) -> None:
    response = sdk.responses.create(model=MODEL, input=LOOKUP)

    counts = rows_of(tool_server.db, response.id)
    assert counts["responses"] == counts["steps"] == counts["journal"] == 1
    assert sdk.responses.retrieve(response.id).store is True


def test_a_running_store_false_response_is_kept_but_never_found(
    sdk: openai.OpenAI, tool_server: ServerProcess
) -> None:
    events: list[dict[str, Any]] = []
    body = {"model": MODEL, "input": SLOW, "store": False, "stream": True}
    with (
        httpx.Client(base_url=tool_server.url, timeout=30.0) as http,
        http.stream("POST", "/v1/responses", json=body) as streamed,
    ):
        for line in streamed.iter_lines():
            if not line.startswith("data: "):
                continue
            events.append(json.loads(line.removeprefix("data: ")))
            if events[-1]["type"] == "response.output_text.delta" and len(events) == 5:
                response_id = events[0]["response"]["id"]
                # The run needs its rows while it runs; clients never see them.
                assert kept(tool_server.db, response_id)
                assert_not_found(sdk, response_id)

    checked_events(events)
    final = events[-1]["response"]
    assert (final["status"], final["store"]) == ("completed", False)
    assert not kept(tool_server.db, final["id"])


def test_a_store_false_turn_still_adds_its_items_to_its_conversation(
    sdk: openai.OpenAI, tool_server: ServerProcess
) -> None:
    conversation = sdk.conversations.create()

    response = sdk.responses.create(
        model=MODEL, input="remember this [[words 2]]", conversation=conversation.id, store=False
    )

    items = list(sdk.conversations.items.list(conversation.id, order="asc"))
    assert [item.type for item in items] == ["message", "message"]
    assert items[1].id == response.output[0].id
    assert not kept(tool_server.db, response.id)
    with pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(response.id)


@pytest.mark.parametrize(
    ("options", "param"),
    [
        pytest.param({"background": True}, "store", id="background"),
        pytest.param({"extra_headers": {"Idempotency-Key": "k-1"}}, "Idempotency-Key", id="key"),
    ],
)
def test_what_needs_store_true_is_refused_with_store_false(
    sdk: openai.OpenAI, tool_server: ServerProcess, options: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(model=MODEL, input="hi", store=False, **options)

    assert caught.value.param == param
    assert count(tool_server.db, "SELECT count(*) FROM responses") == 0


def test_a_store_false_response_cut_by_a_crash_is_ended_and_deleted_on_restart(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Its rows are what lets the next process end it: they outlive a crash, and go
    with the end that recovery gives it."""
    server = start_server("--lease-ttl", "1", "--scan-interval", "0.2")
    body = {"model": MODEL, "input": SLOW, "store": False, "stream": True}
    with (
        httpx.Client(base_url=server.url, timeout=30.0) as http,
        http.stream("POST", "/v1/responses", json=body) as streamed,
    ):
        # Held until the kill: a generator dropped early closes the connection, and the
        # hang-up (not the crash) would end the response, and delete it, first.
        lines = streamed.iter_lines()
        for line in lines:
            if line.startswith("data: ") and '"response.output_text.delta"' in line:
                break
        response_id = _created_id(server.db)
        server.kill()
        lines.close()
    assert kept(server.db, response_id)

    restarted = start_server("--lease-ttl", "1", "--scan-interval", "0.2", db=server.db)
    wait_until(
        lambda: not kept(server.db, response_id),
        lambda: f"the response discarded; still stored: {rows_of(server.db, response_id)}",
        deadline=20,
        interval=0.1,  # polling the store from outside
    )
    with make_client(restarted.url) as sdk, pytest.raises(openai.NotFoundError):
        sdk.responses.retrieve(response_id)


def _created_id(db: Location) -> str:
    [(response_id,)] = query(db, "SELECT id FROM responses")
    return str(response_id)
