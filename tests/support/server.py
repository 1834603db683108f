"""A real server process on a loopback port, for integration and crash tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.support.stores import Location
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def healthy(url: str) -> bool:
    """Whether the server at `url` answers its liveness probe now."""
    try:
        return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
    except httpx.TransportError:
        return False


def wait_healthy(
    proc: subprocess.Popen[bytes], url: str, log: Callable[[], str], deadline: float = 30.0
) -> None:
    """Until the server process `proc` answers /healthz at `url`; fail at once, with its
    `log()`, if it exits first, and with its log after `deadline` seconds. It counts only
    once `proc`'s own log says it listens at `url`: another process that took the port
    (test runs side by side draw ports from one machine) must not pass for it."""
    port = url.rsplit(":", 1)[1]

    def listening() -> bool:  # on any host (a container binds 0.0.0.0), at this port
        lines = log().splitlines()
        return any("listening on http://" in line and f":{port} (" in line for line in lines)

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(
                f"server exited with {proc.returncode} before it was healthy:\n{log()}"
            )
        return listening() and healthy(url)

    wait_until(up, lambda: f"the server to be healthy:\n{log()}", deadline, interval=0.05)


class ServerProcess:
    """`python -m server` on 127.0.0.1 with its store (an SQLite file or a PostgreSQL
    URL, tests/support/stores.py) and its log file (beside an SQLite file by default)."""

    def __init__(
        self,
        db: Location,
        *,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        log: Path | None = None,
    ) -> None:
        if log is None and not isinstance(db, Path):
            raise ValueError("a server on a PostgreSQL URL needs a log path")
        self.db = db
        self.args = args
        self.env = env or {}
        self.log_path = log or Path(db).with_suffix(".log")
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, wait: bool = True, deadline: float = 30.0) -> ServerProcess:
        for _ in range(3):
            self._spawn()
            if not wait:
                return self
            try:
                self.wait_healthy(deadline)
                return self
            except AssertionError:
                # The free port was taken between `free_port` and the bind (by a test run
                # beside this one): another port, bounded. Anything else fails the test.
                if not self._port_taken():
                    raise
        raise AssertionError(f"no free port could be bound three times:\n{self.log()}")

    def _port_taken(self) -> bool:
        assert self.proc is not None
        return self.proc.poll() is not None and f"cannot listen on 127.0.0.1:{self.port}" in (
            self.log()
        )

    def _spawn(self) -> None:
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

    def wait_healthy(self, deadline: float = 30.0) -> None:
        assert self.proc is not None
        wait_healthy(self.proc, self.url, self.log, deadline)

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

    def freeze(self) -> None:
        """SIGSTOP: the process stops where it is, holding what it holds, so that what
        the store says it has in flight stays true until the kill."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
