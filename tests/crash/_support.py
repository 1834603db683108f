"""Helpers shared by the crash tests."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.server import ServerProcess
from tests.support.stream_rules import check_stream, parse_sse

TERMINAL = {"completed", "failed", "cancelled", "incomplete"}


def wait_for_exit(server: ServerProcess, deadline: float = 30.0) -> int:
    assert server.proc is not None
    try:
        return server.proc.wait(deadline)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the server did not exit:\n{server.log()}") from None


def wait_terminal(url: str, response_id: str, deadline: float = 30.0) -> dict[str, Any]:
    end = time.monotonic() + deadline
    body: dict[str, Any] = {}
    while time.monotonic() < end:
        body = httpx.get(f"{url}/v1/responses/{response_id}", timeout=10).json()
        if body["status"] in TERMINAL:
            return body
        time.sleep(0.05)
    raise AssertionError(f"{response_id} is not terminal after {deadline}s: {body.get('status')}")


def wait_until(condition: Any, what: str, deadline: float = 30.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def replay(url: str, response_id: str, after: int | None = None) -> list[dict[str, Any]]:
    query = "stream=true" + (f"&starting_after={after}" if after is not None else "")
    return parse_sse(httpx.get(f"{url}/v1/responses/{response_id}?{query}", timeout=30).text)


def check_replays(url: str, response_id: str, final: dict[str, Any]) -> None:
    """A full replay and one from the middle are well formed and end with `final`."""
    full = replay(url, response_id)
    check_stream(full)
    assert full[-1]["response"] == final
    middle = len(full) // 2
    check_stream(replay(url, response_id, middle), starting_after=middle)


def log_lines(folder: Path, tool: str) -> list[str]:
    path = folder / f"{tool}.log"
    return path.read_text().splitlines() if path.exists() else []
