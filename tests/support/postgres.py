"""A throwaway PostgreSQL server for tests and the bench.

It runs the machine's own PostgreSQL binaries (`initdb`, `pg_ctl`) in a temporary
directory, listening on a free loopback port only, and is removed afterwards. initdb
refuses to run as root, so under root the cluster runs as the `postgres` system user (or
`nobody`), which owns the temporary directory.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

INSTALL_HINT = (
    "PostgreSQL server binaries (initdb, pg_ctl) were not found. Install them, for example "
    "`apt-get install -y postgresql` on Debian or Ubuntu, or put their directory on PATH "
    "or in DURABLE_TEST_PG_BIN."
)


def find_bindir() -> Path | None:
    """The directory holding initdb and pg_ctl: DURABLE_TEST_PG_BIN, PATH, then Debian's."""
    explicit = os.environ.get("DURABLE_TEST_PG_BIN")
    candidates = [explicit] if explicit else []
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).resolve().parent))
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for candidate in candidates:
        if (
            candidate
            and (Path(candidate) / "initdb").exists()
            and (Path(candidate) / "pg_ctl").exists()
        ):
            return Path(candidate)
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _unprivileged_user() -> pwd.struct_passwd | None:
    """The user to run the cluster as when we are root (None when we are not root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root, and neither a `postgres` nor a `nobody` user exists")


class ThrowawayPostgres:
    """One PostgreSQL cluster in a temporary directory. Use `start()` and `stop()`."""

    user = "durable"

    def __init__(self, bindir: Path, *, durable: bool = False) -> None:
        self.bindir = bindir
        # Tests kill our server, never PostgreSQL, so fsync buys them nothing; the bench
        # asks for `durable=True` so that its commits cost what they cost in production.
        self.durable = durable
        self.port = 0
        self.root = Path(tempfile.mkdtemp(prefix="durable-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._as_user = _unprivileged_user()

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def database_url(self, name: str) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{name}"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args),
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=self._demote(),
            env={**os.environ, "LC_ALL": "C"},
        )

    def _demote(self) -> Callable[[], None] | None:
        user = self._as_user
        if user is None:
            return None

        def demote() -> None:
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)

        return demote

    def start(self) -> None:
        if self._as_user is not None:
            os.chown(self.root, self._as_user.pw_uid, self._as_user.pw_gid)
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            self.user,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",
        )
        settings = [
            "listen_addresses = '127.0.0.1'",
            f"unix_socket_directories = '{self.root}'",
            "max_connections = 300",
            "shared_buffers = 128MB",
        ]
        if not self.durable:
            settings += ["fsync = off", "full_page_writes = off"]
        with open(self.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write("\n".join(settings) + "\n")
        for attempt in range(5):
            self.port = free_port()
            try:
                self._run(
                    str(self.bindir / "pg_ctl"),
                    "-D",
                    str(self.data),
                    "-l",
                    str(self.log),
                    "-o",
                    f"-p {self.port}",
                    "-w",
                    "-t",
                    "60",
                    "start",
                )
                return
            except subprocess.CalledProcessError:
                if attempt == 4:
                    raise RuntimeError(
                        f"PostgreSQL did not start:\n{self.log.read_text()}"
                    ) from None
                time.sleep(0.2)

    def create_database(self, name: str) -> str:
        """A new empty database; its URL."""
        self._psql(f'CREATE DATABASE "{name}"')
        return self.database_url(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, closing any connection still open to it."""
        self._psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _psql(self, command: str) -> None:
        self._run(
            str(self.bindir / "psql"),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            self.user,
            "-d",
            "postgres",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            command,
        )

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._run(
                    str(self.bindir / "pg_ctl"),
                    "-D",
                    str(self.data),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                )
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
