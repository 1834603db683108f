"""Recovery of whole processes: graceful shutdown, poison pills, foreground responses
of a dead process, and readiness (docs/guarantees.md G1, G8)."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import httpx

from tests.conftest import NewStore, StartServer
from tests.crash._support import check_replays, log_lines, only_response_id, wait_for_exit
from tests.support.side_effects import runs_per_key
from tests.support.waiting import wait_terminal, wait_until

TOOLS = ("--agent", "tests.agents.tool_agent:agent")
THREE_STEPS = (
    '[[call wait_a_bit {"seconds": 0.4}]] [[next]] [[call wait_a_bit {"seconds": 0.4}]]'
    ' [[next]] [[call wait_a_bit {"seconds": 0.4}]]'
)


def test_sigterm_pauses_at_a_step_boundary_and_a_new_process_resumes_at_once(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    db, folder = new_store("g"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    # A lease TTL far above the wait below: resuming must not wait for it to expire.
    args = (*TOOLS, "--lease-ttl", "120", "--scan-interval", "0.2")
    first = start_server(*args, db=db, env=env)
    created = httpx.post(
        f"{first.url}/v1/responses", json={"model": "m", "input": THREE_STEPS, "background": True}
    ).json()
    wait_until(lambda: len(log_lines(folder, "wait_a_bit")) >= 1, "the first step's tool")

    assert first.stop(signal.SIGTERM) == 0
    assert "paused at a step boundary" in first.log()
    second = start_server(*args, db=db, env=env)
    final = wait_terminal(second.url, created["id"], deadline=20)

    assert final["status"] == "completed"
    assert list(runs_per_key(folder, "wait_a_bit").values()) == [1, 1, 1]
    check_replays(second.url, created["id"], final)


def test_on_sigterm_running_turns_finish_and_new_work_is_refused(
    start_server: StartServer, tmp_path: Path
) -> None:
    server = start_server(*TOOLS, "--shutdown-grace", "5", env={"SIDE_EFFECTS_DIR": str(tmp_path)})
    # A slow foreground stream keeps the server busy while it shuts down.
    with (
        httpx.Client(base_url=server.url, timeout=30) as http,
        http.stream(
            "POST",
            "/v1/responses",
            json={"model": "m", "input": "x [[words 30]] [[delay 50]]", "stream": True},
        ) as stream,
    ):
        lines = stream.iter_lines()
        next(lines)
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        try:
            late = httpx.post(f"{server.url}/v1/responses", json={"model": "m", "input": "x"})
            assert late.status_code == 503, late.text
        except httpx.ConnectError:
            pass  # the listener is already closed: refused all the same
        rest = "\n".join(lines)
    assert "response.completed" in rest  # the running turn was allowed to finish
    assert wait_for_exit(server) == 0


def test_a_poison_pill_ends_recovery_exhausted_and_the_server_stays_up(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    """Issue 19: a restarted process's start-up recovery scan can pick the pill up (once
    the dead process's 1 s lease expired) and die before /healthz ever answered, so the
    restarts do not wait for health: each only has to die of the pill, whenever it does."""
    db, folder = new_store("p"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    args = (*TOOLS, "--lease-ttl", "1", "--scan-interval", "0.2", "--max-recoveries", "2")
    server = start_server(*args, db=db, env=env)
    with contextlib.suppress(httpx.HTTPError):  # the pill may kill it before it answers
        httpx.post(
            f"{server.url}/v1/responses",
            json={"model": "m", "input": "[[call crash {}]]", "background": True},
        )

    for run in range(1, 4):  # the first run and two recoveries each kill the process
        assert wait_for_exit(server) == 1, server.log()
        assert len(log_lines(folder, "crash")) == run, server.log()  # it was the pill
        server = start_server(*args, db=db, env=env, wait=run == 3)  # the last one lives
    response_id = only_response_id(db)
    final = wait_terminal(server.url, response_id)

    assert final["status"] == "failed"
    assert final["error"]["code"] == "recovery_exhausted"
    assert len(log_lines(folder, "crash")) == 3
    healthy = httpx.post(f"{server.url}/v1/responses", json={"model": "m", "input": "still up?"})
    assert healthy.json()["status"] == "completed"
    assert server.proc is not None and server.proc.poll() is None
    check_replays(server.url, response_id, final)


def test_a_foreground_response_of_a_dead_process_ends_failed(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    db = new_store("f")
    args = ("--lease-ttl", "1", "--scan-interval", "0.2")
    doomed = start_server(*args, db=db)
    with httpx.stream(
        "POST",
        f"{doomed.url}/v1/responses",
        json={"model": "m", "input": "x [[words 100]] [[delay 100]]", "stream": True},
        timeout=30,
    ) as stream:
        lines = stream.iter_lines()
        first = next(line for line in lines if line.startswith("data:"))
        response_id = httpx.Response(200, content=first[5:]).json()["response"]["id"]
        doomed.kill()

    survivor = start_server(*args, db=db)
    final = wait_terminal(survivor.url, response_id)

    assert final["status"] == "failed"
    assert final["error"]["code"] == "server_error"
    assert "restarted" in final["error"]["message"]


def test_ready_once_the_first_recovery_scan_is_done(start_server: StartServer) -> None:
    server = start_server()
    wait_until(
        lambda: httpx.get(f"{server.url}/readyz").status_code == 200,
        "ready",
        deadline=10,
        interval=0.05,
    )
    assert httpx.get(f"{server.url}/readyz").json() == {"status": "ready"}
