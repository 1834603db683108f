"""Crash a workflow in its last stage, restart the server, and watch it resume there.

    python samples/workflow/demo.py [--crash-in extract|summarize|publish] [--workdir DIR]

It runs everything itself, offline: a server on 127.0.0.1 (a free port, its own SQLite
file) hosting samples/workflow/pipeline.py with CRASH_IN_STAGE set, a background
response that the crash interrupts, a second server on the same database without the
crash, and the ledger of which server ran each stage.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from openai import OpenAI

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_server(workdir: Path, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "server",
        "--host", "127.0.0.1", "--port", str(port),
        "--db", str(workdir / "responses.db"),
        "--agent", "samples.workflow.pipeline:report",
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


def demo(workdir: Path, crash_in: str) -> None:
    port = free_port()
    env = {"WORKFLOW_DIR": str(workdir), "PYTHONUNBUFFERED": "1"}
    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="local", max_retries=0)
    servers: dict[str, str] = {}

    first = start_server(workdir, port, {**env, "CRASH_IN_STAGE": crash_in})
    servers[str(first.pid)] = "server 1"
    print(f"server 1 started (pid {first.pid}) with CRASH_IN_STAGE={crash_in}")
    response = client.responses.create(
        model="workflow", input="Paris London Tokyo", background=True
    )
    print(f"created {response.id} ({response.status})")
    code = first.wait(timeout=30)
    print(f"server 1 died (exit code {code}) as stage {crash_in} started")

    second = start_server(workdir, port, env)
    servers[str(second.pid)] = "server 2"
    print(f"server 2 started (pid {second.pid}) on the same database")
    try:
        deadline = time.monotonic() + 30
        while response.status in ("queued", "in_progress") and time.monotonic() < deadline:
            time.sleep(0.2)
            response = client.responses.retrieve(response.id)
        print(f"response {response.status}:")
        for item in response.output:
            if item.type == "function_call":
                print(f"  step    {item.name}")
            elif item.type == "function_call_output":
                print(f"  result  {item.output}")
            elif item.type == "message":
                print(f"  message {''.join(getattr(c, 'text', '') for c in item.content)}")
            else:
                print(f"  {item.type}")
        if response.error is not None:
            print(f"  error   {response.error.code}: {response.error.message}")
    finally:
        second.terminate()
        second.wait(timeout=30)
        client.close()
    print("ledger (who did each stage's work):")
    ledger = (workdir / "ledger.log").read_text().split("\n")
    for stage in ("extract", "summarize", "publish"):
        runs = [servers.get(line.split()[1], "?") for line in ledger if line.startswith(stage)]
        print(f"  {stage:<10} ran {len(runs)}x by {', '.join(runs) or 'nobody'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--crash-in", choices=("extract", "summarize", "publish"), default="publish"
    )
    parser.add_argument("--workdir", type=Path, help="keep the database, log and ledger here")
    args = parser.parse_args()
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        demo(args.workdir, args.crash_in)
    else:
        with tempfile.TemporaryDirectory() as workdir:
            demo(Path(workdir), args.crash_in)


if __name__ == "__main__":
    main()
