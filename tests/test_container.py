"""The Dockerfile, checked without Docker: its settings, and its exact entry point and
health check run here as the container would run them."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.server import REPO, free_port

DOCKERFILE = (REPO / "Dockerfile").read_text()


def instruction(name: str) -> list[str]:
    """Every value of one instruction, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [m.group(1).strip() for m in re.finditer(rf"^{name}\s+(.+)$", joined, re.MULTILINE)]


def image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for line in instruction("ENV"):
        for pair in shlex.split(line):
            key, _, value = pair.partition("=")
            env[key] = value
    return env


def entrypoint() -> list[str]:
    command: list[str] = json.loads(instruction("ENTRYPOINT")[0])
    return [str(Path(sys.executable).parent / command[0]), *command[1:]]


def test_the_image_is_hardened_as_documented() -> None:
    env = image_env()
    assert instruction("FROM")[0].startswith("python:3.11-slim")
    assert re.fullmatch(r"\d+:\d+", instruction("USER")[0])  # non-root, numeric
    assert instruction("VOLUME") == ["/data"] and env["DURABLE_RESPONSES_DB"].startswith("/data/")
    assert instruction("STOPSIGNAL") == ["SIGTERM"]
    assert instruction("ENTRYPOINT")[0].startswith("[")  # exec form: the server is PID 1
    assert env["DURABLE_RESPONSES_HOST"] == "0.0.0.0"
    assert env["DURABLE_RESPONSES_REQUIRE_KEYS"] == "true"
    assert "requirements.lock" in DOCKERFILE.split("COPY server")[0]  # deps layer first


def run_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, **image_env(), **extra}
    env["DURABLE_RESPONSES_HOST"] = "127.0.0.1"  # tests talk to loopback only
    env["DURABLE_RESPONSES_PORT"] = str(free_port())
    env["DURABLE_RESPONSES_DB"] = str(tmp_path / "data" / "responses.db")
    return env


def test_the_entry_point_refuses_to_start_open(tmp_path: Path) -> None:
    result = subprocess.run(
        entrypoint(), env=run_env(tmp_path), capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 2
    assert "no API keys are configured" in result.stderr


def test_the_entry_point_serves_and_its_health_check_passes(tmp_path: Path) -> None:
    env = run_env(tmp_path, DURABLE_RESPONSES_API_KEYS="ops:sk-test")
    url = f"http://127.0.0.1:{env['DURABLE_RESPONSES_PORT']}"
    health = json.loads(re.search(r"CMD (\[.+\])", instruction("HEALTHCHECK")[0]).group(1))  # type: ignore[union-attr]
    health[0] = sys.executable
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(entrypoint(), env=env, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while subprocess.run(health, env=env, capture_output=True).returncode != 0:
            assert proc.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "never healthy"
            time.sleep(0.1)
        assert (
            httpx.post(f"{url}/v1/responses", json={"model": "m", "input": "x"}).status_code == 401
        )
        answer = httpx.post(
            f"{url}/v1/responses",
            json={"model": "m", "input": "hello"},
            headers={"Authorization": "Bearer sk-test"},
        )
        assert answer.json()["status"] == "completed"
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
    log = log_path.read_text()
    assert all(json.loads(line)["level"] for line in log.splitlines() if line.strip())
    assert "sk-test" not in log
