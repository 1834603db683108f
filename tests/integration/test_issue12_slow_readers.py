"""Issue 12, item 5: many stalled replays of a large event log, then closed, are cheap.

The bug: a completed background response with a 5 MB event log, replayed
(`GET /v1/responses/{id}?stream=true`) to 150 clients that read nothing; when they
closed, the server spent about 10 s of CPU tearing the streams down, /healthz took
2.5 s, and its RSS went from 53 MB to 650 MB and stayed near 430-650 MB over cycles.
Hypercorn drops the writes of a response whose client has gone, without an error and
without yielding to the event loop, so each stream read and framed the whole rest of its
log at once, megabytes of pages in flight, before the disconnect could be noticed; and a
stream whose client still read (into the kernel's socket buffer) never yielded either.

The fix (server/_sse.py, recovery/_runtime.py `follow`): a stream reads the next page
of the log only once the previous one was written, in bounded writes; it stops once its
client has gone; and between pages it waits for its turn at the event loop, where all
streams together write about 64 KB per turn. A stalled stream holds one page and one
write, whatever the size of the log.

Memory is asserted relative to the server's own baseline, latency only as a liveness
bound (this machine is shared); bench/ measures the real timing (`slow-readers`).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.conftest import StartServer
from tests.support.waiting import wait_status

READERS = 100
WORDS = 16_000  # an answer of 16,000 words of 40 letters: about 7 MB of events
CYCLES = 2
MB = 1024 * 1024
GROWTH_BOUND = 120 * MB  # the bug: +450-700 MB; fixed, 100 stalled streams take ~25 MB
LIVENESS = 10.0  # seconds: not a latency target, only "it answers"


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def peak_rss(pid: int) -> Iterator[list[int]]:
    """Sample the server's RSS every 20 ms in a thread; yields a list whose one element
    is the peak so far."""
    peak = [rss(pid)]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            peak[0] = max(peak[0], rss(pid))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join(5)


def large_log(http: httpx.Client) -> str:
    body = {"model": "m", "input": f"[[words {WORDS}]] {'x' * 40}", "background": True}
    response_id: str = http.post("/v1/responses", json=body).json()["id"]
    wait_status(http, response_id, "completed", deadline=60)
    return response_id


def replay_bytes(http: httpx.Client, response_id: str) -> int:
    with http.stream("GET", f"/v1/responses/{response_id}?stream=true") as stream:
        return sum(len(chunk) for chunk in stream.iter_bytes())


def slow_reader(port: int, response_id: str) -> socket.socket:
    """A replay whose client reads its status line and then nothing: a small receive
    buffer, so the server's writes stall almost at once."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        f"GET /v1/responses/{response_id}?stream=true HTTP/1.1\r\nHost: t\r\n\r\n".encode()
    )
    assert sock.recv(12) == b"HTTP/1.1 200"
    return sock


def answers(http: httpx.Client) -> bool:
    return http.get("/healthz", timeout=LIVENESS).status_code == 200


def wait_idle(pid: int, deadline: float = 20.0) -> None:
    """Until the server's CPU use falls under a fifth of a core (its streams are stalled,
    or torn down); at most `deadline` seconds, then the test goes on regardless."""
    end = time.monotonic() + deadline
    before = cpu_seconds(pid)
    while time.monotonic() < end:
        time.sleep(0.5)
        now = cpu_seconds(pid)
        if now - before < 0.1:
            return
        before = now


@pytest.mark.timeout(180)
def test_stalled_replays_of_a_large_log_are_closed_without_reading_it_all(
    start_server: StartServer,
) -> None:
    server = start_server("--max-streams-per-tenant", str(READERS + 10))
    assert server.proc is not None
    pid = server.proc.pid
    with httpx.Client(base_url=server.url, timeout=30.0) as http:
        response_id = large_log(http)
        assert replay_bytes(http, response_id) > 5 * MB
        wait_idle(pid)
        baseline = rss(pid)
        with peak_rss(pid) as peak:
            for _ in range(CYCLES):
                readers = [slow_reader(server.port, response_id) for _ in range(READERS)]
                try:
                    assert answers(http)
                    wait_idle(pid)
                finally:
                    for reader in readers:
                        reader.close()
                assert answers(http)
                wait_idle(pid)
        after = rss(pid)
        assert answers(http)
    growth = peak[0] - baseline
    assert growth < GROWTH_BOUND, (
        f"RSS peaked at {peak[0] / MB:.0f} MB from {baseline / MB:.0f} MB "
        f"({after / MB:.0f} MB after {CYCLES} cycles of {READERS} stalled replays)"
    )
    assert after - baseline < GROWTH_BOUND
