"""The test harness's server process (tests/support/server.py) under a port race: test runs
side by side draw free ports from one machine, and a port can be taken between the draw
and the bind. The harness must neither take another process's server for its own nor fail
the test for it."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import server as support
from tests.support.server import ServerProcess


class _Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def squatter() -> Iterator[int]:
    """Another process's server answering /healthz on a port of its own."""
    taken = http.server.HTTPServer(("127.0.0.1", 0), _Healthy)
    threading.Thread(target=taken.serve_forever, daemon=True).start()
    yield taken.server_address[1]
    taken.shutdown()
    taken.server_close()


def test_a_port_taken_after_it_was_drawn_is_drawn_again(
    squatter: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn = iter([squatter])
    real = support.free_port
    monkeypatch.setattr(support, "free_port", lambda: next(drawn, None) or real())
    server = ServerProcess(tmp_path / "store.db")

    try:
        server.start()
        port = server.port
        answer = httpx.get(f"{server.url}/v1/models", timeout=10)
    finally:
        server.kill()

    assert port != squatter
    assert answer.status_code == 200 and answer.json()["object"] == "list"
    assert f"cannot listen on 127.0.0.1:{squatter}" in server.log()
