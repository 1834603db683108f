"""The client side of the `slow-readers` workload (issue 12, item 5), in a load process.

Readers that stall: raw sockets with a small receive buffer that send
`GET /v1/responses/{id}?stream=true` for a completed response with a large event log,
read the status line, and then nothing. Raw sockets, not asyncio streams, since a
stream's transport would keep reading into its own buffer and the reader would not be
slow at all.

One run measures the server with no readers (idle), then for each cycle: opening the
readers (until the server has filled their socket buffers and is idle again), holding
them, and closing them (until the server has torn their streams down). In each phase it
probes `/healthz` on a fresh connection every `probe_interval` seconds and samples the
server's VmRSS and CPU time.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from ._procs import cpu_seconds, rss_bytes
from ._stats import summary_ms
from ._wire import Connection

CONNECTING = 32  # readers connecting at once: Hypercorn's listen backlog is 100
IDLE_WINDOW = 0.5  # seconds over which the server's CPU use decides it is idle ...
IDLE_FACTOR = 2.0  # ... using less than this times its use with no readers (the probes) ...
IDLE_FLOOR = 0.1  # ... or than this many cores, whichever is more
RSS_INTERVAL = 0.02  # seconds between samples of the server's VmRSS

Spec = dict[str, Any]


class Phase:
    """What one phase saw: /healthz latencies, peak RSS, CPU used, seconds."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.health: list[float] = []
        self.errors = 0
        self.rss_peak = rss_bytes(pid)
        self._cpu0 = cpu_seconds(pid)
        self._t0 = time.monotonic()

    def result(self) -> dict[str, Any]:
        return {
            "health_ms": summary_ms(self.health),
            "health_errors": self.errors,
            "rss_peak": self.rss_peak,
            "rss_end": rss_bytes(self.pid),
            "server_cpu_seconds": cpu_seconds(self.pid) - self._cpu0,
            "seconds": time.monotonic() - self._t0,
        }


async def _sample_rss(phase: Phase, stop: asyncio.Event) -> None:
    while not stop.is_set():
        phase.rss_peak = max(phase.rss_peak, rss_bytes(phase.pid))
        await asyncio.sleep(RSS_INTERVAL)


async def _probe(host: str, port: int, phase: Phase, interval: float, stop: asyncio.Event) -> None:
    """/healthz on a fresh connection (as a supervisor's check would be) until `stop`."""
    while not stop.is_set():
        conn = Connection(host, port)
        began = time.monotonic()
        try:
            async with asyncio.timeout(60):
                status, _ = await conn.request("GET", "/healthz")
            if status == 200:
                phase.health.append(time.monotonic() - began)
            else:
                phase.errors += 1
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            phase.errors += 1
        finally:
            await conn.close()
        await asyncio.sleep(interval)


async def _measured(
    spec: Spec, work: Callable[[], Awaitable[None]], *, until_idle: bool
) -> dict[str, Any]:
    """Run `work` (then wait for the server to be idle) with the probe running."""
    host, port = _address(spec["url"])
    phase = Phase(spec["server_pid"])
    # A flag as well as a cancel: a probe once lost its cancellation (Python 3.11's
    # asyncio.wait_for can swallow one that races its result) and probed on forever.
    stop = asyncio.Event()
    watchers = [
        asyncio.ensure_future(_probe(host, port, phase, spec["probe_interval"], stop)),
        asyncio.ensure_future(_sample_rss(phase, stop)),
    ]
    try:
        await work()
        if until_idle:
            await _server_idle(phase.pid, spec["idle_cores"], spec["settle_timeout"])
    finally:
        stop.set()
        for task in watchers:
            task.cancel()
        for task in watchers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return phase.result()


async def _server_idle(pid: int, cores: float, limit: float) -> None:
    """Until the server uses less than `cores` over IDLE_WINDOW (at most `limit` s)."""
    end = time.monotonic() + limit
    before = cpu_seconds(pid)
    while time.monotonic() < end:
        await asyncio.sleep(IDLE_WINDOW)
        now = cpu_seconds(pid)
        if now - before < cores * IDLE_WINDOW:
            return
        before = now


async def _open_reader(
    host: str, port: int, path: str, rcvbuf: int, gate: asyncio.Semaphore
) -> socket.socket:
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # before connect: the window
    sock.setblocking(False)
    try:
        async with gate:
            await loop.sock_connect(sock, (host, port))
            await loop.sock_sendall(sock, f"GET {path} HTTP/1.1\r\nhost: {host}\r\n\r\n".encode())
            async with asyncio.timeout(60):
                head = await loop.sock_recv(sock, 12)
        if head != b"HTTP/1.1 200":
            raise OSError(f"reader: {head!r}")
    except BaseException:
        sock.close()
        raise
    return sock


async def _hold(spec: Spec) -> None:
    await asyncio.sleep(spec["hold"])


async def _cycle(spec: Spec, errors: list[str]) -> dict[str, Any]:
    """Open the readers (until the server is idle again), hold them, close them (until
    the server has torn their streams down)."""
    host, port = _address(spec["url"])
    path = f"/v1/responses/{spec['response_id']}?stream=true"
    readers: list[socket.socket] = []
    gate = asyncio.Semaphore(CONNECTING)

    async def open_all() -> None:
        opening = (
            _open_reader(host, port, path, spec["rcvbuf"], gate) for _ in range(spec["count"])
        )
        for sock in await asyncio.gather(*opening, return_exceptions=True):
            if isinstance(sock, BaseException):
                errors.append(repr(sock))
            else:
                readers.append(sock)

    async def close_all() -> None:
        for sock in readers:
            sock.close()

    try:
        opening = await _measured(spec, open_all, until_idle=True)
        held = await _measured(spec, lambda: _hold(spec), until_idle=False)
    except BaseException:
        await close_all()
        raise
    closing = await _measured(spec, close_all, until_idle=True)
    return {"opened": len(readers), "opening": opening, "held": held, "closing": closing}


async def slow_readers(spec: Spec) -> dict[str, Any]:
    """Idle, then `cycles` times: open `count` readers, hold them `hold` seconds, close
    them. Per phase: /healthz latency, peak RSS, server CPU, seconds."""
    pid = spec["server_pid"]
    rss_before = rss_bytes(pid)
    idle = await _measured(spec, lambda: _hold(spec), until_idle=False)
    # Idle, later, is using about what the server used here: the probes cost CPU too.
    rate = idle["server_cpu_seconds"] / idle["seconds"]
    spec = {**spec, "idle_cores": max(IDLE_FLOOR, IDLE_FACTOR * rate)}
    errors: list[str] = []
    cycles = [await _cycle(spec, errors) for _ in range(spec["cycles"])]
    return {
        "rss_before": rss_before,
        "idle": idle,
        "idle_cores": spec["idle_cores"],
        "cycles": cycles,
        "rss_after": rss_bytes(pid),
        "errors": len(errors),
        "first_errors": errors[:3],
    }


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80
