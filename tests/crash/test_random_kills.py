"""Randomized crashes: many concurrent tool-heavy background responses, the server
killed with SIGKILL at random moments several times and restarted each time; at the end
every response is terminal and every invariant holds (G1, G3-G7). Each kill must find
work in flight and a new process must take it over, or the test fails: kills that cut
nothing prove nothing. Seeded: the seed is printed on failure, and
DURABLE_RESPONSES_SEED replays a run (the prompts and the waits; the moments a kill
lands in still depend on the machine)."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import NewStore, StartServer
from tests.crash._support import check_replays, kill_in_flight, owners, recoveries
from tests.support.server import ServerProcess
from tests.support.side_effects import effects, runs_per_key
from tests.support.waiting import wait_terminal, wait_until

ARGS = ("--agent", "tests.agents.tool_agent:agent", "--lease-ttl", "1", "--scan-interval", "0.2")
RESPONSES = 10
KILLS = 3


def prompt(rng: random.Random, n: int) -> str:
    steps = []
    for step in range(rng.randint(1, 3)):
        calls = []
        for call in range(rng.randint(1, 2)):
            kind = rng.choice(["lookup", "send_email", "charge", "wait_a_bit"])
            args = {
                "lookup": f'{{"city": "c{n}-{step}-{call}"}}',
                "send_email": f'{{"to": "u{n}-{step}-{call}"}}',
                "charge": f'{{"amount": {n * 10 + step}}}',
                "wait_a_bit": f'{{"seconds": {rng.choice([0.05, 0.2])}}}',
            }[kind]
            calls.append(f"[[call {kind} {args}]]")
        steps.append(" ".join(calls))
    # A slow model (the answer after tools is `tool -> output` per call, 4 to 40 words,
    # whatever [[words]] says): a step cut by a kill starts again from its beginning,
    # so most answers outlast the time between a recovery and the next kill.
    return " [[next]] ".join(steps) + f" [[delay {rng.randint(150, 250)}]]"


def test_random_kills_lose_nothing_and_run_nothing_twice(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    seed = int(os.environ.get("DURABLE_RESPONSES_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    print(f"seed {seed}")
    db, folder = new_store("random"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    servers = [start_server(*ARGS, db=db, env=env)]
    ids: list[str] = []
    try:
        with httpx.Client(timeout=30) as http:
            for n in range(RESPONSES):
                body = {"model": "m", "input": prompt(rng, n), "background": True}
                ids.append(http.post(f"{servers[0].url}/v1/responses", json=body).json()["id"])
            in_flight: list[int] = []
            dead: set[str] = set()
            for kill in range(KILLS):
                a_random_moment(rng, servers[-1], kill)

                def one_more() -> None:
                    body = {"model": "m", "input": prompt(rng, len(ids)), "background": True}
                    ids.append(http.post(f"{servers[-1].url}/v1/responses", json=body).json()["id"])

                in_flight.append(kill_in_flight(servers[-1], db, dead, one_more))
                assert in_flight[-1], f"kill {kill + 1}: every response had already finished"
                dead |= owners(db)
                servers.append(start_server(*ARGS, db=db, env=env))
            finals = [wait_terminal(servers[-1].url, id_, deadline=60) for id_ in ids]
        recovered = recoveries(db)
        print(
            f"in flight at each kill: {in_flight}; {sum(n > 0 for n in recovered.values())}"
            f" of {RESPONSES} responses recovered, {sum(recovered.values())} recoveries"
        )
        # Each kill cut at least one run, and a new process took it over: else the kills
        # tested nothing (issue 11).
        assert sum(recovered.values()) >= KILLS, recovered
        for server in servers[1:]:
            assert "recovering response" in server.log(), "a restart recovered nothing"
        check_invariants(servers[-1].url, finals, folder)
    except AssertionError as exc:
        pytest.fail(f"seed {seed}: {exc}")


def a_random_moment(rng: random.Random, server: ServerProcess, kill: int) -> None:
    """Wait a random moment into `server`'s work."""
    if kill:
        # A restarted process resumes the runs once the dead one's leases expire: its
        # start-up scan may find them expired already (a slow start) or not for a second.
        # Start the clock when it has taken runs over, so that the kill can cut them.
        wait_until(lambda: "recovering response" in server.log(), "a restart to recover")
    time.sleep(rng.uniform(0.1, 0.8))  # a random moment, not a synchronization


def check_invariants(url: str, finals: list[dict[str, Any]], folder: Path) -> None:
    for final in finals:
        assert final["status"] in ("completed", "failed"), final["status"]
        if final["status"] == "failed":
            assert final["error"]["code"] == "tool_outcome_unknown", final["error"]
        check_replays(url, final["id"], final)
        calls = [  # a call cut off by a crash stays in the output, closed incomplete
            i["call_id"]
            for i in final["output"]
            if i["type"] == "function_call" and i["status"] == "completed"
        ]
        outputs = [i["call_id"] for i in final["output"] if i["type"] == "function_call_output"]
        assert len(outputs) == len(set(outputs)) and set(outputs) <= set(calls)
        if final["status"] == "completed":
            assert sorted(calls) == sorted(outputs), "a completed turn left a call unanswered"
    for tool in ("send_email", "charge", "wait_a_bit"):  # at most once per call (G3)
        assert all(n == 1 for n in runs_per_key(folder, tool).values()), tool
    assert all(n <= KILLS + 1 for n in runs_per_key(folder, "lookup").values())
    sent = {to for _, to in effects(folder, "send_email")}
    for final in finals:  # every answered email was sent (a call cut off never ran)
        emails = {
            i["call_id"]: json.loads(i["arguments"])["to"]
            for i in final["output"]
            if i["type"] == "function_call" and i["name"] == "send_email"
        }
        answered = [i["call_id"] for i in final["output"] if i["type"] == "function_call_output"]
        assert {emails[c] for c in answered if c in emails} <= sent, final["id"]
