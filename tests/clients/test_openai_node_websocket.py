"""The openai npm package (pinned in tests/clients/openai_node/) in WebSocket mode (issue
17): a response created over the socket and steered once, after three words; the
response ends steered, and its successor, holding the steer's input, streams on the same
lane. Version 7.55.0 has no `client.responses.connect()` as the Python SDK does; its
socket is `ResponsesWS` (`openai/resources/responses/ws`, on the `ws` package).

Skipped without Node.js and npm, or when the pinned packages cannot be installed (no
registry in reach).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.clients._node import installed, run_script
from tests.support.server import ServerProcess


@pytest.fixture(scope="session")
def openai_node(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return installed(tmp_path_factory, "openai_node", "the openai npm package")


def test_a_response_created_and_steered_over_the_node_socket(
    openai_node: Path, server: ServerProcess, http: httpx.Client
) -> None:
    run = run_script(openai_node, "steer.mjs", server.url)

    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["previous"] == seen["target"] != seen["successor"]
    assert seen["text"] == "from node from"  # the steer's words, three of them
    types = [event["type"] for event in seen["events"]]
    assert "response.steer.accepted" in types
    assert types.count("response.created") == 2
    assert all(event["stream_id"] == "node" for event in seen["events"])
    target = http.get(f"/v1/responses/{seen['target']}").json()
    assert target["status"] == "incomplete"
    assert target["incomplete_details"] == {"reason": "steered"}
