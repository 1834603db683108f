"""`--workers N`: N processes on one port and one store, started, restarted and stopped by
one parent (server/_workers.py)."""

from __future__ import annotations

import functools
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import StartServer, make_client
from tests.support.server import REPO, ServerProcess, free_port
from tests.support.waiting import wait_terminal, wait_until

SLOW_ANSWER = "[[words 30]] [[delay 100]] tell me a long story"


def worker_pids(server: ServerProcess) -> list[int]:
    """The workers started so far, in order, from the parent's log."""
    return [int(pid) for pid in re.findall(r"worker \d+ started \(pid (\d+)\)", server.log())]


def listening(server: ServerProcess) -> int:
    return server.log().count(f"listening on http://127.0.0.1:{server.port} (")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead but not yet reaped
        return stat.read().split(") ")[-1][0] != "Z"


def start_workers(start_server: StartServer, *args: str, n: int = 2) -> ServerProcess:
    server = start_server("--workers", str(n), *args)
    wait_until(lambda: listening(server) == n, lambda: f"{n} workers listening:\n{server.log()}")
    return server


def two_free_ports() -> int:
    """A port P such that P and P+1 are both free now."""
    for _ in range(20):
        first = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", first + 1))
            except OSError:
                continue
            return first
    raise AssertionError("no two adjacent free ports")


def test_workers_share_the_port_and_sigterm_stops_every_one(start_server: StartServer) -> None:
    server = start_workers(start_server)
    pids = worker_pids(server)
    assert len(pids) == 2 and all(alive(pid) for pid in pids)

    os.kill(pids[0], signal.SIGSTOP)  # every request must then reach the other worker
    try:
        with make_client(server.url) as sdk:
            answers = [sdk.responses.create(model="m", input=f"hello {i}") for i in range(5)]
    finally:
        os.kill(pids[0], signal.SIGCONT)

    assert [a.status for a in answers] == ["completed"] * 5
    assert server.stop(signal.SIGTERM) == 0
    assert not any(alive(pid) for pid in pids)
    assert server.log().count("durable-responses stopped") == 2
    assert "Traceback" not in server.log()


def test_a_killed_worker_is_restarted_and_its_response_recovered(
    start_server: StartServer,
) -> None:
    server = start_workers(start_server, "--lease-ttl", "1", "--scan-interval", "0.2")
    with make_client(server.url) as sdk:
        started = sdk.responses.create(model="m", input=SLOW_ANSWER, background=True)
        wait_until(
            lambda: sdk.responses.retrieve(started.id).status == "in_progress",
            "the response to run",
        )
        first = worker_pids(server)
        for pid in first:  # whichever worker runs it dies mid-answer
            os.kill(pid, signal.SIGKILL)

        wait_until(lambda: len(worker_pids(server)) == 4, lambda: f"restarts:\n{server.log()}")
        done = wait_terminal(sdk, started.id)

    assert done.status == "completed"
    assert done.output_text.split() == ["tell", "me", "a", "long", "story"] * 6
    assert "exited with -9; restarting it" in server.log()
    assert set(worker_pids(server)[2:]).isdisjoint(first)
    assert server.stop(signal.SIGTERM) == 0


def test_a_sigterm_just_after_a_worker_died_restarts_nothing(
    start_server: StartServer,
) -> None:
    server = start_workers(start_server)
    first = worker_pids(server)

    os.kill(first[0], signal.SIGKILL)
    time.sleep(0.5)  # most often inside the parent's pause before a restart
    code = server.stop(signal.SIGTERM)

    assert code in (0, 1)  # 1 when the parent saw the death only while stopping
    assert worker_pids(server) == first
    assert not alive(first[1])


def test_a_restarted_worker_that_cannot_start_is_retried_while_the_others_serve(
    start_server: StartServer, tmp_path: Path
) -> None:
    module = tmp_path / "agents" / "my_agent.py"
    module.parent.mkdir()
    module.write_text("from recovery import Agent\nagent = Agent()\n")
    server = start_workers(
        start_server, "--agent", "my_agent:agent", "--agent-path", str(module.parent)
    )
    away = module.rename(module.with_suffix(".away"))  # a restart now fails to start (2)

    os.kill(worker_pids(server)[0], signal.SIGKILL)
    wait_until(
        lambda: "exited with 2; restarting it" in server.log(),
        lambda: f"a failed restart:\n{server.log()}",
    )
    with make_client(server.url) as sdk:
        assert sdk.responses.create(model="m", input="still here").status == "completed"
    away.rename(module)

    wait_until(lambda: listening(server) == 3, lambda: f"the worker back:\n{server.log()}")
    assert server.stop(signal.SIGTERM) == 0


def test_each_worker_serves_its_own_metrics_port(start_server: StartServer) -> None:
    first = two_free_ports()
    server = start_workers(start_server, "--metrics-port", str(first))

    pages: dict[int, httpx.Response] = {}

    def answered(port: int) -> bool:  # a socket listens once its worker serves
        try:
            pages[port] = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        except httpx.TransportError:
            return False
        return True

    for port in (first, first + 1):
        wait_until(
            functools.partial(answered, port), lambda: f"metrics on {first}+:\n{server.log()}"
        )
        assert pages[port].status_code == 200
        assert "durable_responses" in pages[port].text
    assert server.stop(signal.SIGTERM) == 0


def test_workers_stop_when_their_parent_is_killed(start_server: StartServer) -> None:
    server = start_workers(start_server)
    pids = worker_pids(server)

    server.kill()  # SIGKILL: the parent cannot forward anything

    wait_until(lambda: not any(alive(pid) for pid in pids), lambda: f"orphans:\n{server.log()}")
    assert server.log().count("the parent of --workers died; this worker stops") == 2


def run_parent(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_taken_port_stops_the_parent_before_any_worker_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        result = run_parent("--db", str(tmp_path / "x.db"), "--port", str(port), "--workers", "2")

    assert result.returncode == 2
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(f"durable-responses: cannot listen on 127.0.0.1:{port}")
    )
    assert "started (pid" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--port", "9001", "--metrics-port", "9000", "--workers", "3"), "takes in --port"),
        (("--metrics-port", "65535", "--workers", "2"), "past 65535"),
        (("--workers", "0"), "workers"),
    ],
)
def test_worker_settings_that_cannot_work_are_refused(
    tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    result = run_parent("--db", str(tmp_path / "x.db"), *args)

    assert result.returncode == 2
    assert said in result.stderr and "Traceback" not in result.stderr
