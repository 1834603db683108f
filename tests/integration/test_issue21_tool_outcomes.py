"""Issue 21, windows 4 and 7 and repeated call ids: what the journal records for a tool
call must be what happened (docs/guarantees.md G3, G4, G5), against a real server process.

- Window 7: a timed-out plain (`def`) tool kept running in its thread and took effect
  after the journal had said `errored` ("timed out"); a model that retried caused a
  second effect. Now a thread still running at its timeout is an ambiguous call: the
  hook decides if there is one; otherwise its outcome is recorded as unknown, and the
  turn fails closed (`tool_outcome_unknown`) unless the tool is idempotent or
  `--ambiguous-calls report` tells the model.
- Window 4: a tool that raised CancelledError by itself (an inner awaitable cancelled by
  someone else) made the task group drop the call's output; the checkpoint went on
  without it and the entry stayed `claimed`. Now that is the tool's failure (`errored`).
- An upstream that repeats call ids across steps (every step's call `call_0`) got the
  first step's output reused without running the tool: the journal was keyed by
  (response, call id). It is keyed by (response, step, call id) now, and the
  idempotency key names the step too; and a call id already in the history, or given to
  two calls of one answer, is published under a new id, so the client can answer it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import StartServer
from tests.crash._support import log_lines
from tests.support.client_tools import WEATHER
from tests.support.fake_upstream import FakeUpstream, text, tool_calls
from tests.support.side_effects import effects, runs_per_key
from tests.support.waiting import wait_until

AGENT = ("--agent", "tests.agents.thread_tool_agent:agent")


def _run(url: str, prompt: str) -> dict[str, Any]:
    body = {"model": "m", "input": prompt}
    response: dict[str, Any] = httpx.post(f"{url}/v1/responses", json=body, timeout=30).json()
    return response


def _call_ids(response: dict[str, Any]) -> list[str]:
    return [i["call_id"] for i in response["output"] if i["type"] == "function_call"]


def _outputs(response: dict[str, Any]) -> list[str]:
    return [i["output"] for i in response["output"] if i["type"] == "function_call_output"]


@pytest.mark.parametrize(
    ("args", "prompt", "tool"),
    [
        pytest.param((), '[[call slow_charge {"amount": 5}]]', "slow_charge", id="plain-fail"),
        pytest.param(
            ("--ambiguous-calls", "report"),
            '[[call slow_charge {"amount": 5}]]',
            "slow_charge",
            id="plain-report",
        ),
        pytest.param((), '[[call slow_fetch {"url": "u"}]]', "slow_fetch", id="idempotent"),
    ],
)
def test_a_plain_tool_past_its_timeout_has_an_unknown_outcome_not_a_failure(
    start_server: StartServer, tmp_path: Path, args: tuple[str, ...], prompt: str, tool: str
) -> None:
    folder = tmp_path / "effects"
    server = start_server(*AGENT, *args, env={"SIDE_EFFECTS_DIR": str(folder)})

    response = _run(server.url, prompt)
    wait_until(lambda: len(log_lines(folder, tool)) == 1, "the late effect", deadline=10)

    key = effects(folder, tool)[0][0]
    if tool == "slow_charge" and not args:  # G4: neither idempotent nor reconcilable
        assert response["status"] == "failed", response
        assert response["error"]["code"] == "tool_outcome_unknown"
        message = response["error"]["message"]
        assert "timeout of 0.3s" in message and "may still take effect" in message
        assert key in message
    else:  # told to the model, which must not read it as a failure to retry
        assert response["status"] == "completed", response.get("error")
        [output] = _outputs(response)
        assert output.startswith(f"Error: the outcome of this call of '{tool}' is unknown")
        assert "may still take effect" in output and key in output
        assert "timed out after" not in output
    assert list(runs_per_key(folder, tool).values()) == [1]


def test_a_reconcilable_plain_tool_past_its_timeout_is_settled_by_its_hook(
    start_server: StartServer, tmp_path: Path
) -> None:
    folder = tmp_path / "effects"
    server = start_server(*AGENT, env={"SIDE_EFFECTS_DIR": str(folder)})

    response = _run(server.url, '[[call post_ledger {"amount": 7}]]')

    assert response["status"] == "completed", response.get("error")
    assert _outputs(response) == ["posted 7 (found)"]
    assert list(runs_per_key(folder, "ledger").values()) == [1]


def test_a_tool_that_raises_cancelled_error_by_itself_has_failed(
    start_server: StartServer, tmp_path: Path
) -> None:
    folder = tmp_path / "effects"
    server = start_server(*AGENT, env={"SIDE_EFFECTS_DIR": str(folder)})

    response = _run(server.url, "[[call hang_up {}]]")

    assert response["status"] == "completed", response.get("error")
    kinds = [i["type"] for i in response["output"]]
    assert kinds == ["function_call", "function_call_output", "message"]
    call, output = response["output"][0], response["output"][1]
    assert output["call_id"] == call["call_id"]
    assert output["output"].startswith("Error: tool 'hang_up' failed: CancelledError")
    assert len(log_lines(folder, "hang_up")) == 1
    # The recorded outcome is the one every read sees (the journal entry is settled).
    again = httpx.get(f"{server.url}/v1/responses/{response['id']}").json()
    assert _outputs(again) == [output["output"]]


def _lookup_server(start_server: StartServer, fake: FakeUpstream, effects_dir: Path) -> Any:
    """A server whose agent has the server tool `lookup`, on the scripted upstream."""
    args = ("--upstream-base-url", fake.url, "--agent", "tests.agents.tool_agent:agent")
    return start_server(*args, env={"SIDE_EFFECTS_DIR": str(effects_dir)})


PARIS, ROME = ("call_0", "lookup", '{"city":"Paris"}'), ("call_0", "lookup", '{"city":"Rome"}')


@pytest.mark.parametrize(
    "script",
    [
        pytest.param((tool_calls(PARIS), tool_calls(ROME)), id="across-steps"),
        pytest.param((tool_calls(PARIS, ROME),), id="in-one-answer"),
    ],
)
def test_call_ids_repeated_each_run_their_own_tool_call(
    start_server: StartServer, fake_upstream: FakeUpstream, tmp_path: Path, script: Any
) -> None:
    folder = tmp_path / "effects"
    server = _lookup_server(start_server, fake_upstream, folder)
    fake_upstream.push(*script, text("Sunny in both."))

    response = _run(server.url, "Paris, then Rome?")

    assert response["status"] == "completed", response.get("error")
    ids = _call_ids(response)
    assert len(ids) == len(set(ids)) == 2, ids
    cities = [json.loads(o)["city"] for o in _outputs(response)]
    assert cities == ["Paris", "Rome"]
    assert sorted(detail for _, detail in effects(folder, "lookup")) == ["Paris", "Rome"]
    assert sorted(runs_per_key(folder, "lookup").values()) == [1, 1], "one key per call"
    sent = fake_upstream.requests[-1]["messages"]
    answered = [m["content"] for m in sent if m["role"] == "tool"]
    assert [json.loads(a)["city"] for a in answered] == ["Paris", "Rome"]
    assert fake_upstream.refusals == []


def test_a_call_id_repeated_in_a_later_turn_is_renamed_so_the_clients_output_is_taken(
    start_server: StartServer, fake_upstream: FakeUpstream
) -> None:
    server = start_server("--upstream-base-url", fake_upstream.url)
    paris, rome = '{"city":"Paris"}', '{"city":"Rome"}'
    # A model that numbers its calls from call_0 on every turn.
    fake_upstream.push(
        tool_calls(("call_0", "get_weather", paris)),
        text("Sunny in Paris."),
        tool_calls(("call_0", "get_weather", rome)),
        text("Rainy in Rome."),
    )
    url = f"{server.url}/v1/responses"

    def turn(previous: str | None, given: Any) -> dict[str, Any]:
        body = {"model": "m", "input": given, "tools": [WEATHER], "previous_response_id": previous}
        answer = httpx.post(url, json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        reply: dict[str, Any] = answer.json()
        assert reply["status"] == "completed", reply.get("error")
        return reply

    def output(call_id: str, said: str) -> list[dict[str, str]]:
        return [{"type": "function_call_output", "call_id": call_id, "output": said}]

    first = turn(None, "Paris?")
    assert _call_ids(first) == ["call_0"]
    second = turn(first["id"], output("call_0", "sunny"))
    third = turn(second["id"], "And Rome?")
    [renamed] = _call_ids(third)
    assert renamed != "call_0" and renamed.startswith("call_")
    fourth = turn(third["id"], output(renamed, "rainy"))  # refused as a second output before
    assert fourth["output"][-1]["content"][0]["text"] == "Rainy in Rome."

    assert fake_upstream.refusals == []
    sent = fake_upstream.requests[-1]["messages"]
    asked = [c["id"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    assert asked == answered == ["call_0", renamed]
    assert [m["content"] for m in sent if m["role"] == "tool"] == ["sunny", "rainy"]


def _wait_ended(http: httpx.Client, response_id: str) -> dict[str, Any]:
    def ended() -> bool:
        return http.get(f"/v1/responses/{response_id}").json()["status"] not in (
            "queued",
            "in_progress",
        )

    wait_until(ended, f"response {response_id} to end", 20)
    reply: dict[str, Any] = http.get(f"/v1/responses/{response_id}").json()
    return reply


# A model that says six words (1.8 s) and then calls get_weather as call_0, as it would
# number its first call of every turn.
SLOW_CALL = tool_calls(
    ("call_0", "get_weather", '{"city":"Paris"}'), preface="one two three four five six", pace=0.3
)
OSLO = [
    {
        "type": "function_call",
        "call_id": "call_0",
        "name": "get_weather",
        "arguments": '{"city":"Oslo"}',
    },
    {"type": "function_call_output", "call_id": "call_0", "output": "snow"},
]


def test_a_call_id_added_to_the_conversation_while_the_turn_runs_is_not_reused(
    start_server: StartServer, fake_upstream: FakeUpstream
) -> None:
    server = start_server("--upstream-base-url", fake_upstream.url)
    fake_upstream.push(SLOW_CALL, text("Sunny."), text("Hello."))
    with httpx.Client(base_url=server.url, timeout=30) as http:
        conv = http.post("/v1/conversations", json={}).json()["id"]
        asked = {"model": "m", "tools": [WEATHER], "conversation": conv}
        first = http.post("/v1/responses", json={**asked, "input": "Paris?", "background": True})
        assert first.status_code == 200, first.text
        wait_until(
            lambda: (
                http.get(f"/v1/responses/{first.json()['id']}").json()["status"] == "in_progress"
            ),
            "the turn to run",
        )
        added = http.post(f"/v1/conversations/{conv}/items", json={"items": OSLO})
        assert added.status_code == 200, added.text

        ended = _wait_ended(http, first.json()["id"])
        assert ended["status"] == "completed", ended.get("error")
        [published] = _call_ids(ended)
        assert published != "call_0"
        items = http.get(f"/v1/conversations/{conv}/items", params={"order": "asc"}).json()
        held = [i["call_id"] for i in items["data"] if i["type"] == "function_call"]
        assert sorted(held) == sorted(["call_0", published])

        answer = {"type": "function_call_output", "call_id": published, "output": "sunny"}
        answered = http.post("/v1/responses", json={**asked, "input": [answer]})
        assert answered.status_code == 200, answered.text
        assert answered.json()["status"] == "completed", answered.json().get("error")
        later = http.post("/v1/responses", json={**asked, "input": "and now?"})
        assert later.json()["status"] == "completed", later.json().get("error")
    assert fake_upstream.refusals == []


@pytest.mark.parametrize("lane", ["conversation", "chain"])
def test_a_call_id_in_a_queued_turns_input_is_not_reused_by_the_running_turn(
    start_server: StartServer, fake_upstream: FakeUpstream, tmp_path: Path, lane: str
) -> None:
    server = _lookup_server(start_server, fake_upstream, tmp_path / "effects")
    slow_lookup = tool_calls(
        ("call_0", "lookup", '{"city":"Paris"}'), preface="one two three four five", pace=0.3
    )
    fake_upstream.push(slow_lookup, text("Sunny."), text("Snow, then."))
    with httpx.Client(base_url=server.url, timeout=30) as http:
        asked: dict[str, Any] = {"model": "m", "background": True}
        if lane == "conversation":
            asked["conversation"] = http.post("/v1/conversations", json={}).json()["id"]
        first = http.post("/v1/responses", json={**asked, "input": "Paris?"})
        assert first.status_code == 200, first.text
        if lane == "chain":
            asked["previous_response_id"] = first.json()["id"]
        wait_until(
            lambda: (
                http.get(f"/v1/responses/{first.json()['id']}").json()["status"] == "in_progress"
            ),
            "the turn to run",
        )
        oslo = [
            {"type": "function_call", "call_id": "call_0", "name": "lookup", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_0", "output": "snow"},
            {"role": "user", "content": "And Oslo?"},
        ]
        queued = http.post("/v1/responses", json={**asked, "input": oslo})
        assert queued.status_code == 200, queued.text
        assert queued.json()["status"] == "queued"

        ran = _wait_ended(http, first.json()["id"])
        assert ran["status"] == "completed", ran.get("error")
        [renamed] = _call_ids(ran)
        assert renamed != "call_0"
        # The queued turn, whose input holds its own call_0 and its output, runs next:
        # before, it failed at its start with duplicate_tool_call.
        second = _wait_ended(http, queued.json()["id"])
        assert second["status"] == "completed", second.get("error")
    assert fake_upstream.refusals == []


def test_the_items_api_refuses_a_call_the_running_turn_published_or_its_output(
    start_server: StartServer, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    server = _lookup_server(start_server, fake_upstream, tmp_path / "effects")
    # The server tool's call is published with its step; the answer after it takes 2.4 s.
    fake_upstream.push(
        tool_calls(("call_s", "lookup", '{"city":"Paris"}')),
        text("it is sunny in Paris today, warm and bright", pace=0.3),
        text("Hello."),
    )
    with httpx.Client(base_url=server.url, timeout=30) as http:
        conv = http.post("/v1/conversations", json={}).json()["id"]
        asked = {"model": "m", "conversation": conv}
        first = http.post("/v1/responses", json={**asked, "input": "Paris?", "background": True})
        assert first.status_code == 200, first.text
        path = f"/v1/responses/{first.json()['id']}"

        def published() -> bool:
            shown = http.get(path).json()
            return shown["status"] == "in_progress" and bool(_call_ids(shown))

        wait_until(published, "the call to be published", 10)
        call = {"type": "function_call", "call_id": "call_s", "name": "lookup", "arguments": "{}"}
        output = {"type": "function_call_output", "call_id": "call_s", "output": "rain"}
        for items, code in (
            ([call, output], "duplicate_tool_call"),
            ([output], "duplicate_tool_output"),
        ):
            refused = http.post(f"/v1/conversations/{conv}/items", json={"items": items})
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["code"] == code, refused.text
            assert "running response" in refused.json()["error"]["message"]
        assert http.get(path).json()["status"] == "in_progress"  # refused while it ran

        ended = _wait_ended(http, first.json()["id"])
        assert ended["status"] == "completed", ended.get("error")
        items = http.get(f"/v1/conversations/{conv}/items", params={"order": "asc"}).json()
        kinds = [(i["type"], i.get("call_id")) for i in items["data"] if "call_id" in i]
        assert kinds == [("function_call", "call_s"), ("function_call_output", "call_s")]
        later = http.post("/v1/responses", json={**asked, "input": "and now?"})
        assert later.json()["status"] == "completed", later.json().get("error")
    assert fake_upstream.refusals == []
