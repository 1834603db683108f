"""A poll (`GET /v1/responses/{id}` without a query string) is answered past the framework
(server/_poll.py); it must answer exactly as the route does, which still answers a poll
with a query string and every error."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.conftest import StartServer

KEYS = "acme:sk-acme-poll,umbrella:sk-umbrella-poll"
ACME = {"Authorization": "Bearer sk-acme-poll"}
UMBRELLA = {"Authorization": "Bearer sk-umbrella-poll"}
# Headers that differ between any two answers of one route.
PER_ANSWER = {"x-request-id", "date"}


def shown(answer: httpx.Response) -> tuple[int, dict[str, str], bytes]:
    headers = {k: v for k, v in answer.headers.items() if k not in PER_ANSWER}
    return answer.status_code, headers, answer.content


def access_lines(log: str) -> dict[str, dict[str, Any]]:
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    return {e["request_id"]: e for e in lines if e["logger"] == "server.access"}


@pytest.mark.parametrize("prefix", ["/v1", ""])
def test_a_poll_answers_as_the_route_does_found_missing_or_another_tenants(
    start_server: StartServer, prefix: str
) -> None:
    server = start_server("--api-keys", KEYS, "--log-format", "json")
    with httpx.Client(base_url=f"{server.url}{prefix}", timeout=30) as http:
        created = http.post(
            "/responses",
            headers=ACME,
            json={"model": "m", "input": "poll me", "background": True, "metadata": {"k": "v"}},
        )
        assert created.status_code == 200, created.text
        path = f"/responses/{created.json()['id']}"
        for _ in range(200):  # the embedded model's answer takes milliseconds
            polled = http.get(path, headers=ACME)
            if polled.json()["status"] == "completed":
                break
        assert polled.json()["status"] == "completed", polled.text

        # The route's own answer: a query string it accepts and ignores takes the route.
        routed = http.get(path, params={"include_obfuscation": "false"}, headers=ACME)
        assert shown(polled) == shown(routed)
        assert shown(polled)[1]["content-type"] == "application/json"
        assert json.loads(polled.content)["metadata"] == {"k": "v"}

        # Errors are the route's: a stranger's response and an unknown id are 404s alike.
        for who, missing in ((UMBRELLA, path), (ACME, "/responses/resp_nope")):
            refused = http.get(missing, headers=who)
            refused_routed = http.get(missing, params={"include_obfuscation": "1"}, headers=who)
            assert refused.status_code == 404, refused.text
            assert shown(refused) == shown(refused_routed)
            assert refused.json()["error"]["message"].endswith("not found."), refused.text
        assert http.get(path).status_code == 401  # no key: the edge refuses it first
        assert http.head(path, headers=ACME).status_code == 200  # HEAD is the route's
        assert http.get(f"{path}/", headers=ACME).status_code == 404  # not the poll's path
    server.stop()

    lines = access_lines(server.log())
    line = lines[polled.headers["x-request-id"]]
    assert (line["route"], line["status"], line["tenant"]) == ("get_response", 200, "acme")
    assert line["path"] == f"{prefix}{path}"
    assert lines[refused.headers["x-request-id"]]["route"] == "get_response"
