"""Issue 15, bad conditions on PostgreSQL: the database goes away while the server runs,
and comes back; or it is not there at start-up, and the server waits for it (503s,
retries with backoff), unless it answers and refuses (exit 2).

The server reaches a real PostgreSQL through a loopback TCP proxy that the test cuts
(every connection reset, new ones refused) and restores: a network partition, without
touching either server.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

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


# -- the database is unreachable at start-up ----------------------------------------------

WAITING = "; retrying in 0.5 s; /readyz answers 503 until then"


def unreachable_url(port: int, database: str = "nothing") -> str:
    return f"postgresql://durable:s3cret@127.0.0.1:{port}/{database}"


def warnings(server: ServerProcess) -> list[str]:
    """The warnings the server logged for its failed attempts to reach the store."""
    return [
        line
        for line in server.log().splitlines()
        if "WARNING" in line and "cannot reach the PostgreSQL store at" in line
    ]


def count_responses(url: str) -> int:
    async def count() -> int:
        conn = await asyncpg.connect(url, timeout=10)
        try:
            return int(await conn.fetchval("SELECT count(*) FROM responses"))
        finally:
            await conn.close()

    return asyncio.run(count())


def test_an_unreachable_database_at_start_up_is_waited_for_with_503s_and_then_served(
    postgres: ThrowawayPostgres, tmp_path: Path
) -> None:
    name = f"late{free_port()}"
    postgres.create_database(name)
    proxy = ProxyThread(postgres.port)
    proxy.cut()  # the database server cannot be reached: every connection is dropped
    server = ServerProcess(
        unreachable_url(proxy.proxy.port, name),  # type: ignore[arg-type]
        args=("--no-access-log",),
        log=tmp_path / "server.log",
    )
    try:
        server.start()  # it serves: /healthz answers 200 (what `start` waits for)
        wait_until(lambda: len(warnings(server)) >= 3, lambda: f"retries:\n{server.log()}", 15)
        assert server.proc is not None and server.proc.poll() is None
        first = warnings(server)[0]
        shown = f"postgresql://durable:***@127.0.0.1:{proxy.proxy.port}/{name}: "
        assert f"cannot reach the PostgreSQL store at {shown}" in first, first
        assert first.endswith(WAITING), first
        assert "retrying in 1 s" in warnings(server)[1]  # backoff

        with httpx.Client(base_url=server.url, timeout=10) as http:
            assert http.get("/healthz").status_code == 200  # alive: a restart would not help
            ready = http.get("/readyz")
            assert ready.status_code == 503
            assert ready.json()["status"] == "store_unavailable"
            assert f"127.0.0.1:{proxy.proxy.port}" in ready.json()["reason"]
            assert "s3cret" not in ready.text

            refused = http.post("/v1/responses", json={"model": "m", "input": "too early"})
            assert refused.status_code == 503, refused.text
            error = refused.json()["error"]
            assert error["type"] == "server_error" and error["message"], error
            assert set(error) == {"message", "type", "param", "code"}
            assert int(refused.headers["retry-after"]) >= 1
            assert refused.headers["x-should-retry"] == "true"
            polled = http.get("/v1/responses/resp_not_yet")  # the poll's shortcut too
            assert polled.status_code == 503 and polled.json()["error"] == error, polled.text

            with pytest.raises(InvalidStatus) as upgrade:  # WebSocket mode: refused alike
                ws_connect(f"ws://127.0.0.1:{server.port}/v1/responses", open_timeout=10)
            assert upgrade.value.response.status_code == 503
            assert json.loads(upgrade.value.response.body or b"")["error"]["type"] == (
                "server_error"
            )

            proxy.restore()  # the database is reachable now
            wait_until(
                lambda: http.get("/readyz").status_code == 200,
                lambda: f"readiness once the store is reachable:\n{server.log()}",
                30,
            )
            assert count_responses(postgres.database_url(name)) == 0  # the 503 stored nothing
            created = http.post("/v1/responses", json={"model": "m", "input": "now then"})
            assert created.status_code == 200, created.text
            assert created.json()["status"] == "completed"
            assert created.json()["output"][0]["content"][0]["text"].startswith("now then")

        assert server.stop(signal.SIGTERM) == 0
        assert "Traceback" not in server.log()
        assert "s3cret" not in server.log()
    finally:
        server.kill()
        proxy.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_waiting_for_the_database_stops_the_process_at_once(
    tmp_path: Path, sig: signal.Signals
) -> None:
    server = ServerProcess(
        unreachable_url(free_port()),  # type: ignore[arg-type]  # nobody listens there
        log=tmp_path / "server.log",
    )
    try:
        server.start()
        wait_until(lambda: len(warnings(server)) >= 2, lambda: f"retries:\n{server.log()}", 15)
        started = time.monotonic()
        assert server.stop(sig, timeout=10) == 0
        assert time.monotonic() - started < 5, server.log()
        assert "durable-responses stopped" in server.log()
        assert "Traceback" not in server.log()
    finally:
        server.kill()


def run_server(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server", "--port", str(free_port()), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("user", "database", "said"),
    [
        ("durable", "no_such_database", 'database "no_such_database" does not exist'),
        ("no_such_role", "postgres", 'role "no_such_role" does not exist'),
    ],
    ids=["missing database", "unknown role"],
)
def test_a_database_that_answers_but_refuses_is_a_one_line_error_at_start_up(
    postgres: ThrowawayPostgres, user: str, database: str, said: str
) -> None:
    url = f"postgresql://{user}:s3cret@127.0.0.1:{postgres.port}/{database}"

    done = run_server("--db", url)

    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("durable-responses: cannot open the PostgreSQL store at"), last
    assert said in last
    assert "retrying" not in done.stderr and "Traceback" not in done.stderr
    assert "s3cret" not in done.stderr


def test_a_refusal_met_once_the_database_answers_stops_the_waiting_server_with_2(
    postgres: ThrowawayPostgres, tmp_path: Path
) -> None:
    proxy = ProxyThread(postgres.port)
    proxy.cut()
    server = ServerProcess(
        unreachable_url(proxy.proxy.port, "never_created"),  # type: ignore[arg-type]
        log=tmp_path / "server.log",
    )
    try:
        server.start()
        wait_until(lambda: warnings(server), lambda: f"a retry:\n{server.log()}", 15)

        proxy.restore()  # it answers now, and says the database does not exist

        assert server.proc is not None
        assert server.proc.wait(30) == 2, server.log()
        assert 'database "never_created" does not exist' in server.log()
        assert "this does not pass by itself: the server stops" in server.log()
        assert "Traceback" not in server.log()
    finally:
        server.kill()
        proxy.close()


def test_workers_wait_for_an_unreachable_database_too(tmp_path: Path) -> None:
    server = ServerProcess(
        unreachable_url(free_port()),  # type: ignore[arg-type]  # nobody listens there
        args=("--workers", "2"),
        log=tmp_path / "server.log",
    )
    try:
        server.start()  # the parent did not exit 2: a worker answers /healthz
        wait_until(lambda: len(warnings(server)) >= 4, lambda: f"retries:\n{server.log()}", 15)
        ready = httpx.get(f"{server.url}/readyz", timeout=10)
        assert ready.status_code == 503 and ready.json()["status"] == "store_unavailable"
        assert server.stop(signal.SIGTERM) == 0
        assert server.log().count("durable-responses stopped") == 2
        assert "Traceback" not in server.log()
    finally:
        server.kill()
