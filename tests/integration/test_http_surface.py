"""The HTTP surface the openai SDK relies on (docs/protocol.md sections 1, 9 and 12).

Routes under `/v1` and at the root, an `x-request-id` on every response, the SDK's
empty-bodied POST and DELETE, bracketed query arrays, and the SDK's exception classes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import make_client
from tests.support.schemas import validate_error_envelope
from tests.support.server import ServerProcess

PREFIXES = [pytest.param("/v1", id="v1"), pytest.param("", id="no-prefix")]
JSON = {"content-type": "application/json"}
# A background turn that runs for about 10 s unless cancelled: 200 words, 50 ms apart.
SLOW = "slow [[words 200]] [[delay 50]]"


def request_id(response: httpx.Response) -> str:
    value = response.headers.get("x-request-id")
    assert value, f"no x-request-id on {response.request.method} {response.request.url}"
    return value


def ok(response: httpx.Response) -> Any:
    assert "Traceback" not in response.text
    assert response.status_code == 200, response.text
    request_id(response)
    return response.json()


def sse_events(response: httpx.Response) -> list[str]:
    return [
        line.removeprefix("event: ") for line in response.iter_lines() if line.startswith("event: ")
    ]


# -- both prefixes ----------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", PREFIXES)
def test_every_route_answers_with_and_without_the_v1_prefix(
    http: httpx.Client, prefix: str
) -> None:
    p = prefix
    conv = ok(http.post(f"{p}/conversations", json={"items": [{"role": "user", "content": "one"}]}))
    cid = conv["id"]
    assert ok(http.get(f"{p}/conversations/{cid}"))["id"] == cid
    assert ok(http.post(f"{p}/conversations/{cid}", json={"metadata": {"p": p or "root"}}))[
        "metadata"
    ] == {"p": p or "root"}
    added = ok(
        http.post(
            f"{p}/conversations/{cid}/items", json={"items": [{"role": "user", "content": "two"}]}
        )
    )
    item_id = added["data"][0]["id"]
    assert len(ok(http.get(f"{p}/conversations/{cid}/items"))["data"]) == 2
    assert ok(http.get(f"{p}/conversations/{cid}/items/{item_id}"))["id"] == item_id
    assert ok(http.delete(f"{p}/conversations/{cid}/items/{item_id}"))["object"] == "conversation"

    turn = ok(
        http.post(
            f"{p}/responses", json={"model": "embedded", "input": "three", "conversation": cid}
        )
    )
    assert turn["status"] == "completed"
    assert ok(http.get(f"{p}/responses/{turn['id']}"))["id"] == turn["id"]
    inputs = ok(http.get(f"{p}/responses/{turn['id']}/input_items"))
    assert [item["content"][0]["text"] for item in inputs["data"]] == ["three"]

    background = ok(
        http.post(f"{p}/responses", json={"model": "embedded", "input": SLOW, "background": True})
    )
    cancelled = ok(http.post(f"{p}/responses/{background['id']}/cancel"))
    assert cancelled["status"] == "cancelled"
    with http.stream(
        "GET", f"{p}/responses/{background['id']}", params={"stream": "true"}
    ) as stream:
        assert stream.status_code == 200
        request_id(stream)
        # docs/protocol.md 12: a cancelled stream ends with response.failed (status cancelled).
        assert sse_events(stream)[-1] == "response.failed"

    assert ok(http.delete(f"{p}/responses/{turn['id']}"))["deleted"] is True
    assert http.get(f"{p}/responses/{turn['id']}").status_code == 404
    assert ok(http.delete(f"{p}/conversations/{cid}"))["deleted"] is True
    assert http.get(f"{p}/conversations/{cid}").status_code == 404


@pytest.mark.parametrize("suffix", [pytest.param("/v1", id="v1"), pytest.param("", id="bare")])
def test_the_sdk_works_with_either_base_url(server: ServerProcess, suffix: str) -> None:
    with openai.OpenAI(base_url=server.url + suffix, api_key="k", max_retries=0, timeout=30) as sdk:
        conversation = sdk.conversations.create(items=[{"role": "user", "content": "hello"}])
        response = sdk.responses.create(
            model="embedded", input="hi there [[words 2]]", conversation=conversation.id
        )

        assert response.output_text == "hi there"
        assert sdk.responses.retrieve(response.id).id == response.id
        assert len(list(sdk.conversations.items.list(conversation.id))) == 3
        sdk.responses.delete(response.id)
        with pytest.raises(openai.NotFoundError):
            sdk.responses.retrieve(response.id)


# -- x-request-id -------------------------------------------------------------------------------


def test_every_kind_of_response_carries_a_distinct_request_id(http: httpx.Client) -> None:
    created = http.post("/v1/responses", json={"model": "embedded", "input": "hi"})
    seen = [
        request_id(created),
        request_id(http.get(f"/v1/responses/{created.json()['id']}")),
        request_id(http.get("/v1/responses/resp_missing")),  # 404
        request_id(http.post("/v1/responses", content=b"{", headers=JSON)),  # 400
        request_id(http.put("/v1/responses")),  # 405
        request_id(http.get("/v1/nowhere")),  # unknown path
        request_id(http.get("/healthz")),
        request_id(http.post("/v1/conversations", json={})),
        request_id(http.delete("/v1/conversations/conv_missing")),
    ]
    with http.stream(
        "POST", "/v1/responses", json={"model": "embedded", "input": "hi", "stream": True}
    ) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        seen.append(request_id(stream))
        assert sse_events(stream)[-1] == "response.completed"

    assert all(value.startswith("req_") for value in seen)
    assert len(set(seen)) == len(seen), "each response has its own request id"


def test_the_sdk_exposes_the_request_id_of_successes_and_errors(client: openai.OpenAI) -> None:
    response = client.responses.create(model="embedded", input="hi")
    assert response._request_id

    raw = client.responses.with_raw_response.retrieve(response.id)
    assert raw.headers["x-request-id"]
    assert raw.parse().id == response.id

    with client.responses.create(model="embedded", input="hi", stream=True) as stream:
        assert stream.response.headers["x-request-id"]
        events = [event.type for event in stream]
    assert events[-1] == "response.completed"

    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.retrieve("resp_missing")
    assert caught.value.request_id
    assert caught.value.request_id == caught.value.response.headers["x-request-id"]


def test_a_background_stream_and_its_replay_carry_request_ids(http: httpx.Client) -> None:
    body = {"model": "embedded", "input": "bg [[words 3]]", "background": True, "stream": True}
    with http.stream("POST", "/v1/responses", json=body) as live:
        first = request_id(live)
        lines = list(live.iter_lines())
    events = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert events[0] == "response.created"
    assert events[-1] == "response.completed"
    created = json.loads(next(line for line in lines if line.startswith("data: "))[6:])
    response_id = created["response"]["id"]

    with http.stream("GET", f"/v1/responses/{response_id}?stream=true&starting_after=0") as replay:
        second = request_id(replay)
        replayed = sse_events(replay)

    assert replayed == events[1:], "starting_after=0 replays everything after sequence 0"
    assert first != second


# -- what the SDK sends ---------------------------------------------------------------------------


def test_cancel_with_a_json_content_type_and_an_empty_body(http: httpx.Client) -> None:
    """The SDK sends cancel as `Content-Type: application/json` with `Content-Length: 0`."""
    background = ok(
        http.post("/v1/responses", json={"model": "embedded", "input": SLOW, "background": True})
    )

    cancelled = http.post(
        f"/v1/responses/{background['id']}/cancel",
        content=b"",
        headers={**JSON, "content-length": "0"},
    )

    body = ok(cancelled)
    assert body["id"] == background["id"]
    assert body["status"] == "cancelled"
    again = http.post(f"/v1/responses/{background['id']}/cancel", content=b"", headers=JSON)
    assert ok(again)["status"] == "cancelled", "cancel is idempotent"


def test_the_sdk_cancel_call_works(client: openai.OpenAI) -> None:
    background = client.responses.create(model="embedded", input=SLOW, background=True)

    cancelled = client.responses.cancel(background.id)

    assert cancelled.status == "cancelled"
    assert client.responses.retrieve(background.id).status == "cancelled"


def test_delete_with_a_json_content_type_and_no_body(http: httpx.Client) -> None:
    """The SDK sends DELETE with `Content-Type: application/json`, `Accept: */*` and no body."""
    headers = {**JSON, "accept": "*/*"}
    response_id = ok(http.post("/v1/responses", json={"model": "embedded", "input": "bye"}))["id"]
    conv = ok(http.post("/v1/conversations", json={"items": [{"role": "user", "content": "a"}]}))
    item_id = ok(http.get(f"/v1/conversations/{conv['id']}/items"))["data"][0]["id"]

    deleted_item = ok(
        http.delete(f"/v1/conversations/{conv['id']}/items/{item_id}", headers=headers)
    )
    deleted_conv = ok(http.delete(f"/v1/conversations/{conv['id']}", headers=headers))
    deleted_resp = ok(http.delete(f"/v1/responses/{response_id}", headers=headers))

    assert deleted_item["id"] == conv["id"]
    assert deleted_conv == {"id": conv["id"], "object": "conversation.deleted", "deleted": True}
    assert deleted_resp == {"id": response_id, "object": "response.deleted", "deleted": True}


def test_get_with_a_json_content_type_and_no_body(http: httpx.Client) -> None:
    response_id = ok(http.post("/v1/responses", json={"model": "embedded", "input": "x"}))["id"]

    assert ok(http.get(f"/v1/responses/{response_id}", headers=JSON))["id"] == response_id


@pytest.mark.parametrize("text", ["three words here", "[[fail]]"], ids=["completed", "failed"])
def test_a_foreground_reply_is_the_stored_response_to_the_byte(
    http: httpx.Client, text: str
) -> None:
    """The reply to a foreground create is the response as committed at its end (sent as
    stored, not encoded again): a GET of it returns the same bytes."""
    created = http.post("/v1/responses", json={"model": "embedded", "input": text})

    body = ok(created)
    assert body["status"] == ("failed" if "fail" in text else "completed")
    assert http.get(f"/v1/responses/{body['id']}").content == created.content


@pytest.fixture
def finished(http: httpx.Client) -> Iterator[tuple[str, str, str]]:
    """A completed foreground response, and a conversation with one item."""
    response_id = ok(http.post("/v1/responses", json={"model": "embedded", "input": "q"}))["id"]
    conv_id = ok(
        http.post("/v1/conversations", json={"items": [{"role": "user", "content": "c"}]})
    )["id"]
    item_id = ok(http.get(f"/v1/conversations/{conv_id}/items"))["data"][0]["id"]
    yield response_id, conv_id, item_id


INCLUDES = [
    pytest.param(
        "include[]=reasoning.encrypted_content&include[]=message.output_text.logprobs",
        id="brackets",
    ),
    pytest.param(
        "include=reasoning.encrypted_content&include=message.output_text.logprobs", id="plain"
    ),
    pytest.param("include%5B%5D=reasoning.encrypted_content", id="escaped-brackets"),
]


@pytest.mark.parametrize("query", INCLUDES)
def test_include_query_arrays_are_accepted_on_every_route_that_takes_them(
    http: httpx.Client, finished: tuple[str, str, str], query: str
) -> None:
    response_id, conv_id, item_id = finished

    assert ok(http.get(f"/v1/responses/{response_id}?{query}"))["id"] == response_id
    assert ok(http.get(f"/v1/responses/{response_id}/input_items?{query}"))["object"] == "list"
    assert ok(http.get(f"/v1/conversations/{conv_id}/items?{query}"))["object"] == "list"
    assert ok(http.get(f"/v1/conversations/{conv_id}/items/{item_id}?{query}"))["id"] == item_id
    added = ok(
        http.post(
            f"/v1/conversations/{conv_id}/items?{query}",
            json={"items": [{"role": "user", "content": "more"}]},
        )
    )
    assert len(added["data"]) == 1


def test_the_sdk_sends_include_lists_that_the_server_accepts(
    client: openai.OpenAI, finished: tuple[str, str, str]
) -> None:
    response_id, conv_id, item_id = finished
    include: Any = ["message.output_text.logprobs", "reasoning.encrypted_content"]

    assert client.responses.retrieve(response_id, include=include).id == response_id
    assert list(client.responses.input_items.list(response_id, include=include))
    assert list(client.conversations.items.list(conv_id, include=include))
    assert (
        client.conversations.items.retrieve(item_id, conversation_id=conv_id, include=include).id
        == item_id
    )


def test_stream_is_chosen_by_the_body_not_the_accept_header(http: httpx.Client) -> None:
    """The SDK sends `Accept: application/json` even when it asks for a stream."""
    body = {"model": "embedded", "input": "hi", "stream": True}
    with http.stream(
        "POST", "/v1/responses", json=body, headers={"accept": "application/json"}
    ) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        assert sse_events(stream)[-1] == "response.completed"

    plain = http.post(
        "/v1/responses", json={**body, "stream": False}, headers={"accept": "text/event-stream"}
    )
    assert ok(plain)["status"] == "completed"


# -- SDK exception classes -----------------------------------------------------------------------


def test_bad_request_error_carries_param_code_and_request_id(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="embedded", input="hi", temperature=3)

    error = caught.value
    assert error.status_code == 400
    assert error.param == "temperature"
    assert error.code == "invalid_value"
    assert error.type == "invalid_request_error"
    assert error.request_id and error.request_id.startswith("req_")
    assert str(error).startswith("Error code: 400 - ")
    assert isinstance(error.body, dict)
    validate_error_envelope({"error": error.body})


def test_unknown_parameter_through_extra_body(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="embedded", input="hi", extra_body={"frobnicate": True})

    assert caught.value.code == "unknown_parameter"
    assert caught.value.param == "frobnicate"
    assert "'frobnicate'" in caught.value.message


def test_background_without_store_through_the_sdk(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="embedded", input="hi", background=True, store=False)

    assert caught.value.param == "store"
    assert "Background mode requires store=true." in caught.value.message


def test_not_found_errors_for_responses_and_conversations(client: openai.OpenAI) -> None:
    calls = [
        lambda: client.responses.retrieve("resp_nope"),
        lambda: client.responses.delete("resp_nope"),
        lambda: client.responses.cancel("resp_nope"),
        lambda: client.responses.input_items.list("resp_nope"),
        lambda: client.conversations.retrieve("conv_nope"),
        lambda: client.conversations.items.retrieve("msg_nope", conversation_id="conv_nope"),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError) as caught:
            call()
        assert caught.value.status_code == 404
        assert "_nope" in caught.value.message
        assert caught.value.request_id


def test_previous_response_not_found_is_a_bad_request(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="embedded", input="hi", previous_response_id="resp_gone")

    assert caught.value.param == "previous_response_id"
    assert caught.value.code == "previous_response_not_found"


def test_a_payload_too_large_error_reaches_the_sdk(start_server: Any) -> None:
    small = start_server("--max-body-bytes", "1024")
    with make_client(small.url) as sdk, pytest.raises(openai.APIStatusError) as caught:
        sdk.responses.create(model="embedded", input="word " * 500)

    assert caught.value.status_code == 413
    assert caught.value.request_id
    assert "1024" in caught.value.message


def test_no_error_body_ever_shows_a_traceback(http: httpx.Client) -> None:
    """A grab bag of hostile requests: each is answered in the envelope, never with a trace."""
    requests: list[tuple[str, str, bytes | None, dict[str, str]]] = [
        ("POST", "/v1/responses", b"\x00\x01\x02", JSON),
        (
            "POST",
            "/v1/responses",
            b'{"model": "embedded", "input": "hi"}',
            {"content-type": "text/plain"},
        ),
        (
            "POST",
            "/v1/responses",
            b'{"model": "embedded", "input": "hi"}',
            {"content-encoding": "gzip", **JSON},
        ),
        ("POST", "/v1/responses", b"[" * 50_000, JSON),
        ("POST", "/v1/responses", b'{"model": "embedded", "input": "\\udfff"}', JSON),
        ("GET", "/v1/responses/%00", None, {}),
        ("GET", "/v1/conversations/conv_%00/items/msg_%00", None, {}),
        ("GET", "/v1/responses/" + "x" * 5000, None, {}),
        ("GET", "/v1/conversations/conv_x/items?limit=" + "9" * 400, None, {}),
        ("DELETE", "/v1/conversations/%ff", None, {}),
        ("OPTIONS", "/v1/responses", None, {}),
    ]
    for method, path, content, headers in requests:
        response = http.request(method, path, content=content, headers=headers)

        assert "Traceback" not in response.text, (method, path)
        assert 'File "' not in response.text, (method, path)
        request_id(response)
        if response.status_code >= 400:
            validate_error_envelope(response.json())
            assert response.status_code < 500, (method, path, response.text)


def test_an_id_with_a_nul_character_names_nothing_on_either_store(http: httpx.Client) -> None:
    """No id of ours holds a NUL character, and PostgreSQL's text cannot: in a path it
    matches nothing (404), in a body it is refused by name (400), and nothing is stored."""
    conversation = ok(http.post("/v1/conversations", json={}))["id"]
    for path in (
        "/v1/responses/resp_%00",
        "/v1/responses/resp_%00/input_items",
        f"/v1/conversations/{conversation}%00",
        f"/v1/conversations/{conversation}/items/msg_%00",
    ):
        response = http.get(path)
        assert response.status_code == 404, (path, response.text)
        validate_error_envelope(response.json())
    bodies: list[tuple[str, dict[str, Any], str]] = [
        ("/v1/responses", {"previous_response_id": "resp_\x00"}, "previous_response_id"),
        ("/v1/responses", {"conversation": f"{conversation}\x00"}, "conversation"),
        ("/v1/responses", {"conversation": {"id": "conv_\x00"}}, "conversation.id"),
        (
            "/v1/responses",
            {"input": [{"role": "user", "content": "hi", "id": "msg_\x00"}]},
            "input[0].id",
        ),
    ]
    for path, fields, param in bodies:
        body = {"model": "embedded", "input": "hi", **fields}
        response = http.post(path, json=body)
        assert response.status_code == 400, (fields, response.text)
        validate_error_envelope(response.json())
        error = response.json()["error"]
        assert "NUL" in error["message"] and error["param"] == param, error
    added = http.post(
        f"/v1/conversations/{conversation}/items",
        json={"items": [{"type": "message", "role": "user", "content": "hi", "id": "m\x00"}]},
    )
    assert added.status_code == 400, added.text
    assert ok(http.get(f"/v1/conversations/{conversation}/items"))["data"] == []
