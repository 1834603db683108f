"""A workflow step running when a graceful shutdown's grace ends is waited for, recorded
once, and reused by the process that takes the turn over (G3, G8): before, the step's
thread or task was abandoned, the lease released, and the survivor either ran the step a
second time or failed the turn `tool_outcome_unknown` with no crash at all."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from tests.conftest import NewStore, StartServer
from tests.crash._support import check_replays, log_lines
from tests.support.side_effects import runs_per_key
from tests.support.waiting import wait_terminal, wait_until

# A lease TTL far above the test's waits: the survivor resumes only because the lease
# was released, and a grace period that ends while the step still runs.
FAST = ("--lease-ttl", "120", "--scan-interval", "0.2", "--shutdown-grace", "0.3")


@pytest.mark.parametrize(
    ("handler", "step"),
    [
        pytest.param("plain", "post", id="thread"),
        pytest.param("asynchronous", "notify", id="async"),
        # Longer than the grace plus Hypercorn's margin (10 s). Before, Hypercorn gave up
        # on the app's shutdown there and asyncio cancelled every task: the step (or the
        # task waiting for its thread) was cut, its entry left `claimed`, and the turn
        # handed over at once, its lease released while the thread still ran: the
        # survivor failed the turn `tool_outcome_unknown` with no crash at all, or ran an
        # idempotent step a second time while the first still ran.
        pytest.param("long_plain", "long_post", id="long-thread"),
        pytest.param("long_asynchronous", "long_notify", id="long-async"),
        pytest.param("long_idempotent", "long_post", id="long-idempotent"),
    ],
)
def test_a_workflow_step_running_at_sigterm_takes_effect_once(
    start_server: StartServer, new_store: NewStore, tmp_path: Path, handler: str, step: str
) -> None:
    db, folder = new_store("shared"), tmp_path / "effects"
    args = ("--agent", f"tests.agents.slow_workflow_agent:{handler}", *FAST)
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    first = start_server(*args, db=db, env=env)
    survivor = start_server(*args, db=db, env=env)
    body = {"model": "m", "input": "go", "background": True}
    created = httpx.post(f"{first.url}/v1/responses", json=body, timeout=30).json()
    wait_until(lambda: len(log_lines(folder, f"{step}.started")) == 1, "the step to start")

    assert first.stop(signal.SIGTERM, timeout=60) == 0
    final = wait_terminal(survivor.url, created["id"], deadline=30)

    assert final["status"] == "completed", final.get("error")
    assert list(runs_per_key(folder, step).values()) == [1], "the effect happened once"
    assert len(log_lines(folder, f"{step}.started")) == 1, "the step ran once"
    check_replays(survivor.url, created["id"], final)


def test_a_step_that_cancels_itself_fails_the_turn_and_is_recorded(
    start_server: StartServer, tmp_path: Path
) -> None:
    server = start_server("--agent", "tests.agents.slow_workflow_agent:self_cancelling")
    body = {"model": "m", "input": "go", "background": True}
    created = httpx.post(f"{server.url}/v1/responses", json=body, timeout=30).json()

    final = wait_terminal(server.url, created["id"])

    assert final["status"] == "failed"
    assert "hang_up" in final["error"]["message"]
    assert "CancelledError" in final["error"]["message"]
    [output] = [i for i in final["output"] if i["type"] == "function_call_output"]
    assert "CancelledError" in output["output"], "the step's failure is its recorded output"
    check_replays(server.url, created["id"], final)


@pytest.mark.parametrize(
    ("handler", "declared"),
    [
        pytest.param("fan_out", "not idempotent", id="at-most-once"),
        pytest.param("fan_out_idempotent", "idempotent", id="idempotent"),
    ],
)
def test_a_concurrent_step_running_at_sigterm_is_waited_for_before_the_hand_over(
    start_server: StartServer, new_store: NewStore, tmp_path: Path, handler: str, declared: str
) -> None:
    """One branch's next step raises the stop while the other branch's step still runs:
    the turn is handed over only once that step has ended and is recorded. Before, the
    lease was released at once, and the survivor failed the turn `tool_outcome_unknown`
    with no crash at all, or (idempotent) ran the step while it still ran here."""
    db, folder = new_store("shared"), tmp_path / "effects"
    args = ("--agent", f"tests.agents.slow_workflow_agent:{handler}", *FAST)
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    first = start_server(*args, db=db, env=env)
    survivor = start_server(*args, db=db, env=env)
    body = {"model": "m", "input": "go", "background": True}
    created = httpx.post(f"{first.url}/v1/responses", json=body, timeout=30).json()
    wait_until(lambda: len(log_lines(folder, "notify.started")) == 1, "the slow step to start")

    assert first.stop(signal.SIGTERM) == 0
    final = wait_terminal(survivor.url, created["id"], deadline=30)

    assert final["status"] == "completed", (declared, final.get("error"))
    assert len(log_lines(folder, "notify.started")) == 1, "the step ran once"
    assert list(runs_per_key(folder, "notify").values()) == [1], "the effect happened once"
    check_replays(survivor.url, created["id"], final)


def test_a_handler_that_catches_an_unknown_outcome_still_fails_closed(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    """A step cut by a SIGKILL is ambiguous (G4). A handler's `except Exception` retry loop
    catches that error, but the step is not claimed again under a new call id: the turn
    fails `tool_outcome_unknown` and the effect happened at most once. Before, the retry
    ran the body a second time and the response ended `completed`."""
    db, folder = new_store("shared"), tmp_path / "effects"
    args = ("--agent", "tests.agents.slow_workflow_agent:retrying", "--lease-ttl", "2")
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    first = start_server(*args, "--scan-interval", "0.2", db=db, env=env)
    body = {"model": "m", "input": "go", "background": True}
    created = httpx.post(f"{first.url}/v1/responses", json=body, timeout=30).json()
    wait_until(lambda: len(log_lines(folder, "post.started")) == 1, "the step to start")
    first.kill()  # SIGKILL while the body runs: its entry stays `claimed`

    survivor = start_server(*args, "--scan-interval", "0.2", db=db, env=env)
    final = wait_terminal(survivor.url, created["id"], deadline=30)

    assert len(log_lines(folder, "post.started")) == 1, "the step ran again"
    assert final["status"] == "failed"
    assert final["error"]["code"] == "tool_outcome_unknown"
    assert "step-1-post" in final["error"]["message"]
    calls = [i["call_id"] for i in final["output"] if i["type"] == "function_call"]
    assert calls == ["step-1-post"], "no second claim of the step"
    check_replays(survivor.url, created["id"], final)
