"""Issue 17: WebSocket steering (`response.steer`) across crashes and processes (G12).

A steer is committed before `response.steer.accepted`; its target stops at a safe point;
one successor applies its input. Each test kills a real server process at a named moment
(the failpoints `steer_committed` and `steer_settling`, or SIGKILL right after `accepted`)
or steers through a second process, and checks from outside: the target ends `steered`,
exactly one successor continues it, and the tool the steer asked for ran exactly once
(counted in side-effect files)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import httpx
from openai import OpenAI

from tests.conftest import NewStore, StartServer
from tests.crash._support import check_replays, wait_for_event, wait_for_exit
from tests.support.peek import query
from tests.support.server import ServerProcess
from tests.support.side_effects import effects
from tests.support.stores import Location
from tests.support.waiting import wait_terminal, wait_until

FAST = ("--agent", "tests.agents.tool_agent:agent", "--lease-ttl", "2", "--scan-interval", "0.2")
EXIT_AT_FAILPOINT = 86
LONG = "first [[words 300]] [[delay 60]]"  # about 18 s: a steer always catches it running
STEER = 'second [[call send_email {"to": "steerer"}]]'  # the successor sends one email


def create(server: ServerProcess, prompt: str) -> str:
    client = OpenAI(base_url=f"{server.url}/v1", api_key="test", max_retries=0)
    response_id: str = client.responses.create(model="m", input=prompt, background=True).id
    wait_for_event(server.url, response_id, "response.output_text.delta", None)
    return response_id


def steer(server: ServerProcess, target: str, *, kill_on_accepted: bool = False) -> list[str]:
    """Send one steer over a socket and read until it is accepted (or the connection
    drops); the event types seen. With `kill_on_accepted`, SIGKILL the server at once."""
    client = OpenAI(base_url=f"{server.url}/v1", api_key="test", max_retries=0)
    seen: list[str] = []
    with contextlib.suppress(Exception), client.responses.connect() as connection:
        connection.response.steer(previous_response_id=target, input=STEER)
        for event in connection:
            seen.append(event.type)
            if event.type == "response.steer.accepted":
                if kill_on_accepted:
                    server.kill()
                break
            if event.type in ("response.steer.failed", "error"):
                break
    return seen


def successors(db: Location, target: str) -> list[str]:
    rows = query(db, "SELECT id FROM responses WHERE previous_response_id = ?", target)
    return [row[0] for row in rows]


def check_steered_once(server: ServerProcess, db: Location, target: str, folder: Path) -> None:
    """The target ended steered, one successor continued it and sent the email once."""
    stopped = wait_terminal(server.url, target)
    assert (stopped["status"], stopped["incomplete_details"]) == (
        "incomplete",
        {"reason": "steered"},
    )
    check_replays(server.url, target, stopped)
    wait_until(lambda: successors(db, target), "the successor to be created", deadline=60)
    [successor] = successors(db, target)
    final: dict[str, Any] = wait_terminal(server.url, successor)
    assert final["status"] == "completed", final
    check_replays(server.url, successor, final)
    assert [to for _, to in effects(folder, "send_email")] == ["steerer"]
    states = query(db, "SELECT state, successor_id FROM steers WHERE target_id = ?", target)
    assert states == [("applied", successor)]


def test_a_crash_after_the_steer_commits_and_before_accepted_still_applies_it(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    """The client never hears `accepted` (the outcome is unknown to it), yet the steer
    was committed: the restarted server stops the target and runs the successor once."""
    db, folder = new_store("shared"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    dying = start_server(
        *FAST, db=db, env={**env, "DURABLE_RESPONSES_FAILPOINT": "steer_committed"}
    )
    target = create(dying, LONG)

    seen = steer(dying, target)

    assert "response.steer.accepted" not in seen
    assert wait_for_exit(dying) == EXIT_AT_FAILPOINT
    survivor = start_server(*FAST, db=db, env=env)
    check_steered_once(survivor, db, target, folder)


def test_a_crash_after_the_target_ends_and_before_its_successor_commits(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    """The target ended steered; the process died before the successor was committed.
    The recovery scan of the next process settles the steer into one successor."""
    db, folder = new_store("shared"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    dying = start_server(*FAST, db=db, env={**env, "DURABLE_RESPONSES_FAILPOINT": "steer_settling"})
    target = create(dying, LONG)

    assert "response.steer.accepted" in steer(dying, target)

    assert wait_for_exit(dying) == EXIT_AT_FAILPOINT
    assert successors(db, target) == []
    survivor = start_server(*FAST, db=db, env=env)
    check_steered_once(survivor, db, target, folder)


def test_a_sigkill_right_after_accepted_loses_nothing(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    db, folder = new_store("shared"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    dying = start_server(*FAST, db=db, env=env)
    target = create(dying, LONG)

    assert "response.steer.accepted" in steer(dying, target, kill_on_accepted=True)

    survivor = start_server(*FAST, db=db, env=env)
    check_steered_once(survivor, db, target, folder)


def test_a_steer_sent_to_another_process_stops_the_target_where_it_runs(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    """Two live processes on one store: the target runs on the first, the steer goes to
    the second; the first stops it, and the successor runs once."""
    db, folder = new_store("shared"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    driver = start_server(*FAST, db=db, env=env)
    other = start_server(*FAST, db=db, env=env)
    target = create(driver, LONG)

    assert "response.steer.accepted" in steer(other, target)

    check_steered_once(driver, db, target, folder)


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def test_a_pending_steer_survives_a_sigkill_and_is_told_after_a_reconnect(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    """The target waits for a client tool's output; a steer of it is accepted and the
    server is killed at once. After a restart, a client that follows the target again over
    a socket is told the steer is pending, with the call to answer; its continuation then
    carries the steer's input, once (the email is sent once)."""
    db, folder = new_store("shared"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    dying = start_server(*FAST, db=db, env=env)
    client = OpenAI(base_url=f"{dying.url}/v1", api_key="test", max_retries=0)
    asked = client.responses.create(
        model="m", input='[[call get_weather {"city": "Oslo"}]]', tools=[WEATHER], background=True
    )
    waiting = wait_terminal(dying.url, asked.id)
    [call] = waiting["output"]

    assert "response.steer.accepted" in steer(dying, asked.id, kill_on_accepted=True)

    survivor = start_server(*FAST, db=db, env=env)
    again = OpenAI(base_url=f"{survivor.url}/v1", api_key="test", max_retries=0)
    told: list[dict[str, Any]] = []
    with again.responses.connect() as connection:
        follow = {"type": "response.follow", "response_id": asked.id, "starting_after": -1}
        connection.send_raw(json.dumps(follow))
        for event in connection:
            told.append(event.model_dump())
            if event.type in ("response.steer.pending", "error"):
                break
    types = [event["type"] for event in told]
    assert types[-2:] == ["response.completed", "response.steer.pending"], types
    assert told[-1]["required_input"] == [
        {"type": "function_call_output", "call_id": call["call_id"], "name": "get_weather"}
    ]

    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "snow"}
    continued = again.responses.create(
        model="m", previous_response_id=asked.id, input=[output], tools=[WEATHER], background=True
    )
    final = wait_terminal(survivor.url, continued.id)
    assert final["status"] == "completed", final
    items = httpx.get(f"{survivor.url}/v1/responses/{continued.id}/input_items?order=asc").json()
    assert [i["type"] for i in items["data"]] == ["function_call_output", "message"]
    assert [to for _, to in effects(folder, "send_email")] == ["steerer"]
    assert successors(db, asked.id) == [continued.id]
