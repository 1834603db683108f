"""Steering across processes and crashes (docs/guarantees.md Steering, G9, G10; issue 5).

The steer signal lives in the store, so it reaches a turn whichever process drives it;
and a process killed while a turn is being interrupted, or while turns wait in a lane,
leaves a lane that a new process on the same file finishes: the interrupted turn ends,
every queued turn runs exactly once, in order. Runs are counted in side-effect files;
what each turn saw is proved by `usage.input_tokens` (the embedded model counts the
words of the whole history it is sent)."""

from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import NewStore, StartServer
from tests.crash._support import check_replays, wait_for_event, wait_for_exit
from tests.support.peek import query
from tests.support.side_effects import effects
from tests.support.stores import Location
from tests.support.waiting import wait_terminal, wait_until

FAST = ("--agent", "tests.agents.tool_agent:agent", "--lease-ttl", "2", "--scan-interval", "0.2")
EXIT_AT_FAILPOINT = 86
HELLO = "hello there"
LONG = "first [[words 200]] [[delay 30]]"  # about 6 s: a steer always catches it running
# Long enough that a steer sent once the call is claimed reaches the driving process (its
# heartbeat polls the store) before the body ends, even on a loaded machine.
TOOL = 'first [[call wait_a_bit {"seconds": 2.0}]]'

Item = dict[str, Any]


def words(item: Item) -> int:
    """The words the embedded model counts for an item of the history it is sent."""
    kind = item.get("type", "message")
    if kind == "message":
        content = item["content"]
        text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
        return len(text.split())
    if kind == "function_call":
        return len(str(item["arguments"]).split())
    if kind == "function_call_output":
        return len(str(item["output"]).split())
    return 0


def email(to: str, text: str = "") -> str:
    """A prompt whose turn sends one email (neither idempotent nor reconcilable) to `to`."""
    return f'{text} [[call send_email {{"to": "{to}"}}]]'.strip()


def new_conversation(url: str) -> str:
    hello = {"type": "message", "role": "user", "content": HELLO}
    body = httpx.post(f"{url}/v1/conversations", json={"items": [hello]}, timeout=30).json()
    conversation_id: str = body["id"]
    return conversation_id


def create(url: str, prompt: str, **extra: Any) -> dict[str, Any]:
    body = {"model": "m", "input": prompt, "background": True, **extra}
    response = httpx.post(f"{url}/v1/responses", json=body, timeout=30)
    assert response.status_code == 200, response.text
    created: dict[str, Any] = response.json()
    return created


def items(url: str, conversation_id: str) -> list[Item]:
    page = httpx.get(
        f"{url}/v1/conversations/{conversation_id}/items",
        params={"order": "asc", "limit": 100},
        timeout=30,
    ).json()
    data: list[Item] = page["data"]
    return data


def input_items(url: str, response_id: str) -> list[Item]:
    page = httpx.get(
        f"{url}/v1/responses/{response_id}/input_items", params={"order": "asc"}, timeout=30
    ).json()
    data: list[Item] = page["data"]
    return data


def wait_phase(url: str, response_id: str, phase: str, db: Location | None = None) -> None:
    if phase == "text":
        wait_for_event(url, response_id, "response.output_text.delta", None)
        return
    wait_for_event(url, response_id, "response.output_item.done", "function_call")
    # The call is streamed; a steer or a kill before its claim is committed would find the
    # turn between its model call and its tool, not in the tool body.
    assert db is not None
    wait_until(
        lambda: query(db, "SELECT 1 FROM journal WHERE response_id = ?", response_id),
        "the tool call to be claimed",
    )


def assert_tool_consistent(history: list[Item]) -> None:
    calls = [i["call_id"] for i in history if i["type"] == "function_call"]
    outputs = [i["call_id"] for i in history if i["type"] == "function_call_output"]
    assert sorted(calls) == sorted(outputs) and len(set(calls)) == len(calls), history


def input_tokens(history: list[Item], output: list[Item]) -> int:
    """What the embedded model reports for a turn that started from `history` and ran
    without a crash: one model call at the start and one after each step's tool
    outputs, each counting the whole history it was sent."""
    starts = [0] + [
        n
        for n in range(1, len(output))
        if output[n - 1]["type"] == "function_call_output"
        and output[n]["type"] != "function_call_output"
    ]
    return sum(sum(words(item) for item in history + output[:start]) for start in starts)


def kept_output(final: dict[str, Any]) -> list[Item]:
    """The output items that stay in the lane's history: an item cut off by the crash
    (closed `incomplete`) does not (G7), except the partial answer an interrupted turn
    ended on."""
    output: list[Item] = final["output"]
    return [
        item
        for n, item in enumerate(output)
        if item["status"] != "incomplete"
        or (final["status"] == "incomplete" and n == len(output) - 1 and item["type"] == "message")
    ]


def assert_saw_the_lane(
    url: str, conversation_id: str, finals: list[dict[str, Any]], *, crashed: str | None = None
) -> None:
    """The conversation holds each turn's input and output once, in the order of `finals`
    (after whatever came before them), and each turn saw exactly the items before it:
    the turns ran one after the other, in this order. (The usage of the turn `crashed`,
    which ran partly before a crash, is not checked: a model call cut by the crash was
    counted too.)"""
    history = items(url, conversation_id)
    assert_tool_consistent(history)
    position = {item["id"]: n for n, item in enumerate(history)}
    previous_end = 0
    for final in finals:
        own = input_items(url, final["id"]) + kept_output(final)
        at = [position[item["id"]] for item in own]
        assert at == list(range(at[0], at[0] + len(own))), (final["id"], at)
        assert at[0] >= previous_end
        previous_end = at[-1] + 1
        if final["id"] != crashed:
            output_at = at[0] + len(own) - len(final["output"])
            expected = input_tokens(history[:output_at], final["output"])
            assert final["usage"]["input_tokens"] == expected, final["id"]


# -- two processes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "phase", [pytest.param("text", id="streaming-text"), pytest.param("tool", id="running-a-tool")]
)
@pytest.mark.parametrize(
    "strategy", [pytest.param("interrupt", id="interrupt"), pytest.param("rollback", id="rollback")]
)
def test_a_steer_sent_to_one_process_stops_the_turn_another_drives(
    start_server: StartServer, new_store: NewStore, tmp_path: Path, strategy: str, phase: str
) -> None:
    db, folder = new_store("shared"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    a = start_server(*FAST, db=db, env=env)
    b = start_server(*FAST, db=db, env=env)
    conversation = new_conversation(a.url)
    before = items(a.url, conversation)
    first = create(a.url, TOOL if phase == "tool" else LONG, conversation=conversation)  # A runs it
    wait_phase(b.url, first["id"], phase, db)

    second = create(
        b.url, "second [[words 3]]", conversation=conversation, multitask_strategy=strategy
    )

    assert second["status"] == "queued"
    stopped = wait_terminal(b.url, first["id"])
    if strategy == "interrupt":
        assert stopped["status"] == "incomplete"
        assert stopped["incomplete_details"] == {"reason": "steered"}
    else:
        assert stopped["status"] == "cancelled"
        assert stopped["incomplete_details"] is None
    if phase == "tool":  # the running body finished on A and was recorded
        assert [i["type"] for i in stopped["output"]] == ["function_call", "function_call_output"]
        assert stopped["output"][1]["output"] == "waited 2.0"
        assert len(effects(folder, "wait_a_bit")) == 1
    else:
        assert [i["status"] for i in stopped["output"]] == ["incomplete"]
    check_replays(a.url, first["id"], stopped)
    final = wait_terminal(a.url, second["id"])
    assert final["status"] == "completed"
    check_replays(b.url, second["id"], final)
    history = items(a.url, conversation)
    kept = [] if strategy == "rollback" else input_items(a.url, first["id"]) + stopped["output"]
    expected = before + kept + input_items(a.url, second["id"]) + final["output"]
    assert [i["id"] for i in history] == [i["id"] for i in expected]
    assert_saw_the_lane(a.url, conversation, [final])


def test_a_steer_on_a_chain_reaches_the_process_that_drives_it(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    db = new_store("shared")
    env = {"SIDE_EFFECTS_DIR": str(tmp_path / "effects")}
    a = start_server(*FAST, db=db, env=env)
    b = start_server(*FAST, db=db, env=env)
    first = create(a.url, LONG)
    wait_phase(b.url, first["id"], "text")

    second = create(
        b.url,
        "second [[words 3]]",
        previous_response_id=first["id"],
        multitask_strategy="interrupt",
    )

    stopped = wait_terminal(b.url, first["id"])
    assert (stopped["status"], stopped["incomplete_details"]) == (
        "incomplete",
        {"reason": "steered"},
    )
    final = wait_terminal(b.url, second["id"])
    assert final["status"] == "completed"
    seen = input_items(a.url, first["id"]) + stopped["output"] + input_items(a.url, second["id"])
    assert final["usage"]["input_tokens"] == sum(words(i) for i in seen)


# -- crashes --------------------------------------------------------------------------------


def test_a_crash_right_after_a_steer_is_accepted_still_interrupts_and_runs_the_new_turn(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    """The process dies (failpoint `accepted`, the 2nd create) after the steering turn is
    committed and before it told the running turn or answered: the client never learns
    the new turn's id, yet it runs once, after the interrupted turn."""
    db, folder = new_store("shared"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    dying = start_server(*FAST, db=db, env={**env, "DURABLE_RESPONSES_FAILPOINT": "accepted:2"})
    conversation = new_conversation(dying.url)
    first = create(dying.url, LONG, conversation=conversation)
    wait_phase(dying.url, first["id"], "text")

    with pytest.raises(httpx.TransportError):
        create(
            dying.url,
            email("steerer", "second"),
            conversation=conversation,
            multitask_strategy="interrupt",
        )

    assert wait_for_exit(dying) == EXIT_AT_FAILPOINT
    first_id, second_id = response_ids(db)  # the client never learned the second one
    assert first_id == first["id"]
    survivor = start_server(*FAST, db=db, env=env)

    stopped = wait_terminal(survivor.url, first_id)
    assert (stopped["status"], stopped["incomplete_details"]) == (
        "incomplete",
        {"reason": "steered"},
    )
    check_replays(survivor.url, first_id, stopped)
    final = wait_terminal(survivor.url, second_id)
    assert final["status"] == "completed"
    check_replays(survivor.url, second_id, final)
    assert [to for _, to in effects(folder, "send_email")] == ["steerer"]
    assert_saw_the_lane(survivor.url, conversation, [stopped, final], crashed=first_id)


@pytest.mark.parametrize(
    "phase", [pytest.param("text", id="streaming-text"), pytest.param("tool", id="running-a-tool")]
)
def test_a_sigkill_while_a_turn_is_being_interrupted_leaves_a_consistent_lane(
    start_server: StartServer, new_store: NewStore, tmp_path: Path, phase: str
) -> None:
    db, folder = new_store("shared"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    dying = start_server(*FAST, db=db, env=env)
    conversation = new_conversation(dying.url)
    prompt = 'first [[call wait_a_bit {"seconds": 3}]]' if phase == "tool" else LONG
    first = create(dying.url, prompt, conversation=conversation)
    wait_phase(dying.url, first["id"], phase, db)
    second = create(
        dying.url,
        email("second"),
        conversation=conversation,
        multitask_strategy="interrupt",
    )

    dying.stop(signal.SIGKILL)
    survivor = start_server(*FAST, db=db, env=env)

    stopped = wait_terminal(survivor.url, first["id"])
    check_replays(survivor.url, first["id"], stopped)
    if phase == "text":
        assert (stopped["status"], stopped["incomplete_details"]) == (
            "incomplete",
            {"reason": "steered"},
        )
    else:  # killed inside the tool body: its outcome is unknown, and G4 fails it closed
        assert stopped["status"] == "failed"
        assert stopped["error"]["code"] == "tool_outcome_unknown"
        assert effects(folder, "wait_a_bit") == []
    final = wait_terminal(survivor.url, second["id"])
    assert final["status"] == "completed"
    check_replays(survivor.url, second["id"], final)
    assert [to for _, to in effects(folder, "send_email")] == ["second"]
    finals = [stopped, final] if stopped["status"] == "incomplete" else [final]
    assert_saw_the_lane(survivor.url, conversation, finals, crashed=first["id"])


@pytest.mark.parametrize(
    "lane", [pytest.param("conversation", id="conversation"), pytest.param("chain", id="chain")]
)
def test_turns_queued_at_a_crash_each_run_once_in_order_after_restart(
    start_server: StartServer, new_store: NewStore, tmp_path: Path, lane: str
) -> None:
    db, folder = new_store("shared"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    dying = start_server(*FAST, db=db, env=env)
    conversation = new_conversation(dying.url) if lane == "conversation" else None
    first = create(
        dying.url,
        "first [[words 60]] [[delay 30]]",
        **({"conversation": conversation} if conversation else {}),
    )
    wait_phase(dying.url, first["id"], "text")
    queued: list[dict[str, Any]] = []
    for n in (2, 3, 4):
        where = (
            {"conversation": conversation}
            if conversation
            else {"previous_response_id": (queued[-1] if queued else first)["id"]}
        )
        queued.append(create(dying.url, email(f"turn{n}", f"turn {n}"), **where))
    assert [turn["status"] for turn in queued] == ["queued"] * 3

    dying.stop(signal.SIGKILL)
    survivor = start_server(*FAST, db=db, env=env)

    resumed = wait_terminal(survivor.url, first["id"])
    assert resumed["status"] == "completed"
    check_replays(survivor.url, first["id"], resumed)
    finals = [wait_terminal(survivor.url, turn["id"]) for turn in queued]
    assert [final["status"] for final in finals] == ["completed"] * 3
    for final in finals:
        check_replays(survivor.url, final["id"], final)
        full = httpx.get(f"{survivor.url}/v1/responses/{final['id']}?stream=true", timeout=30)
        assert full.status_code == 200
    assert [to for _, to in effects(folder, "send_email")] == ["turn2", "turn3", "turn4"]
    if conversation is not None:
        assert_saw_the_lane(survivor.url, conversation, [resumed, *finals], crashed=first["id"])
    else:
        seen = input_items(survivor.url, first["id"]) + kept_output(resumed)
        for final in finals:
            seen += input_items(survivor.url, final["id"])
            assert final["usage"]["input_tokens"] == input_tokens(seen, final["output"])
            seen += final["output"]


def test_a_foreground_turn_waiting_in_place_at_a_crash_fails_and_the_queue_goes_on(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    """A foreground create is driven by its request: when its process dies nobody waits
    for it any more, so it ends `failed` (server_error) without running (docs/guarantees.md,
    Foreground responses); the turn queued behind it still runs, once."""
    db, folder = new_store("shared"), tmp_path / "effects"
    env = {"SIDE_EFFECTS_DIR": str(folder)}
    dying = start_server(*FAST, db=db, env=env)
    conversation = new_conversation(dying.url)
    first = create(dying.url, "first [[words 60]] [[delay 30]]", conversation=conversation)
    wait_phase(dying.url, first["id"], "text")
    body = {"model": "m", "input": email("foreground"), "conversation": conversation}
    waiting = threading.Thread(target=post_ignoring_errors, args=(dying.url, body), daemon=True)
    waiting.start()
    wait_until(lambda: len(response_ids(db)) == 2, "the foreground turn to be stored")
    foreground_id = response_ids(db)[1]
    last = create(dying.url, email("last", "last"), conversation=conversation)

    dying.stop(signal.SIGKILL)
    waiting.join(30)
    survivor = start_server(*FAST, db=db, env=env)

    resumed = wait_terminal(survivor.url, first["id"])
    assert resumed["status"] == "completed"
    dead = wait_terminal(survivor.url, foreground_id)
    assert dead["status"] == "failed"
    assert dead["error"]["code"] == "server_error"
    final = wait_terminal(survivor.url, last["id"])
    assert final["status"] == "completed"
    check_replays(survivor.url, last["id"], final)
    assert [to for _, to in effects(folder, "send_email")] == ["last"]
    assert_saw_the_lane(survivor.url, conversation, [resumed, final], crashed=first["id"])


def post_ignoring_errors(url: str, body: dict[str, Any]) -> None:
    with contextlib.suppress(httpx.TransportError):  # its server is killed
        httpx.post(f"{url}/v1/responses", json=body, timeout=30)


def response_ids(db: Location) -> list[str]:
    """Every response in the store, oldest first (a client may never have learned an id:
    its server died before answering, or its create is still waiting in its lane)."""
    return [str(row[0]) for row in query(db, "SELECT id FROM responses ORDER BY rowid")]
