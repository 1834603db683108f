"""A workflow re-executed after a crash finds its steps whatever order its concurrent
branches call them in (G3, G4).

The bug: a step's call id was numbered by the order steps were called in the run
(`step_{ordinal}_{name}`). Steps of `asyncio.gather` branches that interleave by timing
got other numbers on the replay: a completed step was not found and ran again, and an
ambiguous one (claimed, its outcome unknown) ran again instead of failing closed. Now a
step is known by its name and how often the run has called that name; and when two
branches call one name in another order on the replay, the call whose id the journal
holds with other arguments is neither run nor given the other call's result: the turn
fails closed, saying so. Messages (`ctx.say`) were numbered the same way, so a replay
whose branches said them in another order skipped one as said and said another twice;
now a message is known by its text and how often the run has said it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.conftest import NewStore, StartServer
from tests.crash._support import check_replays, log_lines
from tests.support.peek import query
from tests.support.side_effects import effects, runs_per_key
from tests.support.waiting import wait_terminal, wait_until

FAST = ("--lease-ttl", "1.5", "--scan-interval", "0.2")


def _start(start_server: StartServer, db: Any, folder: Path, handler: str) -> tuple[Any, str]:
    args = ("--agent", f"tests.agents.branching_workflow_agent:{handler}", *FAST)
    server = start_server(*args, db=db, env={"SIDE_EFFECTS_DIR": str(folder)})
    return server, server.url


def _create(url: str) -> str:
    body = {"model": "m", "input": "go", "background": True}
    created: dict[str, Any] = httpx.post(f"{url}/v1/responses", json=body, timeout=30).json()
    return str(created["id"])


def _journal(db: Any) -> dict[str, str]:
    return {call_id: state for call_id, state in query(db, "SELECT call_id, state FROM journal")}


def test_steps_of_interleaved_branches_are_found_again_after_a_crash(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    """Branch y's y_b (neither idempotent nor reconcilable) is cut by a SIGKILL while
    it runs; branch x's x_b, called after it, has completed. On the replay x_b comes
    first: it returns its recorded result, and y_b fails the turn closed."""
    db, folder = new_store("wf"), tmp_path / "effects"
    first, url = _start(start_server, db, folder, "interleaved")
    response_id = _create(url)
    wait_until(
        lambda: _journal(db).get("step-1-x_b") == "completed" and bool(log_lines(folder, "y_b")),
        "x_b recorded while y_b runs",
        deadline=30,
    )
    first.kill()

    _, url = _start(start_server, db, folder, "interleaved")
    final = wait_terminal(url, response_id, deadline=40)

    assert list(runs_per_key(folder, "x_b").values()) == [1], "the completed x_b ran again"
    assert len(log_lines(folder, "y_b.started")) == 1, "the ambiguous y_b ran again"
    assert final["status"] == "failed", "y_b's outcome is unknown: G4 fails closed"
    assert final["error"]["code"] == "tool_outcome_unknown"
    assert "'step-1-y_b'" in final["error"]["message"]
    assert "different order" not in final["error"]["message"], "no reordering by name"
    assert set(_journal(db)) == {"step-1-x_a", "step-1-y_a", "step-1-x_b", "step-1-y_b"}
    check_replays(url, response_id, final)


def test_branches_calling_one_step_in_another_order_on_replay_fail_closed(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    """Both branches call `send`, with other arguments; y's call came first on the
    first run, x's comes first on the replay. Neither is given the other's recorded
    result (the response would end `completed` with the results swapped) nor run: the
    turn fails, saying the workflow called its steps in a different order."""
    db, folder = new_store("wf"), tmp_path / "effects"
    first, url = _start(start_server, db, folder, "same_name")
    response_id = _create(url)
    wait_until(lambda: bool(log_lines(folder, "linger.started")), "both sends recorded")
    first.kill()

    _, url = _start(start_server, db, folder, "same_name")
    final = wait_terminal(url, response_id, deadline=40)

    assert final["status"] == "failed", final.get("output")
    assert final["error"]["code"] == "tool_outcome_unknown"
    message = final["error"]["message"]
    assert "called its steps in a different order on replay" in message, message
    assert "'send'" in message and "'step-1-send'" in message, message
    sent = effects(folder, "send")
    assert sorted(detail for _, detail in sent) == ["x", "y"], "each send took effect once"
    assert len({key for key, _ in sent}) == 2, "under keys of their own"
    assert len(log_lines(folder, "send.started")) == 2, "no send ran again"
    assert len(log_lines(folder, "linger.started")) == 1, "the turn stopped before linger"
    check_replays(url, response_id, final)


def test_a_step_given_what_json_cannot_hold_is_found_again_in_another_process(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    """No branches at all: a step's argument is an object whose str() differs between
    processes (a set inside it prints in the process's string-hash order). Such
    arguments are recorded but not compared: the recovering process reuses the step's
    recorded result rather than failing the turn as reordered."""
    db, folder = new_store("wf"), tmp_path / "effects"
    args = ("--agent", "tests.agents.branching_workflow_agent:tagged", *FAST)
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    first = start_server(*args, db=db, env={**env, "PYTHONHASHSEED": "1"})
    response_id = _create(first.url)
    wait_until(lambda: bool(log_lines(folder, "linger.started")), "the charge recorded")
    first.kill()

    survivor = start_server(*args, db=db, env={**env, "PYTHONHASHSEED": "2"})
    final = wait_terminal(survivor.url, response_id, deadline=60)

    assert final["status"] == "completed", final.get("error")
    assert list(runs_per_key(folder, "charge").values()) == [1], "charged once"


def test_messages_said_in_another_order_on_replay_are_neither_lost_nor_repeated(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    """Branch y said its message, then a SIGKILL came before branch x said its own. On
    the replay x says first: it used to take the id of y's message (the first said) and
    be skipped as said, and y's message was then said again."""
    db, folder = new_store("wf"), tmp_path / "effects"
    first, url = _start(start_server, db, folder, "said")
    response_id = _create(url)
    wait_until(lambda: bool(log_lines(folder, "y_said")), "y's message said")
    wait_until(
        lambda: bool(query(db, "SELECT seq FROM events WHERE data LIKE '%from y%'")),
        "y's message committed",
    )
    first.kill()

    _, url = _start(start_server, db, folder, "said")
    final = wait_terminal(url, response_id, deadline=40)

    assert final["status"] == "completed", final.get("error")
    said = [
        part["text"]
        for item in final["output"]
        if item["type"] == "message"
        for part in item["content"]
    ]
    assert said == ["from y", "from x", "done"], said
    check_replays(url, response_id, final)
