"""Operating the server without tenant keys (issue 13): probes and the metrics listener,
what the metrics count, and the log lines an operator reads (one per request, one per
response end), against real server processes."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest

from tests.conftest import StartServer
from tests.support.fake_upstream import FakeUpstream, fault, text, tool_calls
from tests.support.server import ServerProcess, free_port
from tests.support.waiting import wait_until

KEY = "sk-observability-secret"
PREFIX = "durable_responses"


def samples(text_format: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of one metric in Prometheus text: (labels, value)."""
    found = []
    for match in re.finditer(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", text_format, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        found.append((labels, float(match.group(2))))
    return found


def metric(text_format: str, name: str, **labels: str) -> float:
    """The one sample of `name` whose labels include `labels`."""
    [value] = [v for have, v in samples(text_format, name) if labels.items() <= have.items()]
    return value


def scrape(server: ServerProcess, port: int) -> str:
    answer = httpx.get(f"http://127.0.0.1:{port}/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    return answer.text


def json_lines(server: ServerProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]


def test_probes_and_metrics_need_no_key_and_tenants_never_see_metrics(
    start_server: StartServer,
) -> None:
    metrics_port = free_port()
    server = start_server("--api-keys", f"acme:{KEY}", "--metrics-port", str(metrics_port))
    tenant = {"Authorization": f"Bearer {KEY}"}

    wait_until(lambda: httpx.get(f"{server.url}/readyz").status_code == 200, "ready")
    assert httpx.get(f"{server.url}/readyz").json() == {"status": "ready"}
    assert httpx.get(f"{server.url}/metrics", headers=tenant).status_code == 404
    assert httpx.get(f"{server.url}/metrics").status_code == 401

    text_format = scrape(server, metrics_port)
    assert metric(text_format, f"{PREFIX}_ready") == 1
    assert metric(text_format, f"{PREFIX}_http_requests_total", route="readyz") >= 1
    metrics_url = f"http://127.0.0.1:{metrics_port}"
    assert httpx.get(f"{metrics_url}/v1/responses/resp_x", headers=tenant).status_code == 404
    assert httpx.get(f"{metrics_url}/healthz").status_code == 404
    assert httpx.post(f"{metrics_url}/metrics").status_code == 405


def test_made_up_methods_share_one_label_so_metrics_stay_bounded(
    start_server: StartServer,
) -> None:
    """Anyone who can reach the server, even without a key, can send any method: each
    one a label value of its own would grow the metrics page without bound."""
    metrics_port = free_port()
    server = start_server("--api-keys", f"acme:{KEY}", "--metrics-port", str(metrics_port))
    made_up = [f"BREW{n}" for n in range(5)]
    for method in made_up:
        assert httpx.request(method, f"{server.url}/v1/responses").status_code == 401

    text_format = scrape(server, metrics_port)
    assert metric(text_format, f"{PREFIX}_http_requests_total", method="OTHER") == 5
    assert not any(method in text_format for method in made_up)


def test_metrics_are_off_unless_a_port_is_given(start_server: StartServer) -> None:
    server = start_server()

    assert httpx.get(f"{server.url}/metrics").status_code == 404
    assert "metrics on" not in server.log()


def test_metrics_count_models_upstream_answers_retries_tokens_and_tools(
    start_server: StartServer, fake_upstream: FakeUpstream, tmp_path: Any
) -> None:
    metrics_port = free_port()
    server = start_server(
        "--agent",
        "tests.agents.tool_agent:agent",
        "--upstream-base-url",
        fake_upstream.url,
        "--retry-base-delay",
        "0.01",
        "--metrics-port",
        str(metrics_port),
        env={"SIDE_EFFECTS_DIR": str(tmp_path)},
    )
    fake_upstream.push(
        fault(503),
        tool_calls(("call_paris", "lookup", '{"city":"Paris"}')),
        text("sunny in Paris", usage=(11, 5)),
    )

    answer = httpx.post(
        f"{server.url}/v1/responses", json={"model": "fake-model", "input": "weather?"}, timeout=30
    )
    assert answer.json()["status"] == "completed"
    text_format = scrape(server, metrics_port)

    model = {"model": "fake-model"}  # an unpinned upstream: the request's model
    assert metric(text_format, f"{PREFIX}_upstream_responses_total", status="503") == 1
    assert metric(text_format, f"{PREFIX}_upstream_responses_total", status="200") == 2
    assert metric(text_format, f"{PREFIX}_model_retries_total", **model) == 1
    calls = f"{PREFIX}_model_calls_total"
    assert metric(text_format, calls, outcome="retryable_error", **model) == 1
    assert metric(text_format, calls, outcome="ok", **model) == 2
    assert metric(text_format, f"{PREFIX}_model_call_duration_seconds_count", **model) == 3
    first_event = f"{PREFIX}_model_time_to_first_event_seconds_count"
    assert metric(text_format, first_event, **model) == 2  # the 503 never sent an event
    assert metric(text_format, f"{PREFIX}_input_tokens_total", **model) == 7 + 11
    assert metric(text_format, f"{PREFIX}_output_tokens_total", **model) == 3 + 5
    tool = f"{PREFIX}_tool_call_duration_seconds_count"
    assert metric(text_format, tool, tool="lookup", outcome="completed") == 1
    assert metric(text_format, f"{PREFIX}_tool_calls_total", outcome="completed") == 1
    latency = f"{PREFIX}_http_request_duration_seconds_count"
    assert metric(text_format, latency, route="create_response", method="POST") == 1
    ended = f"{PREFIX}_response_duration_seconds_count"
    assert metric(text_format, ended, status="completed") == 1
    for gauge in ("active_runs", "queued_responses", "awaiting_recovery"):
        assert metric(text_format, f"{PREFIX}_{gauge}") == 0
    assert "HTTP Request" not in server.log()  # httpx's line per upstream call: debug only


def test_the_access_log_names_each_request_but_never_its_body_or_key(
    start_server: StartServer,
) -> None:
    server = start_server("--api-keys", f"acme:{KEY}", "--log-format", "json")
    tenant = {"Authorization": f"Bearer {KEY}"}
    body = {"model": "m", "input": "confidential-words"}
    created = httpx.post(f"{server.url}/v1/responses?x=1", headers=tenant, json=body)
    missing = httpx.get(f"{server.url}/v1/responses/resp_missing", headers=tenant)
    refused = httpx.get(f"{server.url}/v1/responses/resp_missing")
    server.stop()

    access = {e["request_id"]: e for e in json_lines(server) if e["logger"] == "server.access"}
    line = access[created.headers["x-request-id"]]
    assert line["method"] == "POST" and line["path"] == "/v1/responses"
    assert line["route"] == "create_response" and line["status"] == 200
    assert line["tenant"] == "acme" and line["duration_ms"] >= 0
    assert access[missing.headers["x-request-id"]]["status"] == 404
    assert access[refused.headers["x-request-id"]] | {"duration_ms": 0} == {
        **access[refused.headers["x-request-id"]],
        "status": 401,
        "tenant": None,
        "route": "unmatched",
        "duration_ms": 0,
    }
    assert KEY not in server.log() and "confidential-words" not in server.log()


def test_a_response_end_is_one_line_with_its_figures(start_server: StartServer) -> None:
    server = start_server("--log-format", "json", "--no-access-log")
    ok = httpx.post(f"{server.url}/v1/responses", json={"model": "m", "input": "hi"}).json()
    failed = httpx.post(f"{server.url}/v1/responses", json={"model": "m", "input": "[[fail]]"})
    server.stop()

    entries = json_lines(server)
    ends = {e["response_id"]: e for e in entries if e["logger"] == "recovery.responses"}
    assert ends[ok["id"]]["level"] == "info"
    assert ends[ok["id"]] | {"duration_ms": 0} == {
        **ends[ok["id"]],
        "response_status": "completed",
        "error_code": None,
        "steps": 0,
        "tool_calls": 0,
        "recoveries": 0,
        "duration_ms": 0,
    }
    failure = ends[failed.json()["id"]]
    assert failure["level"] == "warning" and failure["response_status"] == "failed"
    assert failure["error_code"] == failed.json()["error"]["code"]
    assert not [e for e in entries if e["logger"] == "server.access"]  # --no-access-log


@pytest.mark.parametrize(
    ("directives", "steps"),
    [
        pytest.param('[[call lookup {"city": "X"}]]', 1, id="one-step"),
        pytest.param(
            '[[call lookup {"city": "X"}]] [[next]] [[call lookup {"city": "Y"}]]',
            2,
            id="two-steps",
        ),
    ],
)
def test_the_end_line_counts_steps_and_tool_calls(
    start_server: StartServer, tmp_path: Any, directives: str, steps: int
) -> None:
    server = start_server(
        "--agent", "tests.agents.tool_agent:agent", env={"SIDE_EFFECTS_DIR": str(tmp_path)}
    )
    answer = httpx.post(f"{server.url}/v1/responses", json={"model": "m", "input": directives})
    ended = f"response {answer.json()['id']} ended completed"
    wait_until(lambda: ended in server.log(), "the end line")

    [line] = [line for line in server.log().splitlines() if ended in line]
    assert f": {steps} steps, {steps} tool calls, 0 recoveries" in line, line
