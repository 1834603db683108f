"""Issue 21, window 5: a turn could run forever past --max-recoveries, or hold an
orphaned lease forever (G1).

The bug: a runner that exits without recording an end (here a workflow step raises
CancelledError, as a buggy library can) left its lease held. Leases were renewed by
owner alone, so while any other turn ran in the same process the orphan's lease was
renewed every heartbeat and nothing ever drove it; alone, its lease expired and the same
process recovered it without counting (a process's own turn was exempt), looping with
recoveries=0 and a growing epoch.

The fix: a process renews only the leases it drives (owner and epoch of each live
runner), and every recovery of a turn that did not end counts, one's own included; a
graceful hand-over (a released lease) does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import NewStore, StartServer
from tests.crash._support import check_replays, log_lines
from tests.support.peek import query
from tests.support.waiting import wait_terminal

FLOW = (
    "--agent",
    "tests.agents.blocking_agent:flow",
    "--lease-ttl",
    "1",
    "--scan-interval",
    "0.2",
    "--max-recoveries",
    "2",
)


def create(url: str, prompt: str) -> dict[str, Any]:
    body = {"model": "m", "input": prompt, "background": True}
    response: dict[str, Any] = httpx.post(f"{url}/v1/responses", json=body, timeout=30).json()
    return response


@pytest.mark.parametrize(
    "beside", [pytest.param(False, id="alone"), pytest.param(True, id="beside-a-running-turn")]
)
def test_a_turn_whose_runner_ends_without_an_end_is_recovered_counted_and_exhausted(
    start_server: StartServer, new_store: NewStore, tmp_path: Path, beside: bool
) -> None:
    db, folder = new_store("o"), tmp_path / "effects"
    server = start_server(*FLOW, db=db, env={"SIDE_EFFECTS_DIR": str(folder)})
    other = create(server.url, "wait 40") if beside else None

    doomed = create(server.url, "cancel")
    final = wait_terminal(server.url, doomed["id"], deadline=25)

    assert final["status"] == "failed", final
    assert final["error"]["code"] == "recovery_exhausted"
    assert len(log_lines(folder, "cancel")) == 3  # the first run and two recoveries
    sql = "SELECT recoveries, epoch, owner FROM responses WHERE id = ?"
    assert query(db, sql, doomed["id"]) == [(3, 4, None)]
    check_replays(server.url, doomed["id"], final)
    if other is not None:  # the turn beside it was never disturbed
        status = httpx.get(f"{server.url}/v1/responses/{other['id']}").json()["status"]
        assert status == "in_progress"
