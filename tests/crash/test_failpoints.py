"""The crash suite: for each named failpoint (docs/guarantees.md), a real server process dies
there, a new one starts on the same store (an SQLite file, or a PostgreSQL database), and
the guarantees hold from outside: the response ends with the right status, side effects
happened at most once (exactly once when completed), ambiguous calls fail closed (G4), the
stored history is tool-consistent (G5), and full and partial replays are well formed
(G7)."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import NewStore, StartServer
from tests.crash._support import only_response_id, wait_for_exit
from tests.support.side_effects import effects, runs_per_key
from tests.support.stream_rules import check_stream, parse_sse
from tests.support.waiting import wait_terminal

EXIT_AT_FAILPOINT = 86
FAST = ("--lease-ttl", "2", "--scan-interval", "0.2")


@dataclass
class Crash:
    point: str
    prompt: str
    status: str
    tool: str
    runs: int  # side-effect lines expected in the tool's log at the end
    agent: str = "agent"
    extra: tuple[str, ...] = ()
    rerun: bool = False  # an idempotent call ran again, with the same key


CASES = [
    pytest.param(
        Crash("accepted", '[[call send_email {"to": "a"}]]', "completed", "send_email", 1),
        id="accepted",
    ),
    pytest.param(
        Crash("model_stream:3", "tell me a story [[words 12]]", "completed", "lookup", 0),
        id="model_stream",
    ),
    pytest.param(
        Crash("step_streamed", '[[call send_email {"to": "a"}]]', "completed", "send_email", 1),
        id="step_streamed",
    ),
    pytest.param(
        Crash(
            "step_streamed",
            'hello [[call lookup {"city": "A"}]] [[call send_email {"to": "a"}]]',
            "completed",
            "send_email",
            1,
        ),
        id="step_streamed-text-and-parallel-calls",
    ),
    pytest.param(
        Crash("step_recorded", '[[call send_email {"to": "a"}]]', "completed", "send_email", 1),
        id="step_recorded",
    ),
    pytest.param(
        Crash("tool_claimed", '[[call send_email {"to": "a"}]]', "failed", "send_email", 0),
        id="tool_claimed-at-most-once",
    ),
    pytest.param(
        Crash("tool_effect", '[[call send_email {"to": "a"}]]', "failed", "send_email", 1),
        id="tool_effect-at-most-once",
    ),
    pytest.param(
        Crash(
            "tool_effect", '[[call lookup {"city": "Rome"}]]', "completed", "lookup", 2, rerun=True
        ),
        id="tool_effect-idempotent",
    ),
    pytest.param(
        Crash("tool_effect", '[[call charge {"amount": 5}]]', "completed", "charge", 1),
        id="tool_effect-reconciled",
    ),
    pytest.param(
        Crash(
            "tool_effect",
            '[[call send_email {"to": "a"}]]',
            "completed",
            "send_email",
            1,
            extra=("--ambiguous-calls", "report"),
        ),
        id="tool_effect-reported",
    ),
    pytest.param(
        Crash("tool_recorded", '[[call send_email {"to": "a"}]]', "completed", "send_email", 1),
        id="tool_recorded",
    ),
    pytest.param(
        Crash(
            "checkpoint",
            '[[call send_email {"to": "a"}]] [[next]] [[call lookup {"city": "B"}]]',
            "completed",
            "send_email",
            1,
        ),
        id="checkpoint",
    ),
    pytest.param(
        Crash("terminal", '[[call send_email {"to": "a"}]]', "completed", "send_email", 1),
        id="terminal",
    ),
    pytest.param(
        Crash(
            "checkpoint",
            '[[call lookup {"city": "1"}]] [[next]] [[call lookup {"city": "2"}]] [[next]]'
            ' [[call lookup {"city": "3"}]]',
            "incomplete",
            "lookup",
            2,
            agent="small_budget",
        ),
        id="budget-survives-a-resume",
    ),
]


def read_until_dropped(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """POST a streaming create and read whatever arrives before the server dies."""
    text = ""
    try:
        with httpx.stream("POST", f"{url}/v1/responses", json=body, timeout=30) as response:
            for chunk in response.iter_text():
                text += chunk
    except httpx.HTTPError:
        pass
    return parse_sse(text, allow_partial=True)


def assert_tool_consistent(output: list[dict[str, Any]], *, ended: str) -> None:
    calls = [i["call_id"] for i in output if i["type"] == "function_call"]
    answers = [i["call_id"] for i in output if i["type"] == "function_call_output"]
    assert len(answers) == len(set(answers)), "a call was answered twice"
    for call_id in answers:
        assert call_id in calls, f"output for unknown call {call_id}"
    if ended == "completed":  # these agents' calls are all server calls: each answered
        assert sorted(calls) == sorted(answers), f"calls {calls} answered by {answers}"


@pytest.mark.parametrize("streamed", [False, True], ids=["polled", "streamed"])
@pytest.mark.parametrize("case", CASES)
def test_a_crash_at_each_failpoint_keeps_every_guarantee(
    start_server: StartServer, new_store: NewStore, tmp_path: Path, case: Crash, streamed: bool
) -> None:
    db = new_store("crash")
    folder = tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    args = ("--agent", f"tests.agents.tool_agent:{case.agent}", *FAST, *case.extra)
    doomed = start_server(*args, db=db, env={**env, "DURABLE_RESPONSES_FAILPOINT": case.point})
    request = {"model": "m", "input": case.prompt, "background": True}

    seen: list[dict[str, Any]] = []
    if streamed:
        seen = read_until_dropped(doomed.url, {**request, "stream": True})
    else:
        with contextlib.suppress(httpx.HTTPError):  # `accepted` dies before answering
            httpx.post(f"{doomed.url}/v1/responses", json=request)
    assert wait_for_exit(doomed) == EXIT_AT_FAILPOINT
    response_id = only_response_id(db)

    survivor = start_server(*args, db=db, env=env)
    with httpx.Client(base_url=survivor.url, timeout=30) as http:
        final = wait_terminal(survivor.url, response_id)
        full = parse_sse(http.get(f"/v1/responses/{response_id}?stream=true").text)
        if streamed and seen:  # a client resumes from the last event it saw
            after = seen[-1]["sequence_number"]
            rest = parse_sse(
                http.get(f"/v1/responses/{response_id}?stream=true&starting_after={after}").text
            )
            check_stream(seen + rest)
            assert seen + rest == full
        middle = len(full) // 2
        tail = parse_sse(
            http.get(f"/v1/responses/{response_id}?stream=true&starting_after={middle}").text
        )

    assert final["status"] == case.status, json.dumps(final["error"])
    check_stream(full)
    check_stream(tail, starting_after=middle)
    assert full[-1]["response"] == final
    assert_tool_consistent(final["output"], ended=final["status"])
    assert len(effects(folder, case.tool)) == case.runs
    per_key = runs_per_key(folder, case.tool)
    if case.rerun:
        assert list(per_key.values()) == [2]
    else:
        assert all(n == 1 for n in per_key.values())
    if case.status == "failed":
        error = final["error"]
        assert error["code"] == "tool_outcome_unknown"
        call = next(i for i in final["output"] if i["type"] == "function_call")
        assert case.tool in error["message"] and call["call_id"] in error["message"]
        assert "idem_" in error["message"]
