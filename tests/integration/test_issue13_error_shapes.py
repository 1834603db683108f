"""Issue 13, errors every client can parse.

- A failed response's `error` (in the Response and in `response.failed`) carried only
  `code` and `message`; the Vercel AI SDK requires `type`. It now carries `type` and
  `param` too, as the HTTP error envelope does, and still validates against both schemas.
- A WebSocket upgrade on /v1/responses (WebSocket mode is not served) got a bare 403. It
  now gets an HTTP 501 in the OpenAI error envelope saying so; where a server cannot
  answer an upgrade with a response, the socket is accepted and closed with a reason.
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import httpx
import pytest
from starlette.types import Message
from starlette.websockets import WebSocket

from server._responses_routes import refuse_websocket
from tests.integration._responses_support import MODEL, post_stream
from tests.support.schemas import validate_error_envelope, validate_response
from tests.support.server import ServerProcess

FAIL = "break please [[fail]]"
SERVER_ERROR = {"code": "server_error", "type": "server_error", "param": None}


def _error_of(response: dict[str, Any]) -> dict[str, Any]:
    error: dict[str, Any] = response["error"]
    assert isinstance(error["message"], str) and error["message"]
    return {key: value for key, value in error.items() if key != "message"}


def test_a_failed_response_s_error_has_a_type_and_a_param(http: httpx.Client) -> None:
    answer = http.post("/v1/responses", json={"model": MODEL, "input": FAIL})

    response = answer.json()
    validate_response(response)
    assert response["status"] == "failed"
    assert _error_of(response) == SERVER_ERROR
    polled = http.get(f"/v1/responses/{response['id']}").json()
    assert polled["error"] == response["error"]


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
def test_response_failed_carries_the_typed_error(http: httpx.Client, background: bool) -> None:
    events = post_stream(http, input=FAIL, background=background)  # schema-checked

    assert events[-1]["type"] == "response.failed"
    assert _error_of(events[-1]["response"]) == SERVER_ERROR


# -- WebSocket upgrades --------------------------------------------------------------------


def _upgrade(server: ServerProcess, path: str) -> tuple[int, dict[str, str], bytes]:
    """Send a WebSocket upgrade request; (status, headers, body) of the HTTP answer."""
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\nAuthorization: Bearer test-key\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request.encode())
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(4096)
            assert chunk, received
            received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        while len(body) < int(headers.get("content-length", "0")):
            chunk = sock.recv(4096)
            assert chunk, body
            body += chunk
    return int(lines[0].split()[1]), headers, body


@pytest.mark.parametrize("path", ["/v1/responses", "/responses"])
def test_a_websocket_upgrade_is_refused_with_a_readable_reason(
    server: ServerProcess, path: str
) -> None:
    status, headers, body = _upgrade(server, path)

    assert status == 501
    assert headers["content-type"] == "application/json"
    envelope = json.loads(body)
    validate_error_envelope(envelope)
    error = envelope["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "server_error",
        "websocket_not_supported",
        None,
    )
    assert "WebSocket mode" in error["message"] and "POST /v1/responses" in error["message"]


def test_without_the_denial_extension_the_socket_is_closed_with_a_reason() -> None:
    """(An ASGI server without `websocket.http.response`, e.g. behind another server.)"""
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "websocket", "path": "/v1/responses", "headers": [], "extensions": {}}
    asyncio.run(refuse_websocket(WebSocket(scope, receive, send)))

    accept, event, close = sent
    assert accept["type"] == "websocket.accept"
    error_event = json.loads(event["text"])
    assert error_event["type"] == "error" and error_event["status"] == 501
    assert error_event["error"]["code"] == "websocket_not_supported"
    assert close["type"] == "websocket.close"
    assert close["code"] == 1008  # policy: not one of the codes the SDK reconnects after
    assert "not supported" in close["reason"]
