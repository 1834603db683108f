"""Processes the orchestrator starts: servers on 127.0.0.1 (free ports, own SQLite
files) and the ceiling app, plus what /proc says about them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def rss_bytes(pid: int) -> int:
    """Resident memory of `pid` (VmRSS in /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of `pid` so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of `pid` and its live children (PostgreSQL's postmaster and backends)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        child = int(stat.parent.name)
        if child == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def set_database(url: str, settings: dict[str, str]) -> None:
    """`ALTER DATABASE <url's database> SET name = value` for each setting (new
    connections take them)."""
    import asyncio

    import asyncpg

    async def alter() -> None:
        conn = await asyncpg.connect(url)
        try:
            for name, value in settings.items():
                await conn.execute(f'ALTER DATABASE "{url.rsplit("/", 1)[1]}" SET {name} = {value}')
        finally:
            await conn.close()

    asyncio.run(alter())


class Proc:
    """A server-like child process answering GET /healthz on 127.0.0.1:port."""

    def __init__(self, argv: list[str], log: Path, name: str | None = None) -> None:
        self.argv = argv
        self.log_path = log
        self.name = name or argv[2]  # `python -m <name>` unless given
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.healthy_at = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, deadline: float = 30.0) -> Proc:
        self.port = free_port()
        argv = [a.replace("{port}", str(self.port)) for a in self.argv]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.started_at = time.monotonic()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        self.wait_healthy(deadline)
        return self

    def wait_healthy(self, deadline: float) -> None:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited early; see {self.log_path}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    self.healthy_at = time.monotonic()
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} not healthy after {deadline}s; see {self.log_path}")

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()


def server(db: Path | str, *args: str, log: Path | None = None) -> Proc:
    """`python -m server` on a free port with its own store (not started): a SQLite file,
    or a PostgreSQL URL (then `log` is required); without the access log, as the ceiling
    logs nothing per request either."""
    argv = [
        sys.executable,
        "-m",
        "server",
        "--port",
        "{port}",
        "--db",
        str(db),
        "--no-access-log",
        *args,
    ]
    if log is None:
        assert isinstance(db, Path)
        log = db.with_suffix(".log")
    return Proc(argv, log)


def ceiling(workdir: Path) -> Proc:
    """The trivial Starlette app on the same Hypercorn settings (not started)."""
    argv = [sys.executable, "-m", "bench._ceiling", "--port", "{port}"]
    return Proc(argv, workdir / "ceiling.log")
