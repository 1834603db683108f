"""Every sample in samples/, run end to end as a user would: the server as a subprocess
on 127.0.0.1 where the sample needs one, the sample's script with this interpreter, and
assertions on what it printed and on its side effects (outbox files, ledgers)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import StartServer
from tests.support.fake_upstream import FakeUpstream, text, tool_calls
from tests.support.server import REPO

SAMPLES = REPO / "samples"
TOOLS_AGENT = ("--agent", "samples.tools.agent:agent")


def run_sample(script: str, *args: str, timeout: float = 45.0) -> str:
    """Run samples/<script> with this interpreter; its stdout (it must exit 0)."""
    done = subprocess.run(
        [sys.executable, str(SAMPLES / script), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{script} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout


def block(output: str, heading: str) -> str:
    """The lines of `output` from `heading:` up to the next unindented line."""
    lines = output.splitlines()
    start = lines.index(f"{heading}:")
    rest = []
    for line in lines[start + 1 :]:
        if not line.startswith(" "):
            break
        rest.append(line.strip())
    return "\n".join(rest)


@pytest.fixture
def fake_upstream() -> Iterator[FakeUpstream]:
    upstream = FakeUpstream().start()
    yield upstream
    upstream.stop()


def test_every_sample_has_a_readme_and_is_tested() -> None:
    folders = sorted(p.name for p in SAMPLES.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders == [
        "basic",
        "resilience",
        "steering",
        "structured",
        "tools",
        "upstream",
        "websocket",
        "workflow",
    ]
    tests = "".join(path.read_text() for path in Path(__file__).parent.glob("test_*.py"))
    for folder in folders:
        readme = (SAMPLES / folder / "README.md").read_text()
        assert "python samples/" in readme, f"{folder}/README.md says how to run it"
        assert f"def test_{folder}" in tests


def test_samples_import_only_public_names() -> None:
    private = re.compile(r"^\s*(from|import)\s+(recovery|server|store)\._|^\s*from\s+store\b", re.M)
    offenders = [
        str(path.relative_to(REPO))
        for path in SAMPLES.rglob("*.py")
        if private.search(path.read_text())
    ]
    assert offenders == []


def test_basic(start_server: StartServer) -> None:
    server = start_server()

    output = run_sample("basic/client.py", "--base-url", server.url)

    lines = output.splitlines()
    assert lines[0] == "foreground: completed: Hello durable world Hello durable world"
    assert lines[1] == "streaming: Streaming one word at a time Streaming one"
    assert re.fullmatch(r"streaming: completed after \d+ events", lines[2])
    assert re.fullmatch(
        r"background: queued( -> in_progress)? -> completed: Take your time( \w+){7}", lines[3]
    ), lines[3]


def test_structured(start_server: StartServer) -> None:
    server = start_server(*TOOLS_AGENT)

    output = run_sample("structured/client.py", "--base-url", server.url)

    assert block(output, "parse").splitlines() == [
        "item    function_call",
        "item    function_call_output",
        "item    message",
        "parsed  Forecast(city='', sunny=False, temperature_c=0)",
        "status  completed",
    ]
    assert block(output, "stream").splitlines() == [
        "parsed  Forecast(city='', sunny=False, temperature_c=0)",
        "events  True",
    ]


def test_tools(start_server: StartServer, tmp_path: Path) -> None:
    outbox = tmp_path / "outbox"
    server = start_server(*TOOLS_AGENT, env={"OUTBOX_DIR": str(outbox)})

    output = run_sample("tools/client.py", "--base-url", server.url)

    assert block(output, "server tools").splitlines() == [
        'call    lookup({"city":"Paris"})',
        'output  {"city": "Paris", "forecast": "sunny, 24C"}',
        'call    send_email({"to":"ada@example.com","subject":"Forecast",'
        '"body":"Sunny in Paris."})',
        "output  sent to ada@example.com",
        'message lookup -> {"city": "Paris", "forecast": "sunny, 24C"}; '
        "send_email -> sent to ada@example.com",
        "status  completed",
    ]
    assert block(output, "client tool, turn 1").splitlines() == [
        'call    get_time({"zone":"Asia/Tokyo"})',
        "status  completed",
    ]
    assert re.fullmatch(
        r"message get_time -> \d\d:\d\d\nstatus  completed", block(output, "client tool, turn 2")
    )
    [email] = list(outbox.iterdir())
    assert re.fullmatch(r"idem_[0-9a-f]{40}\.json", email.name)
    assert json.loads(email.read_text())["to"] == "ada@example.com"


def test_steering(start_server: StartServer) -> None:
    server = start_server()

    output = run_sample("steering/client.py", "--base-url", server.url)

    reject = block(output, "reject")
    assert "first turn:   completed after 40 streamed words" in reject
    assert "second turn:  refused, 409 conversation_locked" in reject
    assert reject.endswith("conversation: user(8 words), assistant(40 words)")

    enqueue = block(output, "enqueue")
    assert "first turn:   completed after 40 streamed words" in enqueue
    assert "second turn:  completed: Second message Second" in enqueue
    assert enqueue.endswith(
        "conversation: user(8 words), assistant(40 words), user(4 words), assistant(3 words)"
    )

    interrupt = block(output, "interrupt")
    partial = re.search(
        r"first turn:   incomplete \(steered\) after (\d+) streamed words", interrupt
    )
    assert partial is not None, interrupt
    assert 5 <= int(partial.group(1)) < 40
    assert "second turn:  completed: Second message Second" in interrupt
    assert re.search(
        r"conversation: user\(8 words\), assistant\((\d+) words\), user\(4 words\), "
        r"assistant\(3 words\)$",
        interrupt,
    )

    rollback = block(output, "rollback")
    assert re.search(r"first turn:   cancelled after \d+ streamed words", rollback)
    assert "second turn:  completed: Second message Second" in rollback
    assert rollback.endswith("conversation: user(4 words), assistant(3 words)")


def test_resilience(tmp_path: Path) -> None:
    output = run_sample("resilience/demo.py", "--workdir", str(tmp_path))

    assert "SIGKILL server 1 while send_email waits for its ack (outbox: 1)" in output
    resumed = re.search(r"resuming the stream after event #(\d+)\n  #(\d+) ", output)
    assert resumed is not None, output
    assert int(resumed.group(2)) == int(resumed.group(1)) + 1  # nothing lost, nothing repeated
    assert "status=completed" in output
    assert "send_email -> sent to ada@example.com (found in the outbox after a restart)" in output
    assert output.rstrip().endswith("emails in the outbox: 1")
    assert len(list((tmp_path / "outbox").glob("*.json"))) == 1


def test_resilience_without_reconcile_fails_closed(tmp_path: Path) -> None:
    output = run_sample("resilience/demo.py", "--unsafe", "--workdir", str(tmp_path))

    assert "status=failed tool_outcome_unknown" in output
    assert "failed: The outcome of tool 'send_email'" in output
    assert output.rstrip().endswith("emails in the outbox: 1")
    assert len(list((tmp_path / "outbox").glob("*.json"))) == 1


def test_workflow(tmp_path: Path) -> None:
    output = run_sample("workflow/demo.py", "--workdir", str(tmp_path))

    assert "server 1 died (exit code -9) as stage publish started" in output
    assert "response completed:" in output
    assert block(output, "ledger (who did each stage's work)").splitlines() == [
        "extract    ran 1x by server 1",
        "summarize  ran 1x by server 1",
        "publish    ran 1x by server 2",
    ]
    [report] = list((tmp_path / "reports").iterdir())
    assert report.read_text() == "Paris: sunny; London: rain; Tokyo: cloudy\n"
    assert f"message Published {report.name}: Paris: sunny; London: rain; Tokyo: cloudy" in output


def test_workflow_crash_in_an_at_most_once_stage_fails_closed(tmp_path: Path) -> None:
    output = run_sample("workflow/demo.py", "--crash-in", "summarize", "--workdir", str(tmp_path))

    assert "response failed:" in output
    assert "error   tool_outcome_unknown" in output
    assert block(output, "ledger (who did each stage's work)").splitlines() == [
        "extract    ran 1x by server 1",
        "summarize  ran 0x by nobody",
        "publish    ran 0x by nobody",
    ]


@pytest.mark.parametrize("by", [pytest.param("flags", id="flags"), pytest.param("env", id="env")])
def test_upstream(
    start_server: StartServer, fake_upstream: FakeUpstream, tmp_path: Path, by: str
) -> None:
    fake_upstream.push(
        tool_calls(("call_1", "lookup", '{"city":"Paris"}')),
        text("It is sunny and 24C in Paris today."),
    )
    settings = {"upstream-base-url": fake_upstream.url, "upstream-model": "local-model"}
    env = {"OUTBOX_DIR": str(tmp_path / "outbox")}
    if by == "flags":
        server = start_server(
            *TOOLS_AGENT, *(arg for k, v in settings.items() for arg in (f"--{k}", v)), env=env
        )
    else:
        env |= {f"DURABLE_RESPONSES_{k.upper().replace('-', '_')}": v for k, v in settings.items()}
        env["DURABLE_RESPONSES_AGENT"] = "samples.tools.agent:agent"
        server = start_server(env=env)

    output = run_sample("upstream/client.py", "--base-url", server.url)

    assert output.splitlines() == [
        '[server tool call] lookup({"city":"Paris"})',
        '[server tool output] {"city": "Paris", "forecast": "sunny, 24C"}',
        "It is sunny and 24C in Paris today.",
        "[completed, 14 in / 6 out]",
    ]
    first, second = fake_upstream.requests
    assert first["model"] == second["model"] == "local-model"
    assert {t["function"]["name"] for t in first["tools"]} == {"lookup", "send_email"}
    assert [m["role"] for m in second["messages"]][-2:] == ["assistant", "tool"]
