"""`python -m server`: start-up, settings from flags and environment, clean stops, and
clear errors instead of tracebacks."""

from __future__ import annotations

import math
import os
import re
import signal
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import httpx
import pytest

from recovery import Agent, Tool, Workflow, WorkflowContext
from server import Settings
from server._cli import (
    SHUTDOWN_MARGIN,
    StartupError,
    check_writable,
    hypercorn_config,
    shutdown_timeout,
)
from tests.conftest import StartServer, make_client
from tests.support.server import REPO, free_port, wait_healthy


def run_server(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "server", "--port", "1", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_it_logs_where_it_listens_and_stops_cleanly_on_sigterm(start_server: StartServer) -> None:
    server = start_server()

    assert server.stop(signal.SIGTERM) == 0
    log = server.log()
    assert f"listening on http://127.0.0.1:{server.port}" in log
    assert f"store: {server.db}" in log and "model: embedded" in log
    assert "stopped" in log and "Traceback" not in log


def test_it_stops_cleanly_on_sigint(start_server: StartServer) -> None:
    server = start_server()

    assert server.stop(signal.SIGINT) == 0
    assert "Traceback" not in server.log()


def test_settings_come_from_the_environment_and_flags_win(start_server: StartServer) -> None:
    env = {"DURABLE_RESPONSES_EMBEDDED_WORDS": "3"}
    from_env = start_server(env=env)
    flag_wins = start_server("--embedded-words", "5", env=env)

    with make_client(from_env.url) as sdk:
        assert len(sdk.responses.create(model="m", input="a b c d e f").output_text.split()) == 3
    with make_client(flag_wins.url) as sdk:
        assert len(sdk.responses.create(model="m", input="a b c d e f").output_text.split()) == 5


def test_a_corrupt_database_is_a_clear_start_up_error(tmp_path: Path) -> None:
    db = tmp_path / "broken.db"
    db.write_bytes(b"definitely not sqlite " * 200)

    result = run_server("--db", str(db))

    assert result.returncode == 2
    assert "cannot open the store" in result.stderr and str(db) in result.stderr
    assert "Traceback" not in result.stderr


def test_a_bad_agent_spec_is_a_clear_start_up_error(tmp_path: Path) -> None:
    result = run_server("--db", str(tmp_path / "x.db"), "--agent", "no_such_module:agent")

    assert result.returncode == 2
    assert "cannot import the agent module 'no_such_module'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_custom_agent_is_loaded_with_the_agent_flag(
    start_server: StartServer, tmp_path: Path
) -> None:
    (tmp_path / "my_agent.py").write_text(
        "from recovery import Agent, TextDelta, Usage\n"
        "class Shouty:\n"
        "    name = 'shouty'\n"
        "    async def stream(self, request):\n"
        "        yield TextDelta(request.input[-1]['content'][0]['text'].upper())\n"
        "        yield Usage(input_tokens=1, output_tokens=1)\n"
        "agent = Agent(model=Shouty())\n"
    )
    server = start_server("--agent", "my_agent:agent", env={"PYTHONPATH": str(tmp_path)})

    with make_client(server.url) as sdk:
        assert sdk.responses.create(model="m", input="quiet please").output_text == "QUIET PLEASE"
    assert "agent: my_agent:agent" in server.log()


def test_health_answers_while_serving(start_server: StartServer) -> None:
    server = start_server()

    assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{server.url}/readyz").status_code == 200


def console_script() -> str:
    """`durable-responses` as installed beside this interpreter (what the image runs)."""
    return str(Path(sys.executable).parent / "durable-responses")


def test_help_names_each_flags_environment_variable_and_no_python_types() -> None:
    result = run_server("--help")

    assert result.returncode == 0
    options = " ".join(result.stdout.split("options:")[1].split())  # help lines rejoined
    for name in Settings.model_fields:
        flag, env = "--" + name.replace("_", "-"), f"DURABLE_RESPONSES_{name.upper()}"
        assert re.search(rf" {flag}\b[^\[]*\[{env}; default: [^\]]+\]", options), name
    types = r"\b(str|int|float|bool|Path|SecretStr|null|None|Literal)\b|\{str"
    assert not re.search(types, result.stdout), re.search(types, result.stdout)


def test_version_prints_the_installed_version() -> None:
    result = run_server("--version")

    assert result.returncode == 0
    assert result.stdout.strip() == f"durable-responses {metadata.version('durable-responses')}"


def test_a_port_in_use_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        result = run_server("--db", str(tmp_path / "x.db"), "--port", str(port))

    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()[-1:]
    assert line == (
        f"durable-responses: cannot listen on 127.0.0.1:{port}: the address is already in "
        "use (another server? choose another port)"
    )
    assert "Traceback" not in result.stderr and "Running on" not in result.stderr


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("localhost:8001/v1", id="no-scheme"),
        pytest.param("ftp://localhost/v1", id="not-http"),
        pytest.param("http:///v1", id="no-host"),
        pytest.param("http://localhost:port/v1", id="bad-port"),
    ],
)
def test_a_malformed_upstream_url_is_refused_at_start_up(tmp_path: Path, url: str) -> None:
    by_flag = run_server("--db", str(tmp_path / "x.db"), "--upstream-base-url", url)
    by_env = run_server(
        "--db",
        str(tmp_path / "x.db"),
        env={**os.environ, "DURABLE_RESPONSES_UPSTREAM_BASE_URL": url},
    )

    for result in (by_flag, by_env):
        assert result.returncode == 2
        assert result.stderr.startswith(
            "durable-responses: invalid settings: --upstream-base-url "
            "(DURABLE_RESPONSES_UPSTREAM_BASE_URL): "
        )
        assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1


def test_an_empty_environment_variable_counts_as_unset(start_server: StartServer) -> None:
    server = start_server(
        env={"DURABLE_RESPONSES_UPSTREAM_BASE_URL": "", "DURABLE_RESPONSES_AGENT": ""}
    )

    assert "model: embedded, agent: built-in" in server.log()


SHOUTY = (
    "from recovery import Agent, TextDelta, Usage\n"
    "class Shouty:\n"
    "    name = 'shouty'\n"
    "    async def stream(self, request):\n"
    "        yield TextDelta(request.input[-1]['content'][0]['text'].upper())\n"
    "        yield Usage(input_tokens=1, output_tokens=1)\n"
    "agent = Agent(model=Shouty())\n"
)


def serve_until_answered(command: list[str], cwd: Path, env: dict[str, str], log_path: Path) -> str:
    """Run a server command in `cwd`, ask it one question, stop it; its answer."""
    port = free_port()
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [*command, "--port", str(port)], cwd=cwd, env=env, stdout=log_file, stderr=log_file
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(proc, url, log_path.read_text)
        with make_client(url) as sdk:
            return sdk.responses.create(model="m", input="quiet please").output_text
    finally:
        proc.terminate()
        assert proc.wait(30) == 0, log_path.read_text()


def test_the_console_script_imports_an_agent_from_the_working_directory(tmp_path: Path) -> None:
    """Regression (issue 13): `durable-responses --agent my_agent:agent` could not import
    my_agent.py from the working directory (a console script does not search it, unlike
    `python -m`); the working directory is now searched, as uvicorn does."""
    (tmp_path / "my_agent.py").write_text(SHOUTY)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    command = [console_script(), "--agent", "my_agent:agent", "--db", str(tmp_path / "x.db")]

    assert serve_until_answered(command, tmp_path, env, tmp_path / "log") == "QUIET PLEASE"


def test_agent_path_folders_are_searched_first(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "my_agent.py").write_text(SHOUTY)
    env = {**os.environ, "DURABLE_RESPONSES_AGENT_PATH": str(agents)}
    command = [console_script(), "--agent", "my_agent:agent", "--db", str(tmp_path / "x.db")]

    assert serve_until_answered(command, REPO, env, tmp_path / "log") == "QUIET PLEASE"


def test_a_missing_agent_path_folder_is_a_clear_start_up_error(tmp_path: Path) -> None:
    result = run_server(
        "--db", str(tmp_path / "x.db"), "--agent", "a:b", "--agent-path", str(tmp_path / "none")
    )

    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"durable-responses: --agent-path: {tmp_path / 'none'} is not a folder"
    )


def test_a_store_folder_it_cannot_write_names_the_uids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root (the test runner) every folder is writable, so the check is asked here
    as the image's user would meet it: a bind mount owned by the host's user."""
    monkeypatch.setattr(os, "access", lambda path, mode: False)

    with pytest.raises(StartupError) as refused:
        check_writable(tmp_path / "responses.db")

    message = str(refused.value)
    assert f"cannot write {tmp_path} (owned by uid {tmp_path.stat().st_uid})" in message
    assert f"as uid {os.getuid()}" in message and "chown" in message and "--user" in message


def test_hypercorn_waits_for_the_grace_and_the_longest_tool_timeout() -> None:
    """Hypercorn gives the app 60 s to shut down by default; the runtime waits for the
    grace period and then for running tool bodies, so its limit must cover both."""

    def tools(*timeouts: float | None) -> Agent:
        return Agent(
            tools=[Tool(lambda: None, name=f"t{i}", timeout=t) for i, t in enumerate(timeouts)]
        )

    settings = Settings(shutdown_grace=30)

    assert shutdown_timeout(settings, Agent()) == 30 + SHUTDOWN_MARGIN
    assert shutdown_timeout(settings, tools(5, 120)) == 30 + 120 + SHUTDOWN_MARGIN
    assert shutdown_timeout(settings, tools(5, None)) == math.inf  # waited for as long as it runs
    assert hypercorn_config(settings, tools(90)).shutdown_timeout == 30 + 90 + SHUTDOWN_MARGIN
    assert hypercorn_config(settings, tools(90)).shutdown_timeout > 60


def test_hypercorn_waits_for_a_workflows_steps_as_long_as_they_run() -> None:
    """A workflow's steps have no timeout and are waited for at shutdown: a finite limit
    would have asyncio cancel a step still running (its entry left `claimed`) and the
    task waiting for a thread step while the thread runs on."""

    async def handler(ctx: WorkflowContext) -> None:
        return None

    settings = Settings(shutdown_grace=30)
    flow = Workflow(handler)

    assert shutdown_timeout(settings, flow) == math.inf
    assert shutdown_timeout(settings, Agent(), flow) == math.inf  # a named workflow too
    assert hypercorn_config(settings, flow).shutdown_timeout == math.inf
