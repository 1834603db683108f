"""Randomized SIGKILL soak over the upstream path (issue 11, item 4; docs/guarantees.md G1,
G3-G7 and "G5 at the wire").

A real server process runs against the strict fake upstream (tests/support/fake_upstream.py,
a real HTTP server in this process) and the soak agent's tools. The fake scripts every turn
by its history: an idempotent `note`, then an unsafe `transfer`, then `note` again, each a
step of its own, then a text answer; its chunks are paced so that kills land in every
phase. Background responses are created in batches while the server is killed with
SIGKILL at random moments and restarted on the same store each time (SQLite or
PostgreSQL).

Afterwards: every response is completed, or failed with tool_outcome_unknown; `transfer`
ran at most once per response, exactly once for a completed one; no history the upstream
received broke tool pairing (it would have answered 400); every full replay is well formed
with exactly one terminal event; and something was in flight at every kill.

Seeded: the seed is printed, and DURABLE_RESPONSES_SEED replays the kill schedule.
"""

from __future__ import annotations

import functools
import json
import os
import random
import secrets
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import NewStore, StartServer
from tests.crash._support import kill_in_flight, owners, replay
from tests.support.fake_upstream import FakeUpstream, Turn, text, tool_calls
from tests.support.peek import count
from tests.support.side_effects import effects, runs_per_key
from tests.support.stream_rules import TERMINAL_TYPES, check_stream
from tests.support.waiting import wait_all_terminal

RESPONSES = 200
KILLS = 22
PLAN = ("note", "transfer", "note")  # one call per step, then the answer
PACE = 0.03  # seconds between the fake's chunks: a step streams for 0.1-0.3 s
ARGS = (
    "--agent",
    "tests.agents.soak_agent:agent",
    "--lease-ttl",
    "1",
    "--scan-interval",
    "0.2",
    "--max-recoveries",
    "1000",  # every response may be caught by many kills; none may give up
    "--retry-base-delay",
    "0.05",
)


def respond(body: dict[str, Any]) -> Turn:
    """The next step of a turn, by how many tool steps its history already holds. Call
    ids are fresh each time, as a real model's: a step generated again after a crash
    gets new ones."""
    messages = body["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    step = sum(1 for m in messages[last_user + 1 :] if m.get("tool_calls"))
    if step >= len(PLAN):
        return text("all three steps are done", pace=PACE)
    name = PLAN[step]
    arguments = json.dumps({"text": f"step {step}"} if name == "note" else {"amount": 10})
    return tool_calls((f"call_{secrets.token_hex(8)}", name, arguments), pace=PACE)


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream(respond).start()
    yield fake
    fake.stop()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_upstream_soak_kills_lose_nothing_and_send_no_unpaired_history(
    start_server: StartServer, new_store: NewStore, upstream: FakeUpstream, tmp_path: Path
) -> None:
    seed = int(os.environ.get("DURABLE_RESPONSES_SEED") or random.randrange(2**32))
    rng = random.Random(seed)
    print(f"seed {seed}")
    db, folder = new_store("soak"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    args = (*ARGS, "--upstream-base-url", upstream.url)
    started = time.monotonic()
    server = start_server(*args, db=db, env=env)
    ids: list[str] = []
    in_flight: list[int] = []
    dead: set[str] = set()
    for kill in range(KILLS):
        post_batch(server.url, ids, RESPONSES * (kill + 1) // KILLS)
        # A random moment, not a synchronization: right after a create, mid-stream,
        # inside a tool, while recovered runs resume.
        time.sleep(rng.uniform(0.0, 0.7))
        one_more = functools.partial(post_batch, server.url, ids, len(ids) + 1)
        in_flight.append(kill_in_flight(server, db, dead, one_more))
        dead |= owners(db)
        server = start_server(*args, db=db, env=env)
    finals = wait_all_terminal(server.url, ids, deadline=120)
    recovered = count(db, "SELECT count(*) FROM responses WHERE recoveries > 0")
    outcomes = Counter(
        final["status"] + (f"/{final['error']['code']}" if final.get("error") else "")
        for final in finals.values()
    )
    print(
        f"{len(ids)} responses, {KILLS} kills in {time.monotonic() - started:.0f}s;"
        f" in flight at each kill: {in_flight}; {recovered} recovered at least once;"
        f" {len(upstream.requests)} upstream requests; outcomes {dict(outcomes)}"
    )

    problems = check_soak(server.url, [finals[i] for i in ids], folder, upstream)
    problems += [f"kill {k}: nothing in flight" for k, n in enumerate(in_flight) if n == 0]
    if problems:
        shown = "\n".join(problems[:15])
        pytest.fail(f"seed {seed}: {len(problems)} problems, the first:\n{shown}")


def post_batch(url: str, ids: list[str], upto: int) -> None:
    with httpx.Client(timeout=30) as http:
        while len(ids) < upto:
            body = {"model": "m", "input": f"job {len(ids)}", "background": True}
            created = http.post(f"{url}/v1/responses", json=body)
            assert created.status_code == 200, created.text
            ids.append(created.json()["id"])


def check_soak(
    url: str, finals: list[dict[str, Any]], folder: Path, upstream: FakeUpstream
) -> list[str]:
    problems = [
        f"upstream refused request {r.request} ({r.message}): "
        + json.dumps(upstream.requests[r.request]["messages"])
        for r in upstream.refusals
    ]
    transfers = Counter(response_id for _, response_id in effects(folder, "transfer"))
    twice = [(k, n) for k, n in runs_per_key(folder, "transfer").items() if n > 1]
    problems += [f"transfer ran {n}x for key {k}" for k, n in twice]
    notes = runs_per_key(folder, "note")
    problems += [f"note ran {n}x for key {k}" for k, n in notes.items() if n > KILLS + 1]
    note_calls: dict[str, set[str]] = {}
    for key, response_id in effects(folder, "note"):
        note_calls.setdefault(response_id, set()).add(key)
    for final in finals:
        rid = final["id"]
        problems += check_response(url, final, transfers[rid], len(note_calls.get(rid, ())))
    return problems


def check_response(url: str, final: dict[str, Any], transfers: int, notes: int) -> list[str]:
    """What is wrong with one response: its outcome, its effects, its full replay."""
    rid, status, error = final["id"], final["status"], final.get("error")
    problems = []
    if status == "failed" and error and error["code"] == "tool_outcome_unknown":
        if transfers > 1:
            problems.append(f"{rid}: transfer ran {transfers}x")
    elif status == "completed":
        if (transfers, notes) != (1, 2):
            problems.append(f"{rid}: completed; transfer ran {transfers}x, note for {notes} calls")
        calls = [i for i in final["output"] if i["type"] == "function_call"]
        done = [i["call_id"] for i in calls if i["status"] == "completed"]
        outputs = [i["call_id"] for i in final["output"] if i["type"] == "function_call_output"]
        names = [i["name"] for i in calls if i["status"] == "completed"]
        if sorted(done) != sorted(outputs) or tuple(names) != PLAN:
            problems.append(f"{rid}: completed with calls {names} and outputs {len(outputs)}")
    else:
        problems.append(f"{rid}: ended {status} with {error}")
    events = replay(url, rid)
    try:
        check_stream(events)
    except AssertionError as exc:
        problems.append(f"{rid}: replay is malformed: {exc}")
    terminals = [e for e in events if e["type"] in TERMINAL_TYPES]
    if len(terminals) != 1 or events[-1].get("response") != final:
        problems.append(f"{rid}: replay has {len(terminals)} terminal events, or a different end")
    return problems
