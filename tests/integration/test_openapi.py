"""The API's own OpenAPI document (issue 12, item 7): served, and held true by schemathesis.

`/openapi.json` (and `/v1/openapi.json`) is generated from the models that validate the
requests, so what the server accepts is what it documents. Schemathesis (its CLI, in a
process of its own: its pytest plugin does not run under pytest 9) drives every operation
of that document against a real server process, once with the embedded model and once
with an upstream (the fake one), in a bounded run: schema-valid and schema-violating
cases, boundary cases, methods the document does not list, and sequences that follow the
ids a create returns. Every response must be documented (status, content type, headers,
body schema: the error envelope for every error), no response is a 5xx, schema-violating
data is refused, schema-valid data is accepted or refused only for a rule the document
states in prose, and a refused create stores nothing (_schemathesis_hooks.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import StartServer
from tests.support.fake_upstream import FakeUpstream
from tests.support.server import REPO, ServerProcess

KEY = "sk-openapi"
AUTH = {"Authorization": f"Bearer {KEY}"}
LIMITS = ("--max-input-items", "7", "--max-tools", "5")

# A schemathesis.toml for one run: a fixed seed, few examples per operation (the run
# takes about 20 s), one worker (the store check counts rows between two requests).
CONFIG = """\
seed = 1207
workers = 1
headers = {{ Authorization = "Bearer {key}" }}
hooks = "tests.integration._schemathesis_hooks"
max-failures = 5

[generation]
max-examples = {examples}
database = "none"

[checks]
positive_data_acceptance.enabled = false

[cache]
enabled = false
"""


def test_the_document_is_served_under_both_prefixes(start_server: StartServer) -> None:
    server = start_server("--api-keys", f"t:{KEY}", *LIMITS)
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=30.0) as http:
        root = http.get("/openapi.json")
        v1 = http.get("/v1/openapi.json")
        assert http.get("/openapi.json", headers={"Authorization": ""}).status_code == 401
    assert root.status_code == v1.status_code == 200
    assert root.headers["content-type"] == "application/json"
    assert root.headers["x-request-id"]
    assert root.json() == v1.json()
    document = root.json()
    assert document["openapi"] == "3.1.0"
    assert {"/v1/responses", "/v1/conversations", "/healthz"} <= set(document["paths"])
    create = document["components"]["schemas"]["CreateResponse"]
    assert create["additionalProperties"] is False  # unknown parameters are refused
    assert create["properties"]["input"]["anyOf"][1]["maxItems"] == 7  # --max-input-items
    assert create["properties"]["tools"]["anyOf"][0]["maxItems"] == 5  # --max-tools
    assert "64 levels" in document["info"]["description"]


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()  # answers "ok" to every turn
    yield fake
    fake.stop()


def run_schemathesis(server: ServerProcess, folder: Path, phases: str) -> None:
    config = folder / "schemathesis.toml"
    config.write_text(CONFIG.format(key=KEY, examples=10))
    command = [
        *(sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "--no-color"),
        *("run", f"{server.url}/openapi.json", "--header", f"Authorization: Bearer {KEY}"),
        *("--phases", phases),
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "DR_TEST_DB": str(server.db)}
    env.pop("SCHEMATHESIS_HOOKS", None)
    done = subprocess.run(
        command, cwd=folder, env=env, capture_output=True, text=True, timeout=170, check=False
    )
    report = done.stdout[-20_000:] + done.stderr[-5_000:]
    assert done.returncode == 0, report
    document = httpx.get(f"{server.url}/openapi.json", headers=AUTH).json()
    # Every operation of the document, but the one schemathesis loaded the document from.
    operations = sum(len(methods) for methods in document["paths"].values()) - 1
    assert f"Tested: {operations}\n" in report, report


# The coverage phase (boundary values, every missing or mistyped field, methods the
# document does not list) takes most of the time and does not depend on the model: it
# runs once, with the embedded model. It takes about 35 s alone, longer beside another
# test worker (pytest-xdist) on a 2-core machine: its bounds leave room for that.
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("model", "phases"),
    [
        pytest.param(
            "embedded",
            "coverage,fuzzing,stateful",
            id="embedded",
        ),
        pytest.param("upstream", "fuzzing,stateful", id="upstream"),
    ],
)
def test_every_operation_keeps_to_the_document(
    model: str,
    phases: str,
    start_server: StartServer,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    args = ["--api-keys", f"t:{KEY}", *LIMITS]
    if model == "upstream":
        fake: FakeUpstream = request.getfixturevalue("upstream")
        args += ["--upstream-base-url", fake.url, "--model-retries", "0"]
    server = start_server(*args)
    run_schemathesis(server, tmp_path, phases)
