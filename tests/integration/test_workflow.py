"""Durable workflow handlers: each step journaled once, and a handler that resumes at
its first unfinished step after the process died."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.conftest import NewStore, StartServer, make_client
from tests.support.peek import query
from tests.support.stream_rules import check_stream, parse_sse
from tests.support.waiting import wait_terminal

WORKFLOW = ("--agent", "tests.agents.workflow_agent:order", "--lease-ttl", "2")


def lines(folder: Path, stage: str) -> list[str]:
    path = folder / f"{stage}.log"
    return path.read_text().splitlines() if path.exists() else []


def test_a_workflow_runs_each_stage_once_and_reports_them(
    start_server: StartServer, tmp_path: Path
) -> None:
    server = start_server(*WORKFLOW, env={"SIDE_EFFECTS_DIR": str(tmp_path)})
    with make_client(server.url) as sdk:
        response = sdk.responses.create(model="m", input="lamp")

    body = response.model_dump(mode="json", exclude_unset=True)
    assert response.status == "completed"
    assert [(i["type"], i.get("name")) for i in body["output"]] == [
        ("function_call", "reserve"),
        ("function_call_output", None),
        ("message", None),
        ("function_call", "charge"),
        ("function_call_output", None),
        ("function_call", "ship"),
        ("function_call_output", None),
        ("message", None),
    ]
    assert json.loads(response.output[-1].content[0].text) == {  # type: ignore[union-attr]
        "order": "order-lamp",
        "charge": "charged 10",
        "ship": "shipped",
    }
    assert (lines(tmp_path, "reserve"), lines(tmp_path, "charge")) == (["lamp"], ["10"])


@pytest.mark.parametrize("stage", ["reserve", "charge"])
def test_after_a_crash_the_workflow_resumes_at_its_first_unfinished_stage(
    start_server: StartServer, new_store: NewStore, tmp_path: Path, stage: str
) -> None:
    db = new_store("wf")
    env = {"SIDE_EFFECTS_DIR": str(tmp_path)}
    doomed = start_server(*WORKFLOW, db=db, env={**env, "CRASH_AFTER_STAGE": stage})
    created = httpx.post(
        f"{doomed.url}/v1/responses", json={"model": "m", "input": "desk", "background": True}
    ).json()
    assert doomed.proc is not None
    try:
        doomed.proc.wait(30)
    except subprocess.TimeoutExpired:
        raise AssertionError("the workflow did not crash") from None

    survivor = start_server(*WORKFLOW, db=db, env=env)
    final = wait_terminal(survivor.url, created["id"])
    events = parse_sse(httpx.get(f"{survivor.url}/v1/responses/{created['id']}?stream=true").text)

    assert final["status"] == "completed"
    assert lines(tmp_path, "reserve") == ["desk"]
    assert lines(tmp_path, "charge") == ["10"]
    assert lines(tmp_path, "ship") == ["order-desk"]
    check_stream(events)
    names = [i.get("name") for i in final["output"] if i["type"] == "function_call"]
    assert names == ["reserve", "charge", "ship"]


def test_a_failing_stage_fails_the_response_and_stops_the_workflow(
    start_server: StartServer, tmp_path: Path
) -> None:
    server = start_server(*WORKFLOW, env={"SIDE_EFFECTS_DIR": str(tmp_path)})
    with make_client(server.url) as sdk:
        response = sdk.responses.create(model="m", input="broken")

    assert response.status == "failed"
    assert response.error is not None
    assert "step 'ship' failed: RuntimeError: no such warehouse" in response.error.message
    assert lines(tmp_path, "ship") == []


def test_when_one_branch_fails_the_others_step_is_cut_and_recorded_not_left_claimed(
    start_server: StartServer, tmp_path: Path
) -> None:
    """Steps run concurrently, one branch fails while the other's step runs: the handler
    has ended, so that step is cancelled and recorded failed with its outcome unknown,
    and no step starts after it. Every call of the stored response has its output, and
    no journal entry is left `claimed` (which would fail the turn closed if it were
    recovered). Before, the end could be written while a step of the other branch had
    just started, which then ran with its entry left `claimed`."""
    folder = tmp_path / "effects"
    server = start_server(
        "--agent",
        "tests.agents.slow_workflow_agent:failing_branch",
        env={"SIDE_EFFECTS_DIR": str(folder)},
    )
    body = {"model": "m", "input": "go", "background": True}
    created = httpx.post(f"{server.url}/v1/responses", json=body, timeout=30).json()

    final = wait_terminal(server.url, created["id"], deadline=30)

    assert final["status"] == "failed"
    assert "boom" in final["error"]["message"]
    calls = [i["call_id"] for i in final["output"] if i["type"] == "function_call"]
    outputs = {
        i["call_id"]: i["output"] for i in final["output"] if i["type"] == "function_call_output"
    }
    assert sorted(calls) == sorted(outputs), "every call has its output"
    cut = [c for c, text in outputs.items() if "happened is unknown" in text]
    assert len(cut) == 1 and "-q_" in cut[0], outputs
    journal = query(
        server.db, "SELECT call_id, state FROM journal WHERE response_id = ?", created["id"]
    )
    assert sorted(c for c, _ in journal) == sorted(calls)
    assert "claimed" not in {state for _, state in journal}, journal
    assert len(lines(folder, "quick.started")) == len(calls) - 1, "no step after the end"


def test_a_step_waiting_on_a_failed_sibling_does_not_hold_the_turn_or_the_process(
    start_server: StartServer,
) -> None:
    """A consumer step waits for what only a producer step that succeeds would send, and
    the producer fails: the turn ends failed at once, and the process stops on SIGTERM.
    Before, the turn's end waited forever for the consumer, ignoring cancel and SIGTERM."""
    server = start_server(
        "--agent", "tests.agents.slow_workflow_agent:producer_consumer", "--shutdown-grace", "0.5"
    )
    body = {"model": "m", "input": "go", "background": True}
    created = httpx.post(f"{server.url}/v1/responses", json=body, timeout=30).json()

    final = wait_terminal(server.url, created["id"], deadline=15)

    assert final["status"] == "failed"
    assert "producer failed" in final["error"]["message"]
    outputs = [i["output"] for i in final["output"] if i["type"] == "function_call_output"]
    assert len(outputs) == 2 and any("unknown" in text for text in outputs), outputs
    assert server.stop(signal.SIGTERM, timeout=15) == 0


def test_a_step_claimed_as_the_handler_fails_is_recorded_not_run(
    start_server: StartServer, tmp_path: Path
) -> None:
    """The handler fails while another branch's step is being claimed: its body never
    starts (it would wait forever for what the failed branch never sends), its entry is
    recorded failed, 'not run', and the turn ends at once. Before, the body started after
    the handler had ended and held the turn in_progress, past cancel and SIGTERM."""
    folder = tmp_path / "effects"
    server = start_server(
        "--agent",
        "tests.agents.slow_workflow_agent:fail_during_claim",
        "--shutdown-grace",
        "0.5",
        env={"SIDE_EFFECTS_DIR": str(folder)},
    )
    body = {"model": "m", "input": "go", "background": True}
    created = httpx.post(f"{server.url}/v1/responses", json=body, timeout=30).json()

    final = wait_terminal(server.url, created["id"], deadline=15)

    assert final["status"] == "failed"
    assert lines(folder, "consume.started") == [], "no body starts after the handler ended"
    [output] = [i["output"] for i in final["output"] if i["type"] == "function_call_output"]
    assert "was not run" in output
    journal = query(
        server.db, "SELECT call_id, state FROM journal WHERE response_id = ?", created["id"]
    )
    assert journal == [("step-1-consume", "errored")]
    assert server.stop(signal.SIGTERM, timeout=15) == 0


def test_a_step_that_ended_as_the_handler_returned_keeps_its_result(
    start_server: StartServer, tmp_path: Path
) -> None:
    """A step's body returns in the same tick as the handler: its result is known and
    recorded, not replaced by 'outcome unknown' (its effect happened)."""
    folder = tmp_path / "effects"
    server = start_server(
        "--agent",
        "tests.agents.slow_workflow_agent:finished_at_the_cut",
        env={"SIDE_EFFECTS_DIR": str(folder)},
    )
    body = {"model": "m", "input": "go", "background": True}
    created = httpx.post(f"{server.url}/v1/responses", json=body, timeout=30).json()

    final = wait_terminal(server.url, created["id"], deadline=15)

    assert final["status"] == "completed"
    assert len(lines(folder, "ship")) == 1
    outputs = [i["output"] for i in final["output"] if i["type"] == "function_call_output"]
    assert outputs == ['"shipped"']
