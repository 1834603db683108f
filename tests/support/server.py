"""A real server process on a loopback port, for integration and crash tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ServerProcess:
    """`python -m server` on 127.0.0.1 with its own SQLite file and log file."""

    def __init__(
        self,
        db: Path,
        *,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        log: Path | None = None,
    ) -> None:
        self.db = db
        self.args = args
        self.env = env or {}
        self.log_path = log or db.with_suffix(".log")
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, wait: bool = True, deadline: float = 30.0) -> ServerProcess:
        self.port = free_port()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "server",
                    "--port",
                    str(self.port),
                    "--db",
                    str(self.db),
                    *self.args,
                ],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        if wait:
            self.wait_healthy(deadline)
        return self

    def wait_healthy(self, deadline: float = 30.0) -> None:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"server exited with {self.proc.returncode} before it was healthy:\n"
                    + self.log()
                )
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"server not healthy after {deadline}s:\n{self.log()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Send `sig` and wait for the exit code (SIGKILL after `timeout`)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"server did not stop within {timeout}s:\n{self.log()}") from None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
