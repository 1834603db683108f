"""Issue 12: requests Hypercorn refuses before the app sees them.

A request whose HTTP/1.1 framing is broken (an unparsable request line or header, a
non-ASCII target, a bad Content-Length, no Host), whose headers are larger than
Hypercorn's limit (16 KiB), or whose Transfer-Encoding is unknown never reaches the ASGI
app, so it cannot be answered in the OpenAI envelope: Hypercorn answers 400, 431 or 501
with an empty body and closes the connection (the README says so). What must hold is
that such a request gets that answer at once, hangs nothing, and leaves the server
serving.
"""

from __future__ import annotations

import socket

import httpx
import pytest

from tests.support.server import ServerProcess
from tests.support.waiting import wait_until


def exchange(server: ServerProcess, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):  # the server closes the connection
            answer += chunk
        return answer


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        pytest.param(b"GARBAGE\r\n\r\n", 400, id="request-line"),
        pytest.param(b"GET /v1/responses/\xff HTTP/1.1\r\nHost: x\r\n\r\n", 400, id="non-ascii"),
        pytest.param(b"GET /healthz HTTP/1.1\r\n\r\n", 400, id="no-host"),
        pytest.param(
            b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
            400,
            id="content-length",
        ),
        pytest.param(
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n",
            431,
            id="headers-too-large",
        ),
        pytest.param(
            b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
            501,
            id="transfer-encoding",
        ),
    ],
)
def test_a_request_hypercorn_refuses_is_answered_and_closed(
    server: ServerProcess, request_bytes: bytes, status: int
) -> None:
    answer = exchange(server, request_bytes)

    assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer[:200]
    assert b"connection: close" in answer.lower()
    assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200


def test_a_client_that_leaves_before_its_body_is_sent_is_no_server_error(
    server: ServerProcess,
) -> None:
    """The body of a create, cut by the client going away: the server counts it as the
    client's (499), not as an unhandled error of its own (a 500 in its access log and
    metrics, and a traceback in its log)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n"
            b'{"model": "m", "input": "cut'
        )
    wait_until(lambda: "disconnected before its request body" in server.log(), "the 499")

    log = server.log()
    assert "Traceback" not in log and "unhandled error" not in log, log[-2000:]
    assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
