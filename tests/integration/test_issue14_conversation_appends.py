"""Issue 14, through HTTP: `POST /v1/conversations/{id}/items` checks tool pairing (G5)
against the conversation's stored items in the transaction that appends them, so an
output sent twice, one after the other or at the same time, is stored once and the other
request gets 400 `duplicate_tool_output` (tests/recovery/test_issue14_conversation_appends.py
has the race in process); and against the input of a turn that has not ended, which joins
the conversation when that turn ends."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from recovery._compaction import compaction_item

CALL = {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "42"}


def conversation_with_a_call(http: httpx.Client) -> str:
    created = http.post("/v1/conversations", json={"items": [CALL]})
    assert created.status_code == 200, created.text
    conversation_id: str = created.json()["id"]
    return conversation_id


def add(http: httpx.Client, conversation_id: str, items: list[dict[str, Any]]) -> httpx.Response:
    return http.post(f"/v1/conversations/{conversation_id}/items", json={"items": items})


def stored_types(http: httpx.Client, conversation_id: str) -> list[str]:
    listed = http.get(f"/v1/conversations/{conversation_id}/items", params={"order": "asc"})
    return [item["type"] for item in listed.json()["data"]]


def test_a_second_output_for_a_call_is_refused(http: httpx.Client) -> None:
    conversation_id = conversation_with_a_call(http)
    assert add(http, conversation_id, [OUTPUT]).status_code == 200

    again = add(http, conversation_id, [OUTPUT])

    assert again.status_code == 400
    assert again.json()["error"] == {
        "message": "Duplicate function call output for call_id 'call_1'.",
        "type": "invalid_request_error",
        "param": "items",
        "code": "duplicate_tool_output",
    }
    assert stored_types(http, conversation_id) == ["function_call", "function_call_output"]


def test_outputs_for_one_call_sent_at_once_are_stored_once(http: httpx.Client) -> None:
    conversation_id = conversation_with_a_call(http)

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: add(http, conversation_id, [OUTPUT]), range(4)))

    assert sorted(a.status_code for a in answers) == [200, 400, 400, 400]
    assert {a.json()["error"]["code"] for a in answers if a.status_code == 400} == {
        "duplicate_tool_output"
    }
    assert stored_types(http, conversation_id) == ["function_call", "function_call_output"]


def test_an_unknown_conversation_is_not_found_before_its_items_are_checked(
    http: httpx.Client,
) -> None:
    answer = add(http, "conv_nope", [{**OUTPUT, "call_id": "call_ghost"}])

    assert answer.status_code == 404
    assert answer.json()["error"]["message"] == "Conversation with id 'conv_nope' not found."


# -- while a turn that answers the call has not ended --------------------------------------
# A turn's input joins its conversation when the turn ends, after what the client adds
# meanwhile: the items API checks against it too, or the conversation would end with two
# outputs for one call, an output without its call, or a compaction between the two.


def answering_turn(http: httpx.Client, conversation_id: str) -> str:
    """A background turn that answers call_1 and is still running."""
    running = http.post(
        "/v1/responses",
        json={
            "model": "embedded",
            "conversation": conversation_id,
            "input": [OUTPUT, {"role": "user", "content": "[[delay 200]] [[words 20]]"}],
            "background": True,
        },
    )
    assert running.status_code == 200, running.text
    response_id: str = running.json()["id"]
    for _ in range(100):  # bounded: the turn is claimed at once, its answer takes 4 s
        if http.get(f"/v1/responses/{response_id}").json()["status"] == "in_progress":
            return response_id
        time.sleep(0.05)
    raise AssertionError("the answering turn never started")


def ended(http: httpx.Client, response_id: str) -> str:
    for _ in range(300):  # bounded
        status: str = http.get(f"/v1/responses/{response_id}").json()["status"]
        if status not in ("queued", "in_progress"):
            return status
        time.sleep(0.05)
    raise AssertionError(f"{response_id} never ended")


def test_a_second_output_is_refused_while_the_turn_answering_the_call_runs(
    http: httpx.Client,
) -> None:
    conversation_id = conversation_with_a_call(http)
    running = answering_turn(http, conversation_id)

    again = add(http, conversation_id, [{**OUTPUT, "output": "43"}])

    assert again.status_code == 400, again.text
    assert again.json()["error"]["code"] == "duplicate_tool_output"
    assert ended(http, running) == "completed"
    assert stored_types(http, conversation_id) == [
        "function_call",
        "function_call_output",
        "message",
        "message",
    ]


def test_a_call_cannot_be_deleted_while_a_turn_answering_it_runs(http: httpx.Client) -> None:
    conversation_id = conversation_with_a_call(http)
    call_id = http.get(f"/v1/conversations/{conversation_id}/items").json()["data"][0]["id"]
    running = answering_turn(http, conversation_id)

    refused = http.delete(f"/v1/conversations/{conversation_id}/items/{call_id}")

    assert refused.status_code == 409, refused.text
    assert refused.json()["error"]["code"] == "conversation_locked"
    assert refused.json()["error"]["param"] == "item_id"
    assert ended(http, running) == "completed"
    assert stored_types(http, conversation_id)[:2] == ["function_call", "function_call_output"]
    deleted = http.delete(f"/v1/conversations/{conversation_id}/items/{call_id}")
    assert deleted.status_code == 200, deleted.text  # once it has ended: the pair goes
    assert stored_types(http, conversation_id) == ["message", "message"]


def test_a_compaction_cannot_come_between_a_call_and_a_running_turn_s_output(
    http: httpx.Client,
) -> None:
    conversation_id = conversation_with_a_call(http)
    running = answering_turn(http, conversation_id)

    refused = add(http, conversation_id, [compaction_item("The user asked to look it up.")])

    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["param"] == "items"
    assert "comes between function call 'call_1' and its output" in refused.text
    assert ended(http, running) == "completed"
    assert "compaction" not in stored_types(http, conversation_id)
