"""Issue 15, bad conditions on PostgreSQL: the database goes away while the server runs,
and comes back; or it is not there at start-up.

The server reaches a real PostgreSQL through a loopback TCP proxy that the test cuts
(every connection reset, new ones refused) and restores: a network partition, without
touching either server.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.postgres import ThrowawayPostgres
from tests.support.server import REPO, ServerProcess, free_port
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_terminal, wait_until


class ProxyThread:
    """A TcpProxy on an event loop of its own thread, driven from synchronous tests."""

    def __init__(self, port: int) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.proxy = TcpProxy("127.0.0.1", port)
        self._call(self.proxy.start())

    def _call(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    def cut(self) -> None:
        self._loop.call_soon_threadsafe(self.proxy.cut)

    def restore(self) -> None:
        self._loop.call_soon_threadsafe(self.proxy.restore)

    def close(self) -> None:
        self._call(self.proxy.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


@pytest.fixture
def proxied(
    postgres: ThrowawayPostgres, tmp_path: Path
) -> Iterator[tuple[ServerProcess, ProxyThread]]:
    name = f"outage{free_port()}"
    postgres.create_database(name)
    proxy = ProxyThread(postgres.port)
    url = f"postgresql://{postgres.user}@127.0.0.1:{proxy.proxy.port}/{name}"
    server = ServerProcess(
        url,  # type: ignore[arg-type]
        args=("--embedded-delay-ms", "100", "--lease-ttl", "5", "--no-access-log"),
        log=tmp_path / "server.log",
    )
    server.start()
    yield server, proxy
    server.kill()
    proxy.close()


def test_a_lost_database_gives_503s_pauses_turns_and_loses_nothing_acknowledged(
    proxied: tuple[ServerProcess, ProxyThread],
) -> None:
    server, proxy = proxied
    with httpx.Client(base_url=server.url, timeout=30) as http:
        body = {"model": "m", "input": "keep going", "background": True}
        running = [http.post("/v1/responses", json=body).json()["id"] for _ in range(3)]
        wait_until(
            lambda: http.get(f"/v1/responses/{running[0]}").json()["status"] == "in_progress",
            "a turn running when the database goes away",
        )

        proxy.cut()
        refused = http.post("/v1/responses", json=body)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["message"]
        wait_until(lambda: http.get("/readyz").status_code == 503, "readiness to say 503", 15)
        assert http.get("/healthz").status_code == 200  # alive: no restart needed

        time.sleep(1.0)  # the turns meet the outage: their writes fail and they pause
        proxy.restore()
        wait_until(lambda: http.get("/readyz").status_code == 200, "readiness to recover", 30)
        for response_id in running:
            final = wait_terminal(http, response_id, deadline=60)
            assert final["status"] == "completed", final
            assert final["output"][0]["content"][0]["text"].startswith("keep going")
        after = http.post("/v1/responses", json={**body, "background": False})
        assert after.status_code == 200 and after.json()["status"] == "completed"
    # The outage met the running turns (not only the refused request).
    assert "could not save" in server.log() or "recovering response" in server.log()


def test_an_unreachable_database_at_start_up_is_a_one_line_error(tmp_path: Path) -> None:
    url = f"postgresql://durable@127.0.0.1:{free_port()}/nothing"  # nobody listens there
    done = subprocess.run(
        [sys.executable, "-m", "server", "--port", str(free_port()), "--db", url],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("durable-responses: cannot reach the PostgreSQL store at"), last
    assert "Traceback" not in done.stderr
