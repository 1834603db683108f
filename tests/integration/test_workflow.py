"""Durable workflow handlers: each step journaled once, and a handler that resumes at
its first unfinished step after the process died."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.conftest import NewStore, StartServer, make_client
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
