"""Randomized SIGKILL soak of mixed operations on the embedded model (issue 21;
docs/guarantees.md G1, G3-G5, G7, G10).

A real server process hosts the soak agent (tests/agents/soak_agent.py): tools that run
in a thread (plain `def`), a tool that blocks its event loop (`time.sleep` in `async
def`), async ones, each safe to re-run or not. Between kills, at random:

- standalone background responses that call those tools over one to three steps;
- turns on a few conversations, some ending with a call of a client tool (`ask_user`,
  declared in the request), some of those with a turn queued right behind them that does
  not answer it: the queued turn must end failed with tool_output_missing rather than
  send a history with an unanswered call;
- deletes, between turns, of a conversation item (any type: a call goes with its output)
  or of a finished response.

The server is killed with SIGKILL at random moments, with something in flight each time,
and restarted on the same store (SQLite or PostgreSQL). Afterwards: every response is
terminal (completed; failed with tool_outcome_unknown; failed with tool_output_missing only
if queued behind an unanswered client call, and then always); unsafe tools ran at most
once per call, and exactly once per call of a completed response; every replay is well
formed and ends with the response; a conversation never holds half of a tool pair; and one
more turn on each conversation completes.

Seeded: the seed is printed, and DURABLE_RESPONSES_SEED replays the schedule.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agents.soak_agent import IDEMPOTENT, UNSAFE
from tests.conftest import NewStore, StartServer
from tests.crash._support import check_replays, kill_in_flight, owners
from tests.support.peek import query
from tests.support.side_effects import effects, runs_per_key
from tests.support.waiting import TERMINAL, wait_all_terminal

RESPONSES = 60
KILLS = 8
CONVERSATIONS = 4
ARGS = (
    "--agent",
    "tests.agents.soak_agent:agent",
    "--lease-ttl",
    "1",
    "--scan-interval",
    "0.2",
    "--max-recoveries",
    "1000",  # a response may be caught by every kill; none may give up
)
ASK_USER: dict[str, Any] = {
    "type": "function",
    "name": "ask_user",
    "description": "Ask the user a question (a client tool: the client answers it).",
    "parameters": {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
    },
}
Item = dict[str, Any]


@dataclass
class Conversation:
    id: str
    turns: list[str] = field(default_factory=list)  # response ids, oldest first
    deleted: set[str] = field(default_factory=set)  # responses deleted (already checked)


@dataclass
class Soak:
    url: str
    rng: random.Random
    http: httpx.Client
    ids: list[str] = field(default_factory=list)
    finals: dict[str, dict[str, Any]] = field(default_factory=dict)
    behind_client_call: dict[str, str] = field(default_factory=dict)  # queued -> leader
    conversations: list[Conversation] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)

    def create(self, body: dict[str, Any]) -> httpx.Response:
        return self.http.post(f"{self.url}/v1/responses", json={"model": "m", **body})

    def post(self, body: dict[str, Any]) -> str:
        created = self.create({"background": True, **body})
        assert created.status_code == 200, created.text
        response_id: str = created.json()["id"]
        self.ids.append(response_id)
        return response_id

    def final(self, response_id: str) -> dict[str, Any] | None:
        """The response if it is terminal (kept once seen), else None."""
        if response_id not in self.finals:
            body = self.http.get(f"{self.url}/v1/responses/{response_id}").json()
            if body.get("status") not in TERMINAL:
                return None
            self.finals[response_id] = body
        return self.finals[response_id]

    def idle(self, conversation: Conversation) -> bool:
        return all(self.final(r) is not None for r in conversation.turns)


def tool_steps(rng: random.Random, n: int) -> list[str]:
    """One to three steps of one or two server tool calls each."""
    steps = []
    for step in range(rng.randint(1, 3)):
        calls = []
        for call in range(rng.randint(1, 2)):
            name = rng.choice(["note", "transfer", "stamp", "tally", "grind", "grind"])
            arguments = {
                "note": {"text": f"n{n}-{step}-{call}"},
                "transfer": {"amount": n},
                "stamp": {"label": f"s{n}-{step}-{call}"},
                "tally": {"n": n},
                "grind": {"ms": rng.choice([60, 150, 300])},
            }[name]
            calls.append(f"[[call {name} {json.dumps(arguments)}]]")
        steps.append(" ".join(calls))
    return steps


def prompt(steps: list[str], rng: random.Random, words: tuple[int, int] = (10, 30)) -> str:
    return " [[next]] ".join(steps) + f" [[words {rng.randint(*words)}]] [[delay 25]]"


def standalone(soak: Soak) -> None:
    """A response of its own; its answer alone streams for 1-1.5 s, longer than the
    pause before a kill, so the last one of a round is still running at the kill."""
    steps = tool_steps(soak.rng, len(soak.ids))
    soak.post({"input": prompt(steps, soak.rng, words=(40, 60))})
    soak.counts["standalone"] += 1


def conversation_turn(soak: Soak, conversation: Conversation) -> None:
    """A turn that answers the conversation's pending client calls; maybe ends with a
    client call itself, maybe with a turn queued behind it that does not answer that."""
    rng, n = soak.rng, len(soak.ids)
    steps = tool_steps(rng, n) if rng.random() < 0.8 else []
    asks = rng.random() < 0.5
    if asks:
        steps.append(f'[[call ask_user {{"q": "q{n}"}}]]')
    answers: list[Item] = [
        {"type": "function_call_output", "call_id": call_id, "output": f"answer to {call_id}"}
        for call_id in pending_calls(conversation_items(soak, conversation.id))
    ]
    text = prompt(steps, rng) if steps else f"hello {n} [[words 20]] [[delay 25]]"
    body = {
        "conversation": conversation.id,
        "tools": [ASK_USER],
        "input": [*answers, {"role": "user", "content": text}],
    }
    leader = soak.post(body)
    conversation.turns.append(leader)
    soak.counts["turn asking the client" if asks else "turn"] += 1
    if asks and rng.random() < 0.6:
        for _ in range(rng.randint(1, 2)):
            queued = {"conversation": conversation.id, "tools": [ASK_USER], "input": "and then?"}
            created = soak.create({"background": True, **queued})
            if created.status_code == 400:  # the leader ended already: refused at once
                assert created.json()["error"]["code"] == "tool_output_missing", created.text
                soak.counts["refused behind a client call"] += 1
                continue
            assert created.status_code == 200, created.text
            follower = created.json()["id"]
            soak.ids.append(follower)
            conversation.turns.append(follower)
            soak.behind_client_call[follower] = leader
            soak.counts["queued behind a client call"] += 1


def delete_item(soak: Soak, conversation: Conversation) -> None:
    items = conversation_items(soak, conversation.id)
    if not items:
        return
    victim = soak.rng.choice(items)
    url = f"{soak.url}/v1/conversations/{conversation.id}/items/{victim['id']}"
    deleted = soak.http.delete(url)
    assert deleted.status_code == 200, deleted.text
    soak.counts[f"deleted {victim['type']}"] += 1
    check_pairs(soak, conversation, f"after deleting {victim['type']} {victim['id']}")


def delete_response(soak: Soak, conversation: Conversation) -> None:
    finished = [r for r in conversation.turns if r not in conversation.deleted]
    if not finished:
        return
    victim = soak.rng.choice(finished)
    final = soak.final(victim)
    assert final is not None
    check_one(soak, final)  # before it is gone
    deleted = soak.http.delete(f"{soak.url}/v1/responses/{victim}")
    assert deleted.status_code == 200, deleted.text
    assert soak.http.get(f"{soak.url}/v1/responses/{victim}").status_code == 404
    conversation.deleted.add(victim)
    soak.counts["deleted response"] += 1


def conversation_items(soak: Soak, conversation_id: str) -> list[Item]:
    items: list[Item] = []
    after: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 100, "order": "asc"}
        if after is not None:
            params["after"] = after
        page = soak.http.get(f"{soak.url}/v1/conversations/{conversation_id}/items", params=params)
        assert page.status_code == 200, page.text
        body = page.json()
        items += body["data"]
        if not body["has_more"]:
            return items
        after = body["last_id"]


def pending_calls(items: list[Item]) -> list[str]:
    answered = {i["call_id"] for i in items if i["type"] == "function_call_output"}
    return [
        i["call_id"] for i in items if i["type"] == "function_call" and i["call_id"] not in answered
    ]


def check_pairs(soak: Soak, conversation: Conversation, when: str) -> None:
    """A conversation never holds half of a server tool's pair, or an output twice or
    before its call (G5); only a client call may wait for its output."""
    calls: dict[str, str] = {}
    answered: Counter[str] = Counter()
    for item in conversation_items(soak, conversation.id):
        if item["type"] == "function_call":
            calls[item["call_id"]] = item["name"]
        elif item["type"] == "function_call_output":
            if item["call_id"] not in calls:
                soak.problems.append(f"{conversation.id} {when}: output {item['call_id']} alone")
            answered[item["call_id"]] += 1
    twice = [c for c, n in answered.items() if n > 1]
    unanswered = [c for c, name in calls.items() if name != "ask_user" and not answered[c]]
    if twice or unanswered:
        soak.problems.append(f"{conversation.id} {when}: twice {twice}, unanswered {unanswered}")


def one_round(soak: Soak, upto: int) -> None:
    """Random operations until `upto` responses were created (or one more): on each idle
    conversation, a turn or a delete; standalone responses fill up the rest. Waits up
    to a second for a conversation to be idle, so that conversations get their share."""
    end = time.monotonic() + 1.0
    while time.monotonic() < end and not any(soak.idle(c) for c in soak.conversations):
        time.sleep(0.1)
    for conversation in soak.rng.sample(soak.conversations, len(soak.conversations)):
        if len(soak.ids) >= upto or not soak.idle(conversation):
            continue
        check_pairs(soak, conversation, "between turns")
        op = soak.rng.choices([conversation_turn, delete_item, delete_response], [5, 2, 1])[0]
        op(soak, conversation)
    standalone(soak)
    while len(soak.ids) < upto:
        standalone(soak)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_random_ops_soak_kills_lose_nothing_and_break_no_pair(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    seed = int(os.environ.get("DURABLE_RESPONSES_SEED") or random.randrange(2**32))
    print(f"seed {seed}")
    db, folder = new_store("ops"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    started = time.monotonic()
    server = start_server(*ARGS, db=db, env=env)
    in_flight: list[int] = []
    dead: set[str] = set()
    with httpx.Client(timeout=30) as http:
        soak = Soak(server.url, random.Random(seed), http)
        for _ in range(CONVERSATIONS):
            created = http.post(f"{server.url}/v1/conversations", json={})
            soak.conversations.append(Conversation(created.json()["id"]))
        for kill in range(KILLS):
            one_round(soak, RESPONSES * (kill + 1) // KILLS)
            time.sleep(soak.rng.uniform(0.0, 0.6))  # a random moment, not a synchronization
            in_flight.append(kill_in_flight(server, db, dead, lambda: standalone(soak)))
            if not in_flight[-1]:
                last = ", ".join(f"'{r}'" for r in soak.ids[-3:])
                rows = query(db, f"SELECT id, status, owner FROM responses WHERE id IN ({last})")
                soak.problems.append(f"kill {kill}: nothing in flight; the last created: {rows}")
            dead |= owners(db)
            server = start_server(*ARGS, db=db, env=env)
            soak.url = server.url
        pending = [r for r in soak.ids if r not in soak.finals]  # deleted ones were seen first
        soak.finals.update(wait_all_terminal(soak.url, pending, deadline=90))
        check_all(soak, folder)
        for conversation in soak.conversations:
            check_pairs(soak, conversation, "at the end")
            last_turn(soak, conversation)
    outcomes = Counter(
        f["status"] + (f"/{f['error']['code']}" if f.get("error") else "")
        for f in soak.finals.values()
    )
    print(
        f"{len(soak.ids)} responses, {KILLS} kills in {time.monotonic() - started:.0f}s;"
        f" in flight at each kill: {in_flight}; operations {dict(soak.counts)};"
        f" outcomes {dict(outcomes)}"
    )
    if soak.problems:
        shown = "\n".join(soak.problems[:15])
        pytest.fail(f"seed {seed}: {len(soak.problems)} problems, the first:\n{shown}")


def last_turn(soak: Soak, conversation: Conversation) -> None:
    """After every kill and delete, a conversation still takes a turn that completes."""
    answers = [
        {"type": "function_call_output", "call_id": call_id, "output": "late answer"}
        for call_id in pending_calls(conversation_items(soak, conversation.id))
    ]
    body = {"tools": [ASK_USER], "input": [*answers, {"role": "user", "content": "bye"}]}
    created = soak.create({"conversation": conversation.id, **body})
    final = created.json()
    if created.status_code != 200 or final["status"] != "completed":
        soak.problems.append(f"{conversation.id}: a last turn got {created.status_code} {final}")


def check_all(soak: Soak, folder: Path) -> None:
    for tool in UNSAFE:
        twice = {k: n for k, n in runs_per_key(folder, tool).items() if n > 1}
        if twice:
            soak.problems.append(f"{tool} ran more than once for {twice}")
    ran = {tool: Counter(r for _, r in effects(folder, tool)) for tool in (*UNSAFE, *IDEMPOTENT)}
    deleted = {r for c in soak.conversations for r in c.deleted}
    for response_id in soak.ids:
        final = soak.final(response_id)
        assert final is not None
        if response_id not in deleted:
            check_one(soak, final)
        check_effects(soak, final, ran)


def check_one(soak: Soak, final: dict[str, Any]) -> None:
    """Its outcome is allowed, its pairs are whole, and its replays are well formed."""
    rid, status, error = final["id"], final["status"], final.get("error")
    code = error["code"] if error else None
    leader = soak.behind_client_call.get(rid)
    allowed = {"tool_outcome_unknown"}
    if leader is not None:
        # A leader that failed did not answer the calls its input answered.
        allowed.add("tool_output_missing")
        if pending_client_calls(soak.finals.get(leader)) and code != "tool_output_missing":
            soak.problems.append(
                f"{rid}: queued behind the unanswered client call of {leader}, it ended"
                f" {status} with {error}, not failed with tool_output_missing"
            )
    if status != "completed" and code not in allowed:
        behind = f" (queued behind {leader}: {outcome(soak.finals.get(leader))})" if leader else ""
        soak.problems.append(f"{rid}{behind}: ended {status} with {error}")
    calls = {
        i["call_id"]: i["name"]
        for i in final["output"]
        if i["type"] == "function_call" and i["status"] == "completed"
    }
    outputs = [i["call_id"] for i in final["output"] if i["type"] == "function_call_output"]
    if len(outputs) != len(set(outputs)) or not set(outputs) <= set(calls):
        soak.problems.append(f"{rid}: outputs {outputs} for calls {sorted(calls)}")
    if status == "completed" and {c for c, n in calls.items() if n != "ask_user"} - set(outputs):
        soak.problems.append(f"{rid}: completed with a server call unanswered")
    try:
        check_replays(soak.url, rid, final)
    except AssertionError as exc:
        soak.problems.append(f"{rid}: replay: {exc}")


def outcome(final: dict[str, Any] | None) -> str:
    if final is None:
        return "unknown"
    error = final.get("error")
    items = [f"{i['type']}:{i.get('name', '')}:{i.get('status')}" for i in final["output"]]
    return f"{final['status']} {error['code'] if error else ''} {items}"


def pending_client_calls(final: dict[str, Any] | None) -> list[str]:
    if final is None or final["status"] != "completed":
        return []
    return pending_calls(final["output"])


def check_effects(soak: Soak, final: dict[str, Any], ran: dict[str, Counter[str]]) -> None:
    """An unsafe tool ran once per call of a completed response, at most once per call of
    a failed one; an idempotent tool at least once per call of a completed response."""
    rid = final["id"]
    called = Counter(
        i["name"]
        for i in final["output"]
        if i["type"] == "function_call" and i["status"] == "completed"
    )
    for tool in (*UNSAFE, *IDEMPOTENT):
        runs, calls = ran[tool][rid], called[tool]
        if final["status"] == "completed":
            wrong = runs != calls if tool in UNSAFE else runs < calls
        else:
            wrong = runs > calls if tool in UNSAFE else False
        if wrong:
            soak.problems.append(f"{rid} ({final['status']}): {tool} ran {runs}x for {calls} calls")
