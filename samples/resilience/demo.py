"""Kill the server in the middle of a tool call, restart it, and finish the response.

    python samples/resilience/demo.py [--unsafe] [--workdir DIR]

It runs everything itself, offline: a server on 127.0.0.1 (a free port, its own SQLite
file, the tools agent of samples/tools), a background response that looks up a forecast
and emails it, a SIGKILL while the email tool waits for its relay's acknowledgement, a
restart, and the rest of the response streamed from the last event seen.

With --unsafe the email tool has no reconcile hook: the restarted server cannot tell
whether the email went out, so the response fails with tool_outcome_unknown instead.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from openai import OpenAI

REPO = Path(__file__).resolve().parents[2]
TERMINAL = {"response.completed", "response.failed", "response.incomplete"}
EMAIL = {"to": "ada@example.com", "subject": "Forecast", "body": "Sunny in Paris."}
PROMPT = (
    'Email Ada the Paris forecast. [[call lookup {"city": "Paris"}]] '
    f"[[next]] [[call send_email {json.dumps(EMAIL)}]]"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_server(
    workdir: Path, port: int, agent: str, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "server",
        "--host", "127.0.0.1", "--port", str(port),
        "--db", str(workdir / "responses.db"),
        "--agent", f"samples.tools.agent:{agent}",
        "--lease-ttl", "2",  # a dead server's responses are taken over after 2 s
        "--scan-interval", "0.5",
    ]  # fmt: skip
    with (workdir / "server.log").open("ab") as log:
        server = subprocess.Popen(
            command, cwd=REPO, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"the server exited with {server.returncode}; see {workdir / 'server.log'}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1):
                return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    sys.exit("the server did not become ready within 30 s")


class Printer:
    """Prints one line per event, runs of deltas folded into one line."""

    def __init__(self) -> None:
        self.last = -1  # the sequence number of the last event seen
        self.deltas: list[int] = []
        self.kind = ""

    def __call__(self, event: Any) -> None:
        self.last = event.sequence_number
        if event.type.endswith(".delta"):
            self.deltas.append(event.sequence_number)
            self.kind = event.type
            return
        self.flush()
        print(describe(event))

    def flush(self) -> None:
        if self.deltas:
            first, last, count = self.deltas[0], self.deltas[-1], len(self.deltas)
            span = f"#{first}" if count == 1 else f"#{first}-#{last}"
            print(f"  {span} {self.kind}" + (f" x{count}" if count > 1 else ""))
            self.deltas = []


def describe(event: Any) -> str:
    text = f"  #{event.sequence_number} {event.type}"
    item = getattr(event, "item", None)
    if event.type == "response.output_item.done" and item is not None:
        if item.type == "function_call":
            text += f"  call {item.name}"
        elif item.type == "function_call_output":
            text += f"  output {item.output}"
    if event.type in TERMINAL:
        response = event.response
        error = f" {response.error.code}" if response.error else ""
        text += f"  status={response.status}{error}"
    return text


def outbox_count(outbox: Path) -> int:
    return len(list(outbox.glob("*.json")))


def wait_for_email(outbox: Path) -> None:
    deadline = time.monotonic() + 30
    while outbox_count(outbox) == 0:
        if time.monotonic() > deadline:
            sys.exit("the email tool never wrote to the outbox")
        time.sleep(0.05)


def demo(workdir: Path, unsafe: bool) -> None:
    outbox = workdir / "outbox"
    agent = "unsafe_agent" if unsafe else "agent"
    port = free_port()
    env = {"OUTBOX_DIR": str(outbox), "PYTHONUNBUFFERED": "1"}
    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local", max_retries=0)

    # The relay takes a minute to acknowledge: plenty of time to pull the plug.
    first = start_server(workdir, port, agent, {**env, "EMAIL_ACK_SECONDS": "60"})
    print(f"server 1 started (pid {first.pid}) on port {port}")
    response = client.responses.create(model="embedded", input=PROMPT, background=True)
    print(f"created {response.id} ({response.status})")
    show = Printer()
    with client.responses.retrieve(response.id, stream=True) as stream:
        for event in stream:
            show(event)
            item = getattr(event, "item", None)
            if event.type == "response.output_item.done" and getattr(item, "name", "") == (
                "send_email"
            ):
                break  # the email tool starts now
    show.flush()
    wait_for_email(outbox)
    first.send_signal(signal.SIGKILL)
    first.wait()
    print(f"SIGKILL server 1 while send_email waits for its ack (outbox: {outbox_count(outbox)})")

    second = start_server(workdir, port, agent, env)
    print(f"server 2 started (pid {second.pid}); resuming the stream after event #{show.last}")
    try:
        resumed = client.responses.retrieve(response.id, stream=True, starting_after=show.last)
        with resumed as stream:
            for event in stream:
                show(event)
        show.flush()
        final = client.responses.retrieve(response.id)
        if final.status == "completed":
            print(f"answer: {final.output_text}")
        else:
            print(f"{final.status}: {final.error.message if final.error else ''}")
        print(f"emails in the outbox: {outbox_count(outbox)}")
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=30)
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--unsafe", action="store_true", help="host the tool without reconcile")
    parser.add_argument("--workdir", type=Path, help="keep the database, log and outbox here")
    args = parser.parse_args()
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        demo(args.workdir, args.unsafe)
    else:
        with tempfile.TemporaryDirectory() as workdir:
            demo(Path(workdir), args.unsafe)


if __name__ == "__main__":
    main()
