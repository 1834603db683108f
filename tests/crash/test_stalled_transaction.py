"""A host stalled in the middle of a transaction (SIGSTOP, a VM pause, a long pause of
its process) on PostgreSQL (docs/guarantees.md G8, "stalled past its lease").

A write of several statements holds its row and advisory locks between them. A stopped
process keeps its connection open, so before this PostgreSQL kept those locks for as long
as the host was stopped: the turn it was ending was never taken over, and every host
waited on the conversation behind it. Now a session left idle inside a transaction is
ended by PostgreSQL after a few seconds, its transaction rolled back, and another host
takes the turn over once its lease has expired."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.crash.test_issue15_three_hosts import rows
from tests.integration._issue17_support import connect, response_id
from tests.support.server import ServerProcess
from tests.support.waiting import wait_terminal, wait_until

ARGS = ("--lease-ttl", "2", "--scan-interval", "0.2")


class RowHolder:
    """Another session holding one row FOR UPDATE until `release`."""

    def __init__(self, db: str, sql: str, *params: Any) -> None:
        self._locked, self._release = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._hold(db, sql, params),))
        self._thread.start()
        assert self._locked.wait(10), "the row was never locked"

    async def _hold(self, db: str, sql: str, params: tuple[Any, ...]) -> None:
        conn = await asyncpg.connect(db, timeout=10)
        try:
            async with conn.transaction():
                await conn.execute(sql, *params)
                self._locked.set()
                await asyncio.to_thread(self._release.wait, 30)
        finally:
            await conn.close()

    def release(self) -> None:
        self._release.set()
        self._thread.join(10)


def lock_waiters(db: str, like: str) -> list[tuple[Any, ...]]:
    """Our sessions waiting for a lock, in a statement whose text is LIKE `like`."""
    return rows(
        db,
        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND application_name = 'durable-responses' AND query LIKE $1",
        like,
    )


@pytest.fixture
def hosts(postgres_url: str, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    started = [
        ServerProcess(postgres_url, args=ARGS, log=tmp_path / f"host{i}.log").start()
        for i in range(2)
    ]
    yield started
    for host in started:
        host.thaw()
        host.kill()


def test_a_host_stalled_inside_a_turns_end_loses_it_to_another(
    postgres_url: str, hosts: list[ServerProcess]
) -> None:
    a, b = hosts
    db = postgres_url
    conversation = httpx.post(f"{a.url}/v1/conversations", json={}, timeout=30).json()["id"]
    # Holding the conversation's row stops A's end of turn between its two statements
    # (the response's row, then the conversation's items): a window of a few
    # milliseconds otherwise, where A is stopped.
    holder = RowHolder(db, "SELECT id FROM conversations WHERE id = $1 FOR UPDATE", conversation)
    body = {"model": "m", "input": "[[words 5]]", "background": True, "conversation": conversation}
    first = httpx.post(f"{a.url}/v1/responses", json=body, timeout=30).json()
    waiting: list[tuple[Any, ...]] = []
    wait_until(
        lambda: (
            waiting.extend(
                rows(
                    db,
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND query LIKE '%conversations%' AND application_name = 'durable-responses'",
                )
            )
            or waiting
        ),
        "A's end of turn to wait for the conversation",
    )
    a.freeze()
    holder.release()
    wait_until(
        lambda: rows(
            db,
            "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'idle in transaction'",
            waiting[0][0],
        ),
        "A's transaction to sit idle, holding the response's row",
    )
    second = httpx.post(f"{b.url}/v1/responses", json=body, timeout=30).json()
    assert second["status"] == "queued"

    def ended(response_id: str) -> bool:
        status = httpx.get(f"{b.url}/v1/responses/{response_id}", timeout=30).json()["status"]
        return status == "completed"

    wait_until(lambda: ended(first["id"]) and ended(second["id"]), "B to finish both", 30)
    a.thaw()
    (recovered,) = rows(db, "SELECT recoveries FROM responses WHERE id = $1", first["id"])[0]
    assert recovered == 1


def test_a_write_held_up_by_a_blocked_event_loop_runs_again(
    postgres_url: str, tmp_path: Path
) -> None:
    """The same timeout also ends a session whose own process is alive but whose event
    loop a tool blocks (time.sleep) between two statements of a write. The write then
    runs again on a new connection: nothing of it was committed. Before, a foreground
    turn's end failed ("The server could not save this response.")."""
    db = postgres_url
    agent = ("--agent", "tests.agents.blocking_agent:agent")
    server = ServerProcess(
        db, args=(*ARGS, *agent), env={"SIDE_EFFECTS_DIR": str(tmp_path)}, log=tmp_path / "s.log"
    ).start()
    try:
        url = server.url
        conversation = httpx.post(f"{url}/v1/conversations", json={}, timeout=30).json()["id"]
        holder = RowHolder(
            db, "SELECT id FROM conversations WHERE id = $1 FOR UPDATE", conversation
        )
        replies: list[httpx.Response] = []
        body = {"model": "m", "input": "[[words 5]]", "conversation": conversation}
        foreground = threading.Thread(
            target=lambda: replies.append(httpx.post(f"{url}/v1/responses", json=body, timeout=60))
        )
        foreground.start()
        wait_until(lambda: lock_waiters(db, "%conversation%"), "the turn's end to wait")
        blocking = {
            "model": "m",
            "background": True,
            "input": '[[call charge_blocking {"amount": 1, "seconds": 8}]]',
        }
        charged = httpx.post(f"{url}/v1/responses", json=blocking, timeout=30).json()
        wait_until(
            lambda: rows(db, "SELECT 1 FROM journal WHERE response_id = $1", charged["id"]),
            "the blocking tool to start",
        )
        holder.release()  # the end's next statement now waits for the blocked loop
        foreground.join(60)

        assert replies and replies[0].json()["status"] == "completed", replies[0].text
        assert rows(db, "SELECT recoveries FROM responses WHERE id = $1", charged["id"]) == [(0,)]
    finally:
        server.kill()


async def test_a_steer_committed_while_a_cancelled_end_waits_still_wins(
    postgres_url: str, tmp_path: Path
) -> None:
    """A foreground target's client goes away (its end: `cancelled`) just as another
    socket's steer of it commits. PostgreSQL rechecks the end's condition on the row the
    steer changed: the end is `incomplete` / `steered` and the steer is applied. Before,
    the check read the steers table, which the recheck does not see again: accepted,
    then failed."""
    db = postgres_url
    server = ServerProcess(db, args=ARGS, log=tmp_path / "s.log").start()
    try:
        async with connect(server.url) as steering:
            async with connect(server.url) as driving:
                await driving.create(input="[[words 400]] [[delay 50]]")
                await driving.until(lambda e: e["type"] == "response.output_text.delta", "text")
                target = response_id(driving.events)
                holder = await asyncio.to_thread(
                    RowHolder, db, "SELECT id FROM responses WHERE id = $1 FOR UPDATE", target
                )
                await steering.steer(target, "second")
                await asyncio.to_thread(
                    wait_until, lambda: lock_waiters(db, "%FOR UPDATE%"), "the steer to wait"
                )
            # The driving socket is gone: its response stops at once and writes its end.
            await asyncio.to_thread(
                wait_until,
                lambda: lock_waiters(db, "%UPDATE responses SET status%"),
                "the end to wait",
            )
            await asyncio.to_thread(holder.release)
            await steering.until(lambda e: e["type"] == "response.steer.accepted", "acceptance")
            final = await asyncio.to_thread(wait_terminal, server.url, target)
        assert final["status"] == "incomplete", final["status"]
        assert final["incomplete_details"] == {"reason": "steered"}
        successor = await asyncio.to_thread(
            rows, db, "SELECT status FROM responses WHERE previous_response_id = $1", target
        )
        assert len(successor) == 1
    finally:
        server.kill()
