"""Issue 21, window 2: a live process whose event loop is blocked lost its turns.

The bug: leases were renewed by a heartbeat task on the event loop. An async tool that
blocked (time.sleep, a blocking client library), or a plain workflow step (called on the
loop), stalled the heartbeat past the lease TTL, and another process on the same store
took the turn while the first still ran it: a reconcilable effect ran twice and
`recoveries` was counted with no crash (G3, G8); a workflow failed tool_outcome_unknown
while its server was up, and its journal entry stayed `claimed` forever (G1).

The fix: leases are renewed by a thread of the runtime's own, whose writes the store's
writer thread commits without the event loop; plain workflow steps run in a thread like
plain tools; and a loop blocked for more than a second is logged as a warning.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import NewStore, StartServer
from tests.crash._support import check_replays, log_lines
from tests.support.peek import query
from tests.support.side_effects import runs_per_key
from tests.support.waiting import wait_terminal, wait_until

FAST = ("--lease-ttl", "1", "--scan-interval", "0.2")
TOOLS = ("--agent", "tests.agents.blocking_agent:agent", *FAST)
FLOW = ("--agent", "tests.agents.blocking_agent:flow", *FAST)


def create(url: str, prompt: str) -> dict[str, Any]:
    body = {"model": "m", "input": prompt, "background": True}
    response: dict[str, Any] = httpx.post(f"{url}/v1/responses", json=body, timeout=30).json()
    return response


def blocked_for(log: str) -> list[float]:
    """The durations of event loop blocks the log reports, in seconds."""
    return [float(s) for s in re.findall(r"event loop was blocked for ([\d.]+)s", log)]


def test_a_tool_that_blocks_the_event_loop_keeps_its_turn(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    db, folder = new_store("shared"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    busy = start_server(*TOOLS, db=db, env=env)
    idle = start_server(*TOOLS, db=db, env=env)  # scans the same store all along

    created = create(busy.url, '[[call charge_blocking {"amount": 7, "seconds": 3}]]')
    final = wait_terminal(idle.url, created["id"])

    assert final["status"] == "completed", final
    assert list(runs_per_key(folder, "charge_blocking").values()) == [1]  # G3
    assert query(db, "SELECT recoveries FROM responses WHERE id = ?", created["id"]) == [(0,)]
    assert "recovering response" not in idle.log()  # G8: nobody else drove it
    # The operator is told, while it lasts (and where), and once it is over.
    # (Measured from a probe sent up to one tick after the block began: a bit under 3 s.)
    assert re.search(r"event loop has been blocked for 1\.\ds, in charge_blocking", busy.log())
    wait_until(lambda: max(blocked_for(busy.log()), default=0) > 2.5, "the loop's block logged")
    check_replays(idle.url, created["id"], final)


def test_a_plain_workflow_step_does_not_block_the_event_loop(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    db, folder = new_store("shared"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    busy = start_server(*FLOW, db=db, env=env)
    idle = start_server(*FLOW, db=db, env=env)

    created = create(busy.url, "block 3")
    final = wait_terminal(idle.url, created["id"])

    assert final["status"] == "completed", final
    assert len(log_lines(folder, "block")) == 1
    assert query(db, "SELECT state FROM journal WHERE response_id = ?", created["id"]) == [
        ("completed",)
    ]
    assert query(db, "SELECT recoveries FROM responses WHERE id = ?", created["id"]) == [(0,)]
    assert max(blocked_for(busy.log()), default=0) < 2  # the 3 s step ran in a thread
    check_replays(idle.url, created["id"], final)
