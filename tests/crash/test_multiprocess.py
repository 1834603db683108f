"""Several server processes on one store, an SQLite file or a PostgreSQL database
(docs/guarantees.md G8, G9): each response is driven by one process at a time, any process
serves reads, replays, live streams and cancels for any response, and survivors take over
a killed process's responses."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import NewStore, StartServer
from tests.crash._support import check_replays, log_lines, recoveries, wait_for_event
from tests.support.peek import query
from tests.support.side_effects import effects, runs_per_key
from tests.support.stream_rules import check_stream, parse_sse
from tests.support.waiting import wait_terminal, wait_until

TOOLS = ("--agent", "tests.agents.tool_agent:agent", "--lease-ttl", "2", "--scan-interval", "0.2")


def create(url: str, prompt: str, **extra: Any) -> dict[str, Any]:
    body = {"model": "m", "input": prompt, "background": True, **extra}
    response: dict[str, Any] = httpx.post(f"{url}/v1/responses", json=body, timeout=30).json()
    return response


def test_a_killed_process_s_responses_are_finished_by_the_survivor(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    """A is killed at a known point of each of its runs (issue 11: killed at a random
    point, every response could fail closed and the test still passed): four are
    streaming their answer after a checkpoint that recorded their tools' results, so B
    resumes and completes them without running a tool again; one is inside the body of an
    unsafe tool, so B fails it closed (G4) and never runs the body."""
    db, folder = new_store("shared"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    a = start_server(*TOOLS, db=db, env=env)
    b = start_server(*TOOLS, db=db, env=env)
    stuck = create(a.url, '[[call wait_a_bit {"seconds": 30}]]')
    answering = [  # answers of 11 words at 0.2 s a word: still streaming when A dies
        create(
            a.url,
            f'[[call lookup {{"city": "c{i}"}}]] [[call send_email {{"to": "n{i}"}}]]'
            " [[delay 200]]",
        )
        for i in range(4)
    ]
    wait_until(
        lambda: query(db, "SELECT state FROM journal WHERE tool = 'wait_a_bit'") == [("claimed",)],
        "A to claim the unsafe call",
    )
    for response in answering:  # B sees A's events: the tools' step is checkpointed
        wait_for_event(b.url, response["id"], "response.output_text.delta", None)

    a.kill()
    finals = [wait_terminal(b.url, r["id"]) for r in answering]
    failed = wait_terminal(b.url, stuck["id"])

    assert [f["status"] for f in finals] == ["completed"] * 4, [f.get("error") for f in finals]
    assert failed["status"] == "failed" and failed["error"]["code"] == "tool_outcome_unknown"
    assert recoveries(db) == {r["id"]: 1 for r in [stuck, *answering]}  # B took each over
    for final in [*finals, failed]:
        check_replays(b.url, final["id"], final)
    for tool in ("lookup", "send_email"):  # each ran once per response, on A only
        assert sorted(to for _, to in effects(folder, tool)) == [
            f"{'c' if tool == 'lookup' else 'n'}{i}" for i in range(4)
        ]
        assert all(n == 1 for n in runs_per_key(folder, tool).values()), tool
    assert effects(folder, "wait_a_bit") == []  # the ambiguous body was never run again


def test_any_process_serves_reads_live_streams_and_cancels(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    db = new_store("shared")
    a = start_server(*TOOLS, db=db, env={"SIDE_EFFECTS_DIR": str(tmp_path)})
    b = start_server(*TOOLS, db=db, env={"SIDE_EFFECTS_DIR": str(tmp_path)})

    slow = create(a.url, "x [[words 20]] [[delay 30]]")
    followed = parse_sse(
        httpx.get(f"{b.url}/v1/responses/{slow['id']}?stream=true", timeout=30).text
    )
    check_stream(followed)  # B followed events written by A, live, to the end
    assert followed[-1]["type"] == "response.completed"
    assert httpx.get(f"{b.url}/v1/responses/{slow['id']}").json() == followed[-1]["response"]

    endless = create(a.url, "y [[words 400]] [[delay 50]]")
    wait_until(
        lambda: (
            httpx.get(f"{b.url}/v1/responses/{endless['id']}").json()["status"] == "in_progress"
        ),
        "A to start the turn",
    )
    cancelled = httpx.post(f"{b.url}/v1/responses/{endless['id']}/cancel", timeout=30).json()

    assert cancelled["status"] == "cancelled"
    final = wait_terminal(a.url, endless["id"])
    assert final["status"] == "cancelled"
    check_replays(a.url, endless["id"], final)
    assert "cancelled" in {
        e["response"]["status"]
        for e in parse_sse(
            httpx.get(f"{a.url}/v1/responses/{endless['id']}?stream=true", timeout=30).text
        )
        if e["type"] == "response.failed"
    }


def test_each_response_is_driven_by_one_process(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    db, folder = new_store("shared"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    servers = [start_server(*TOOLS, db=db, env=env) for _ in range(3)]
    created = [
        create(servers[i % 3].url, f'[[call send_email {{"to": "n{i}"}}]]') for i in range(12)
    ]

    finals = [wait_terminal(servers[0].url, r["id"]) for r in created]

    assert {f["status"] for f in finals} == {"completed"}
    assert len(log_lines(folder, "send_email")) == 12
    assert all(n == 1 for n in runs_per_key(folder, "send_email").values())


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_foreground_reply_is_the_end_the_store_holds_after_its_lease_was_lost(
    start_server: StartServer, new_store: NewStore, tmp_path: Path, stream: bool
) -> None:
    """A is stopped (SIGSTOP) past its lease while it answers a foreground create, and B
    takes the response over and fails it (a foreground response's client is not B's to
    answer). When A wakes, its end is fenced off. The reply A then sends is B's failure,
    which the store holds: not the answer A finished but could no longer commit (the
    JSON reply said `completed`) and not a stream left without an end (it hung)."""
    db = new_store("shared")
    a = start_server(*TOOLS, db=db, env={"SIDE_EFFECTS_DIR": str(tmp_path)})
    b = start_server(*TOOLS, db=db, env={"SIDE_EFFECTS_DIR": str(tmp_path)})
    replies: list[httpx.Response] = []
    body = {"model": "m", "input": "slow [[words 30]] [[delay 100]]", "stream": stream}
    waiting = threading.Thread(  # 3 s of answer; a read timeout is a hung stream
        target=lambda: replies.append(httpx.post(f"{a.url}/v1/responses", json=body, timeout=30))
    )
    waiting.start()
    wait_until(lambda: query(db, "SELECT count(*) FROM responses") == [(1,)], "A to admit it")
    (response_id,) = query(db, "SELECT id FROM responses")[0]
    a.freeze()
    try:
        wait_until(
            lambda: query(db, "SELECT status FROM responses") == [("failed",)],
            "B to take the response over and fail it",
        )
    finally:
        a.thaw()
    waiting.join(60)

    assert replies and replies[0].status_code == 200, replies and replies[0].text
    stored = httpx.get(f"{b.url}/v1/responses/{response_id}").json()
    if stream:
        events = parse_sse(replies[0].text)
        check_stream(events)
        assert events[-1]["type"] == "response.failed"
        answered = events[-1]["response"]
    else:
        answered = replies[0].json()
    assert answered["status"] == "failed", "A answered what it could not commit"
    assert answered == stored
    assert recoveries(db) == {response_id: 1}


def test_an_unstored_foreground_stream_ends_failed_after_its_lease_was_lost(
    start_server: StartServer, new_store: NewStore
) -> None:
    """As above with `store: false`: B takes the response over, fails it and deletes it
    with its end, so there is no stored end for A to send. A's stream still ends, with a
    `response.failed` that says why, whose output is what the stream showed (it was cut
    off after the last event, without any end)."""
    db = new_store("shared")
    a = start_server(*TOOLS, db=db)
    start_server(*TOOLS, db=db)  # B
    replies: list[httpx.Response] = []
    body = {"model": "m", "input": "slow [[words 30]] [[delay 100]]", "stream": True}
    body["store"] = False
    waiting = threading.Thread(
        target=lambda: replies.append(httpx.post(f"{a.url}/v1/responses", json=body, timeout=30))
    )
    waiting.start()
    wait_until(lambda: query(db, "SELECT count(*) FROM responses") == [(1,)], "A to admit it")
    a.freeze()
    try:
        wait_until(
            lambda: query(db, "SELECT count(*) FROM responses") == [(0,)],
            "B to take the response over, fail it and discard it",
        )
    finally:
        a.thaw()
    waiting.join(60)

    assert replies and replies[0].status_code == 200, replies and replies[0].text
    events = parse_sse(replies[0].text)
    check_stream(events)
    assert events[-1]["type"] == "response.failed"
    failed = events[-1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == "server_error"
    assert "another of its processes" in failed["error"]["message"]
    shown = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert failed["output"] == shown and shown, "the end holds what the stream showed"
    assert shown[-1]["status"] == "incomplete"  # the message A was saying when it froze
