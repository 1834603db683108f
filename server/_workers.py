"""`--workers N`: N server processes on one host, one listening socket and one store.

The parent binds the API port (and, with `--metrics-port P`, ports P to P+N-1) before any
worker starts, so a taken port is one start-up error, as with one process. It then starts
N workers, each `python -m server` with the same flags, which inherit the bound sockets
instead of binding (the kernel hands each connection to one of them). Workers share
nothing but the store, exactly as replicas on several hosts do: each has its own runtime
and lease owner, and a worker that dies leaves its responses to the others' recovery scan
once their leases lapse. The workers serve their own counters on metrics ports P, P+1, ...

The parent holds no state. It forwards SIGTERM and SIGINT to every worker and waits for
them all (each drains as a single server does). A worker that dies while the server is not
stopping is started again after a pause; one that exits 2 at its first start (a start-up
error: the same settings would fail again) stops the others, and the parent exits 2. A
restarted worker's start-up error (the store down for a moment) is retried like a death.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from types import FrameType

log = logging.getLogger("server")

# How a worker learns it is one: "INDEX:PARENT:API_FD" or "INDEX:PARENT:API_FD:METRICS_FD".
# Not a setting (Settings ignores unknown DURABLE_RESPONSES_ variables); only the parent
# sets it.
WORKER_ENV = "DURABLE_RESPONSES_WORKER"

STARTUP_ERROR = 2
RESTART_PAUSE = 1.0
POLL_INTERVAL = 0.2


@dataclass(frozen=True)
class WorkerSockets:
    """What the parent (pid `parent`) hands worker `index`: its inherited listening
    descriptors."""

    index: int
    parent: int
    api_fd: int
    metrics_fd: int | None = None

    def encode(self) -> str:
        return ":".join(str(n) for n in (self.index, self.parent, *self.fds))

    @property
    def fds(self) -> tuple[int, ...]:
        return (self.api_fd,) if self.metrics_fd is None else (self.api_fd, self.metrics_fd)

    @classmethod
    def from_environment(cls) -> WorkerSockets | None:
        value = os.environ.get(WORKER_ENV)
        if not value:
            return None
        index, parent, api, *metrics = (int(part) for part in value.split(":"))
        return cls(index, parent, api, metrics[0] if metrics else None)


class Supervisor:
    """Starts the workers, restarts one that dies, and stops them all on a signal."""

    def __init__(self, argv: list[str], sockets: list[WorkerSockets]) -> None:
        self.argv = argv
        self.sockets = sockets
        self.workers: dict[int, subprocess.Popen[bytes]] = {}
        self.restarted: set[int] = set()
        self.stopping: signal.Signals | None = None

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        for one in self.sockets:
            self._start(one)
        status = 0
        while self.workers:
            time.sleep(POLL_INTERVAL)
            for index, proc in list(self.workers.items()):
                code = proc.poll()
                if code is None:
                    continue
                del self.workers[index]
                if self.stopping is not None:
                    status = status or (code if code >= 0 else 1)  # killed while draining
                elif code == STARTUP_ERROR and index not in self.restarted:
                    log.error("worker %d could not start; stopping the others", index + 1)
                    status = STARTUP_ERROR
                    self._stop_all(signal.SIGTERM)
                else:
                    log.warning(
                        "worker %d (pid %d) exited with %d; restarting it",
                        index + 1,
                        proc.pid,
                        code,
                    )
                    # A restart's start-up error (the store down for a moment) is
                    # retried too: only a first start's says the settings cannot work.
                    self.restarted.add(index)
                    time.sleep(RESTART_PAUSE)
                    self._start(self.sockets[index])
        return status

    def _start(self, one: WorkerSockets) -> None:
        if self.stopping is not None:  # a signal came while starting, or during a restart's pause
            return
        env = {**os.environ, WORKER_ENV: one.encode()}
        proc = subprocess.Popen(
            [sys.executable, "-m", "server", *self.argv], env=env, pass_fds=one.fds
        )
        self.workers[one.index] = proc
        log.info("worker %d started (pid %d)", one.index + 1, proc.pid)
        if self.stopping is not None:  # the signal came while it was being started
            proc.send_signal(self.stopping)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stop_all(signal.Signals(signum))

    def _stop_all(self, sig: signal.Signals) -> None:
        self.stopping = sig
        for proc in self.workers.values():
            if proc.poll() is None:
                proc.send_signal(sig)
