"""Issue 14, through HTTP: `POST /v1/conversations/{id}/items` checks tool pairing (G5)
against the conversation's stored items in the transaction that appends them, so an
output sent twice, one after the other or at the same time, is stored once and the other
request gets 400 `duplicate_tool_output` (tests/recovery/test_issue14_conversation_appends.py
has the race in process)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

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
