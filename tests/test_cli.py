"""`python -m server`: start-up, settings from flags and environment, clean stops, and
clear errors instead of tracebacks."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import StartServer, make_client
from tests.support.server import REPO


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
