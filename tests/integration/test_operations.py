"""Operating the server: metrics after a known workload, limits with clear errors, and
structured logs."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import StartServer
from tests.support.schemas import validate_error_envelope
from tests.support.server import free_port
from tests.support.waiting import wait_terminal, wait_until


def metric(text: str, name: str, labels: str = "") -> float:
    pattern = rf"^{re.escape(name)}{re.escape('{' + labels + '}') if labels else ''} (\S+)$"
    match = re.search(pattern, text, re.MULTILINE)
    assert match, f"{name}{{{labels}}} not in metrics"
    return float(match.group(1))


def test_metrics_count_a_known_workload(start_server: StartServer, tmp_path: Path) -> None:
    metrics_port = free_port()
    server = start_server(
        "--agent",
        "tests.agents.tool_agent:agent",
        "--metrics-port",
        str(metrics_port),
        env={"SIDE_EFFECTS_DIR": str(tmp_path)},
    )
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for _ in range(2):
            http.post("/v1/responses", json={"model": "m", "input": "hi"})
        http.post("/v1/responses", json={"model": "m", "input": "[[fail]]"})
        http.post("/v1/responses", json={"model": "m", "input": '[[call lookup {"city": "X"}]]'})
        http.post("/v1/responses", json={"model": "m", "input": "[[call explode {}]]"})
        http.get("/v1/responses/resp_missing")
        text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text

    prefix = "durable_responses"
    assert metric(text, f"{prefix}_responses_finished_total", 'status="completed"') == 4
    assert metric(text, f"{prefix}_responses_finished_total", 'status="failed"') == 1
    assert metric(text, f"{prefix}_tool_calls_total", 'outcome="completed"') == 1
    assert metric(text, f"{prefix}_tool_calls_total", 'outcome="errored"') == 1
    assert (
        metric(
            text,
            f"{prefix}_http_requests_total",
            'method="POST",route="create_response",status="200"',
        )
        == 5
    )
    assert (
        metric(
            text, f"{prefix}_http_requests_total", 'method="GET",route="get_response",status="404"'
        )
        == 1
    )
    assert metric(text, f"{prefix}_active_runs") == 0
    assert metric(text, f"{prefix}_queued_responses") == 0
    assert metric(text, f"{prefix}_recoveries_total") == 0
    assert metric(text, f"{prefix}_store_commit_seconds_count") >= 5


@pytest.mark.parametrize(
    ("flag", "body", "param"),
    [
        pytest.param(
            ("--max-input-items", "2"),
            {"model": "m", "input": [{"role": "user", "content": "x"}] * 3},
            "input",
            id="input-items",
        ),
        pytest.param(
            ("--max-tools", "1"),
            {
                "model": "m",
                "input": "x",
                "tools": [
                    {"type": "function", "name": f"t{i}", "parameters": {}} for i in range(2)
                ],
            },
            "tools",
            id="tools",
        ),
    ],
)
def test_request_size_limits_are_clear_400s(
    start_server: StartServer, flag: tuple[str, str], body: dict[str, object], param: str
) -> None:
    server = start_server(*flag)

    answer = httpx.post(f"{server.url}/v1/responses", json=body)

    assert answer.status_code == 400
    validate_error_envelope(answer.json())
    assert answer.json()["error"]["param"] == param
    assert answer.json()["error"]["code"] == "array_above_max_length"


def test_open_streams_per_tenant_are_limited(start_server: StartServer) -> None:
    server = start_server("--max-streams-per-tenant", "1")
    slow = {"model": "m", "input": "x [[words 50]] [[delay 40]]", "stream": True}
    with httpx.Client(base_url=server.url, timeout=30) as http:
        with http.stream("POST", "/v1/responses", json=slow) as first:
            lines = first.iter_lines()  # kept: a dropped iterator closes the stream
            next(lines)
            refused = http.post("/v1/responses", json=slow)
            assert refused.status_code == 429
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "too_many_streams"
        # the slot is free again once the first stream ended
        wait_until(
            lambda: http.post("/v1/responses", json={**slow, "input": "y"}).status_code == 200,
            "a stream slot",
        )


def test_queued_background_responses_per_tenant_are_limited(start_server: StartServer) -> None:
    server = start_server("--max-queued-per-tenant", "1")
    with httpx.Client(base_url=server.url, timeout=30) as http:
        conversation = http.post("/v1/conversations", json={}).json()["id"]
        turn = {"model": "m", "conversation": conversation, "background": True}
        running = http.post("/v1/responses", json={**turn, "input": "a [[words 80]] [[delay 40]]"})
        wait_until(
            lambda: (
                http.get(f"/v1/responses/{running.json()['id']}").json()["status"] == "in_progress"
            ),
            "the first turn to run",
        )
        queued = http.post("/v1/responses", json={**turn, "input": "b"})
        refused = http.post("/v1/responses", json={**turn, "input": "c"})

        assert queued.json()["status"] == "queued"
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1
        assert "queued" in refused.json()["error"]["message"]
        http.post(f"/v1/responses/{running.json()['id']}/cancel")
        assert wait_terminal(server.url, queued.json()["id"])["status"] == "completed"


def test_json_logs_name_the_request_and_the_response(start_server: StartServer) -> None:
    server = start_server("--log-format", "json", "--log-level", "debug")
    answer = httpx.post(f"{server.url}/v1/responses", json={"model": "m", "input": "[[fail]]"})
    response_id, request_id = answer.json()["id"], answer.headers["x-request-id"]
    deadline = time.monotonic() + 10
    while response_id not in server.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    server.stop()

    entries = [json.loads(line) for line in server.log().splitlines() if line.strip()]
    about = [e for e in entries if e["response_id"] == response_id]
    assert about, "no log line names the response"
    assert all(e["request_id"] == request_id for e in about)
    assert {"time", "level", "logger", "message"} <= set(entries[0])
