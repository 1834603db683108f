"""The Dockerfile, checked without Docker: its settings, and its exact entry point and
health check run here as the container would run them; and the two ways to ship an
agent (a derived image, a mounted folder with compose.yaml), run the same way with a
temporary folder standing in for the image's agent folder."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import httpx
import yaml

from server import Settings
from server._cli import SHUTDOWN_MARGIN
from tests.support.server import REPO, free_port, wait_healthy
from tests.support.waiting import wait_until

DOCKERFILE = (REPO / "Dockerfile").read_text()
COMPOSE = yaml.safe_load((REPO / "compose.yaml").read_text())
VERSION = metadata.version("durable-responses")

# How the README says to ship an agent in an image of its own (keep the two the same).
DERIVED = f"""\
FROM durable-responses:{VERSION}
# Your agent's own dependencies, if any, installed as root, then back to the image's user.
USER 0:0
RUN pip install --no-cache-dir tenacity==9.0.0
USER 10001:10001
COPY my_agent.py /agents/
ENV DURABLE_RESPONSES_AGENT=my_agent:agent
"""

MY_AGENT = """\
from recovery import Agent, TextDelta


class Echo:
    name = "echo"

    async def stream(self, request):
        yield TextDelta("my agent says hi")


agent = Agent(model=Echo())
"""


def instruction(name: str, dockerfile: str = DOCKERFILE) -> list[str]:
    """Every value of one instruction, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", dockerfile)
    return [m.group(1).strip() for m in re.finditer(rf"^{name}\s+(.+)$", joined, re.MULTILINE)]


def image_env(dockerfile: str = DOCKERFILE) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in instruction("ENV", dockerfile):
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
    assert instruction("USER") == ["10001:10001"]  # the uid a bind mount must let write
    assert "uid:gid 10001:10001" in DOCKERFILE and "chown 10001:10001" in DOCKERFILE
    assert env["DURABLE_RESPONSES_AGENT_PATH"] == "/agents"
    assert instruction("EXPOSE") == [f"8000 {env['DURABLE_RESPONSES_METRICS_PORT']}"]
    setup = instruction("RUN")[-1]
    assert "mkdir -p /data /agents" in setup and "chown app:app /data" in setup


def test_every_environment_variable_is_a_setting() -> None:
    settings = {f"DURABLE_RESPONSES_{name.upper()}" for name in Settings.model_fields}
    service = COMPOSE["services"]["durable-responses"]
    for env in (image_env(), image_env(DERIVED), service["environment"]):
        assert {k for k in env if k.startswith("DURABLE_")} <= settings


def run_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The image's environment, then `extra`, on loopback ports with a temporary /data and
    /agents."""
    env = {**os.environ, **image_env(), **extra}
    env["DURABLE_RESPONSES_HOST"] = "127.0.0.1"  # tests talk to loopback only
    env["DURABLE_RESPONSES_PORT"] = str(free_port())
    env["DURABLE_RESPONSES_METRICS_PORT"] = str(free_port())
    env["DURABLE_RESPONSES_DB"] = str(tmp_path / "data" / "responses.db")
    agents = tmp_path / "agents"
    agents.mkdir(exist_ok=True)
    env["DURABLE_RESPONSES_AGENT_PATH"] = str(agents)
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

        def health_check_passes() -> bool:
            assert proc.poll() is None, log_path.read_text()
            return subprocess.run(health, env=env, capture_output=True).returncode == 0

        wait_until(health_check_passes, "the image's health check to pass", interval=0.1)
        assert (
            httpx.post(f"{url}/v1/responses", json={"model": "m", "input": "x"}).status_code == 401
        )
        answer = httpx.post(
            f"{url}/v1/responses",
            json={"model": "m", "input": "hello"},
            headers={"Authorization": "Bearer sk-test"},
        )
        assert answer.json()["status"] == "completed"
        assert httpx.get(f"{url}/readyz").status_code in (200, 503)  # probes need no key
        metrics = httpx.get(f"http://127.0.0.1:{env['DURABLE_RESPONSES_METRICS_PORT']}/metrics")
        assert "durable_responses_responses_finished_total" in metrics.text  # and no key
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
    log = log_path.read_text()
    assert all(json.loads(line)["level"] for line in log.splitlines() if line.strip())
    assert "sk-test" not in log


def serve_one_answer(env: dict[str, str], cwd: Path) -> str:
    """Run the image's entry point with `env` in `cwd`, ask one question, stop it."""
    url = f"http://127.0.0.1:{env['DURABLE_RESPONSES_PORT']}"
    headers = {"Authorization": "Bearer sk-test"}
    log_path = cwd / "server.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            entrypoint(), env=env, cwd=cwd, stdout=log_file, stderr=subprocess.STDOUT
        )
    try:
        wait_healthy(proc, url, log_path.read_text)
        answer = httpx.post(
            f"{url}/v1/responses", json={"model": "m", "input": "hello"}, headers=headers
        )
        return str(answer.json()["output"][0]["content"][0]["text"])
    finally:
        proc.terminate()
        assert proc.wait(30) == 0, log_path.read_text()


def test_a_derived_image_ships_an_agent(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(DERIVED)
    lint = subprocess.run(
        [str(Path(sys.executable).parent / "hadolint"), str(dockerfile)],
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert instruction("USER", DERIVED)[-1] == instruction("USER")[-1]  # back to the image's
    [copy] = instruction("COPY", DERIVED)
    assert copy == f"my_agent.py {image_env()['DURABLE_RESPONSES_AGENT_PATH']}/"
    env = {**run_env(tmp_path, DURABLE_RESPONSES_API_KEYS="t:sk-test"), **image_env(DERIVED)}
    (tmp_path / "agents" / "my_agent.py").write_text(MY_AGENT)  # what COPY put in /agents
    workdir = tmp_path / "app"  # not the agent's folder, as WORKDIR /app is not
    workdir.mkdir()

    assert serve_one_answer(env, workdir) == "my agent says hi"


def compose_environment(values: dict[str, str]) -> dict[str, str]:
    """compose.yaml's `environment`, interpolated from `values` as compose does."""

    def interpolate(value: str) -> str:
        pattern = r"\$\{(\w+):-([^}]*)\}"
        return re.sub(pattern, lambda m: values.get(m.group(1)) or m.group(2), str(value))

    service = COMPOSE["services"]["durable-responses"]
    return {key: interpolate(value) for key, value in service["environment"].items()}


def test_compose_shows_the_upstream_the_key_file_the_metrics_port_and_the_agent_mount() -> None:
    service = COMPOSE["services"]["durable-responses"]
    env = image_env()
    assert service["image"] == f"durable-responses:{VERSION}"  # what a derived image is FROM
    assert service["env_file"] == ["durable-responses.env"]
    assert "DURABLE_RESPONSES_UPSTREAM_API_KEY=" in (REPO / "compose.yaml").read_text()
    assert "DURABLE_RESPONSES_API_KEYS" not in service["environment"]  # secrets: env file
    assert {"DURABLE_RESPONSES_UPSTREAM_BASE_URL", "DURABLE_RESPONSES_AGENT"} <= set(
        service["environment"]
    )
    assert f"./agents:{env['DURABLE_RESPONSES_AGENT_PATH']}:ro" in service["volumes"]
    metrics = env["DURABLE_RESPONSES_METRICS_PORT"]
    assert service["ports"] == ["8000:8000", f"127.0.0.1:{metrics}:{metrics}"]
    grace = Settings.model_fields["shutdown_grace"].default
    assert float(service["stop_grace_period"].removesuffix("s")) >= 2 * grace + SHUTDOWN_MARGIN


def test_compose_with_nothing_set_runs_the_built_in_agent(tmp_path: Path) -> None:
    env = {**run_env(tmp_path, DURABLE_RESPONSES_API_KEYS="t:sk-test"), **compose_environment({})}

    assert serve_one_answer(env, tmp_path).startswith("hello")  # the embedded model's echo


def test_compose_runs_an_agent_from_the_mounted_folder(tmp_path: Path) -> None:
    env = run_env(tmp_path, DURABLE_RESPONSES_API_KEYS="t:sk-test")
    env |= compose_environment({"AGENT": "my_agent:agent"})
    (tmp_path / "agents" / "my_agent.py").write_text(MY_AGENT)  # the ./agents bind mount

    assert serve_one_answer(env, tmp_path) == "my agent says hi"


def test_the_cluster_profile_balances_every_replica_on_one_postgresql() -> None:
    services = COMPOSE["services"]
    replicas = sorted(n for n, s in services.items() if n.startswith("replica-"))
    assert len(replicas) >= 2
    assert all(services[n]["profiles"] == ["cluster"] for n in [*replicas, "postgres", "lb"])
    assert all("postgres" in services[n]["depends_on"] for n in replicas)
    main = services["durable-responses"]
    # Built as the default service is, so a fresh clone needs no build of its own first.
    assert all(services[n].get("build") == main["build"] for n in replicas)
    assert all(services[n]["image"] == main["image"] for n in replicas)
    haproxy = (REPO / "deploy" / "haproxy.cfg").read_text()
    balanced = re.findall(r"^\s*server (\S+) (\S+):8000 check", haproxy, re.MULTILINE)
    assert sorted(host for _, host in balanced) == replicas
    assert "uri /readyz" in haproxy  # a replica whose store is unreachable gets no requests
    mount = "./deploy/haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro"
    assert mount in services["lb"]["volumes"]
