"""Issue 21, window 1: graceful shutdown handed a turn over while a tool body still ran,
and the effect happened twice (docs/guarantees.md G3, G8).

On SIGTERM the drain waited out the grace period, cancelled the turn and released every
lease. Cancelling the turn did not stop a plain (`def`) tool's thread; the other process
recovered at once, the reconcile hook answered "not sent" (the thread had not got there
yet), and the body ran again while the first thread finished its own effect.

The fix: a body, once started, is never abandoned. A turn cut off by shutdown waits for
its running bodies and records their outcomes before it ends, and the leases are
released only then; the other process reuses the recorded outcome. An async body is not
cut either (it is bounded by its own timeout), so a graceful shutdown leaves no
ambiguous call behind.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import NewStore, StartServer
from tests.crash._support import check_replays, log_lines
from tests.support.side_effects import runs_per_key
from tests.support.waiting import wait_terminal, wait_until

# A lease TTL far above the test's waits: the survivor resumes only because the leases
# were released, and a short grace period so the turn is cut while its tool still runs.
ARGS = (
    "--agent",
    "tests.agents.thread_tool_agent:agent",
    "--lease-ttl",
    "120",
    "--scan-interval",
    "0.2",
    "--shutdown-grace",
    "0.3",
)


def _create(url: str, prompt: str) -> dict[str, Any]:
    body = {"model": "m", "input": prompt, "background": True}
    created: dict[str, Any] = httpx.post(f"{url}/v1/responses", json=body, timeout=30).json()
    return created


@pytest.mark.parametrize(
    ("prompt", "tool"),
    [
        pytest.param(
            '[[call slow_send {"to": "ops", "seconds": 2}]]', "slow_send", id="thread-reconcilable"
        ),
        pytest.param(
            '[[call slow_notify {"to": "ops", "seconds": 2}]]', "slow_notify", id="async-plain"
        ),
    ],
)
def test_a_tool_body_running_at_sigterm_takes_effect_once_and_the_survivor_reuses_it(
    start_server: StartServer, new_store: NewStore, tmp_path: Path, prompt: str, tool: str
) -> None:
    db, folder = new_store("shared"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    first = start_server(*ARGS, db=db, env=env)
    survivor = start_server(*ARGS, db=db, env=env)
    created = _create(first.url, prompt)
    wait_until(lambda: len(log_lines(folder, f"{tool}.started")) == 1, "the tool body to start")

    assert first.stop(signal.SIGTERM) == 0
    final = wait_terminal(survivor.url, created["id"], deadline=20)

    assert final["status"] == "completed", final.get("error")
    assert list(runs_per_key(folder, tool).values()) == [1], "the effect happened once"
    assert len(log_lines(folder, f"{tool}.started")) == 1, "the body ran once"
    outputs = [i["output"] for i in final["output"] if i["type"] == "function_call_output"]
    assert len(outputs) == 1 and "(found)" not in outputs[0], "recorded by the first process"
    check_replays(survivor.url, created["id"], final)
