"""Helpers shared by the crash tests."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import httpx

from tests.support.peek import query
from tests.support.server import ServerProcess
from tests.support.stores import Location
from tests.support.stream_rules import check_stream, parse_sse
from tests.support.waiting import wait_until


def wait_for_exit(server: ServerProcess, deadline: float = 30.0) -> int:
    assert server.proc is not None
    try:
        return server.proc.wait(deadline)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the server did not exit:\n{server.log()}") from None


def wait_for_event(url: str, response_id: str, event_type: str, item_type: str | None) -> None:
    """Follow the response's stream until an event of `event_type` (for an item of
    `item_type`) arrives, then hang up."""
    with httpx.stream(
        "GET", f"{url}/v1/responses/{response_id}", params={"stream": "true"}, timeout=30
    ) as stream:
        for line in stream.iter_lines():
            if f'"type":"{event_type}"' not in line.replace(" ", ""):
                continue
            if item_type is None or f'"type":"{item_type}"' in line.replace(" ", ""):
                return
    raise AssertionError(f"{response_id} ended without {event_type}")


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


def only_response_id(db: Location) -> str:
    """The one response in the store (the client may have died before learning its id)."""
    rows = query(db, "SELECT id FROM responses")
    assert len(rows) == 1, rows
    return str(rows[0][0])


def recoveries(db: Location) -> dict[str, int]:
    """How many times each response's run was taken over from a dead process."""
    return {str(id_): int(n) for id_, n in query(db, "SELECT id, recoveries FROM responses")}


def owners(db: Location) -> set[str]:
    """The processes holding a lease in the store now."""
    return {o for (o,) in query(db, "SELECT DISTINCT owner FROM responses WHERE owner IS NOT NULL")}


def live_in_flight(db: Location, dead: set[str]) -> int:
    """Unfinished responses under a lease of a running process (not one a killed process
    left behind): what a kill now would cut."""
    sql = (
        "SELECT owner FROM responses"
        " WHERE status IN ('queued', 'in_progress') AND owner IS NOT NULL"
    )
    return sum(1 for (owner,) in query(db, sql) if owner not in dead)


def kill_in_flight(server: ServerProcess, db: Location, dead: set[str], create: Any) -> int:
    """SIGKILL `server` at a moment when it has something in flight, and return how many
    of its unfinished responses the kill cut.

    The process is frozen (SIGSTOP) before the count, so nothing can finish between the
    count and the kill. If a random moment found nothing in flight (everything finished
    early, say on a fast turn of a loaded machine), thaw it, `create()` one more, and try
    again, a bounded number of times; 0 means every try found nothing."""
    for _ in range(5):
        server.freeze()
        cut = live_in_flight(db, dead)
        if cut:
            server.kill()
            return cut
        server.thaw()
        create()
        try:
            wait_until(lambda: live_in_flight(db, dead) > 0, "a response in flight", deadline=10)
        except AssertionError:
            continue
    server.kill()
    return 0
