"""Issue 12, item 1: one failed write during recovery left the process half-alive.

The bug: with the store's disk full, `store.recover` (or `store.claim`) raised a
StoreError that nothing caught. It escaped the runtime's task group, the lifespan closed
the store, and Hypercorn kept serving: every create answered 503 "shutting down", /readyz
and GETs 500 ("Cannot operate on a closed database"), /healthz 200, for good (freeing the
disk did not help), and the exception was never logged.

The fix: a store error in a background chore (scan, claim, recover, heartbeat, lease
renewal, purge) is logged and retried with backoff; the runtime never dies of it.
/readyz answers 503 while the store cannot be written and 200 again once the disk frees
up; nothing acknowledged is lost. A runtime that does stop for good (an exception nothing
handles) logs it and the process exits non-zero, for its supervisor to restart it.

The disk is a real one: a small tmpfs, filled by a ballast file (tests/support/disk.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import StartServer
from tests.crash._support import wait_for_exit
from tests.support.disk import small_disk
from tests.support.waiting import wait_terminal, wait_until

LEASE_TTL = 1.0
SERVER = (
    "--lease-ttl",
    str(LEASE_TTL),
    "--scan-interval",
    "0.2",
    "--max-recoveries",
    "20",
    "--embedded-words",
    "60",
    "--embedded-delay-ms",
    "20",
)


def create(url: str, text: str) -> httpx.Response:
    body = {"model": "m", "input": text, "background": True}
    return httpx.post(f"{url}/v1/responses", json=body, timeout=30)


def get(url: str, path: str) -> httpx.Response:
    return httpx.get(f"{url}{path}", timeout=10)


def check_refused(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["type"] == "server_error"
    assert "cannot write to its store" in error["message"]


@pytest.mark.sqlite_only("the store's own disk fills up: a tmpfs under the SQLite file")
def test_a_full_disk_is_waited_out_and_readiness_follows_it(
    start_server: StartServer, tmp_path: Path
) -> None:
    with small_disk(tmp_path / "disk", "16m") as disk:
        server = start_server(*SERVER, db=disk.path / "responses.db")
        try:
            disk.fill(leave=768 * 1024)
            acknowledged: list[str] = []
            for _ in range(500):  # background responses until the disk is full
                answer = create(server.url, "hello " * 200)
                if answer.status_code != 200:
                    assert answer.status_code == 503, answer.text
                    break
                acknowledged.append(answer.json()["id"])
            else:
                raise AssertionError("the disk never filled up")
            assert acknowledged
            disk.fill()  # whatever is left
            time.sleep(LEASE_TTL * 3)  # leases expire: the scan recovers, and cannot write

            def refused_and_unready() -> bool:
                # SQLite may still fit a small write in pages its files already hold
                # (the probe's, or a create's): writing on uses them up.
                answer = create(server.url, "hello " * 200)
                if answer.status_code == 200:
                    acknowledged.append(answer.json()["id"])
                    return False
                check_refused(answer)
                return get(server.url, "/readyz").status_code == 503

            wait_until(refused_and_unready, "writes refused and readiness failing", deadline=30)
            assert server.proc is not None and server.proc.poll() is None
            assert get(server.url, "/healthz").status_code == 200
            ready = get(server.url, "/readyz")
            assert ready.status_code == 503, ready.text
            assert ready.json()["status"] == "store_unavailable"
            assert "full" in ready.json()["reason"]
            check_refused(create(server.url, "refused"))
            assert get(server.url, f"/v1/responses/{acknowledged[0]}").status_code == 200

            disk.free()
            wait_until(
                lambda: get(server.url, "/readyz").status_code == 200, "readiness", deadline=20
            )
            for response_id in acknowledged:  # nothing acknowledged is lost
                final = wait_terminal(server.url, response_id, deadline=60)
                assert final["status"] == "completed", final
            after = create(server.url, "after the disk freed up")
            assert after.status_code == 200, after.text
            assert wait_terminal(server.url, after.json()["id"])["status"] == "completed"

            log = server.log()
            assert "recovery scan failed (" in log
            assert "database or disk is full" in log
            assert "the runtime stopped" not in log
            assert server.stop() == 0
        finally:
            server.kill()


def test_a_runtime_that_stops_for_good_exits_the_process_non_zero(
    start_server: StartServer,
) -> None:
    server = start_server("--agent", "tests.agents.fatal_agent:agent", "--shutdown-grace", "1")
    answer = create(server.url, "[[call escape {}]]")
    assert answer.status_code == 200, answer.text

    code = wait_for_exit(server, deadline=30)

    assert code not in (0, None), code
    log = server.log()
    assert "the runtime stopped for good: Escaped: a failure the runtime does not handle" in log
    assert "Traceback" in log  # logged with where it came from
