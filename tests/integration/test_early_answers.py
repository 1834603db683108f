"""Answers given before the request body is read (405, 404, 413) over HTTP/1.1 keep-alive.

Hypercorn closes a connection whose request body was not read to its end. Before
server/_connection.py the answer did not say so: httpx put the connection back in its
pool and sent the next request on it, which failed with "Server disconnected without
sending a response" whenever the close had not arrived yet (tests/integration/
test_bad_input.py failed so under load). Now the server reads the rest of a small body
that is on its way and keeps the connection, or says `Connection: close` and closes it
cleanly. These tests send the body late (or never) over a raw socket, so that the answer
always comes first: without the fix each fails every time.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import serving
from tests.support.schemas import validate_error_envelope
from tests.support.server import ServerProcess
from tests.support.stores import Stores

LIMIT = 2048
TIMEOUT = 15.0


@pytest.fixture(scope="module")
def small_server(
    stores: Stores, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("early_answers")
    with serving(stores, folder, "--max-body-bytes", str(LIMIT)) as process:
        yield process


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


JSON = b"Host: x\r\nContent-Type: application/json\r\n"
CHUNKED = b"POST /v1/conversations HTTP/1.1\r\n" + JSON + b"Transfer-Encoding: chunked\r\n\r\n"
BIG = b'{"items": [{"role": "user", "content": "' + b"word " * 800 + b'"}]}'

# (request head, and the parts of its body sent one by one, late; the status)
LATE_BODIES = {
    "405": (
        b"PATCH /v1/conversations/conv_1 HTTP/1.1\r\n" + JSON + b"Content-Length: 20\r\n\r\n",
        [b'{"metadata": {}}    '],
        405,
    ),
    "404": (
        b"POST /v1/nowhere HTTP/1.1\r\n" + JSON + b"Content-Length: 2\r\n\r\n",
        [b"{}"],
        404,
    ),
    "413-content-length": (
        b"POST /v1/conversations HTTP/1.1\r\n" + JSON + b"Content-Length: %d\r\n\r\n" % len(BIG),
        [BIG],
        413,
    ),
    "413-chunked": (CHUNKED + chunk(BIG[:2500]), [chunk(BIG[2500:]), b"0\r\n\r\n"], 413),
}


def read_response(sock: socket.socket) -> tuple[int, list[tuple[str, str]], bytes]:
    """One response (with a Content-Length) from `sock`: status, headers, body."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        assert more, f"the server closed the connection without an answer: {data!r}"
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = [
        (name.strip().lower(), value.strip())
        for name, _, value in (line.partition(":") for line in lines)
    ]
    length = int(dict(headers)["content-length"])
    while len(body) < length:
        more = sock.recv(65536)
        assert more, "the server closed the connection in the middle of the answer"
        body += more
    assert len(body) == length, "more bytes than the answer's Content-Length"
    return int(status_line.split()[1]), headers, body


def check_envelope(status: int, headers: list[tuple[str, str]], body: bytes, expected: int) -> None:
    assert status == expected, body
    assert dict(headers)["content-type"].startswith("application/json")
    assert dict(headers).get("x-request-id")
    validate_error_envelope(json.loads(body))


def says_close(headers: list[tuple[str, str]]) -> bool:
    return any(name == "connection" and "close" in value.lower() for name, value in headers)


def assert_closed_cleanly(sock: socket.socket) -> None:
    """The server closes the connection with a FIN: no more bytes, and no reset."""
    assert sock.recv(65536) == b"", "nothing may follow the answer"


@pytest.mark.parametrize("case", ["405", "404", "413-content-length", "413-chunked"])
def test_an_answer_given_while_the_body_never_comes_says_connection_close(
    small_server: ServerProcess, case: str
) -> None:
    head, _, status = LATE_BODIES[case]
    with socket.create_connection(("127.0.0.1", small_server.port), timeout=TIMEOUT) as sock:
        sock.sendall(head)

        answer = read_response(sock)

        check_envelope(*answer, status)
        assert says_close(answer[1]), "the server closes this connection: it must say so"
        assert_closed_cleanly(sock)


@pytest.mark.parametrize("case", ["405", "404", "413-content-length", "413-chunked"])
def test_an_answer_given_before_a_late_body_keeps_the_connection_or_says_close(
    small_server: ServerProcess, case: str
) -> None:
    """The body arrives after the app has decided: the answer either waits for it and
    the connection serves the next request, or says `Connection: close` and closes it.
    Never an answer that keeps quiet about a close, which a client's pool then reuses."""
    head, parts, status = LATE_BODIES[case]
    with socket.create_connection(("127.0.0.1", small_server.port), timeout=TIMEOUT) as sock:
        sock.sendall(head)
        for part in parts:
            time.sleep(0.1)
            sock.sendall(part)

        answer = read_response(sock)

        check_envelope(*answer, status)
        if says_close(answer[1]):
            assert_closed_cleanly(sock)
            return
        time.sleep(0.2)  # the close, were one coming, would have arrived
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        next_status, _, next_body = read_response(sock)
        assert next_status == 200, next_body


def test_a_405_names_the_allowed_methods_in_one_header(server: ServerProcess) -> None:
    response = httpx.patch(f"{server.url}/v1/responses/resp_1", json={}, timeout=TIMEOUT)

    assert response.status_code == 405
    assert response.headers.get_list("allow") == ["DELETE, GET, HEAD"]
