"""Issue 17, steering over the WebSocket (`response.steer`; docs/protocol.md section 13),
through the openai SDK's `responses.connect()` against a real server.

A steer is accepted (`response.steer.accepted`) once it is committed; the response it
steers stops at a safe point (`incomplete`, reason `steered`, its answer cut between two
words), and a successor holding the steers' input, in order, streams on the same lane.
A steer that cannot be taken is `response.steer.failed`, the input handed back, with the
SDK's error codes. A response that ended waiting for a client tool keeps the input
pending (`response.steer.pending`, with the stubs to fill) until the client's own
continuation, which carries it, and nothing runs it twice. After a reconnect,
`response.follow` picks the response up where the old socket left it, successor included.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartServer
from tests.integration._issue17_support import (
    MODEL,
    Event,
    Socket,
    checked,
    connect,
    get,
    http,
    raw,
    replay,
    response_id,
    text_of,
    types,
    unlaned,
)
from tests.support.peek import count
from tests.support.server import ServerProcess

LONG = "first [[words 200]] [[delay 30]]"  # about 6 s: a steer always catches it running
AGENT = ("--agent", "tests.agents.tool_agent:agent")
WAIT = '[[call wait_a_bit {"seconds": 4.0}]]'  # a tool body of 4 s: no safe point before
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather of a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def is_delta(event: Event) -> bool:
    return event["type"] == "response.output_text.delta"


async def deltas(ws: Socket, n: int) -> list[Event]:
    """The events up to the `n`-th text delta from now."""
    got: list[Event] = []
    for _ in range(n):
        got += await ws.until(is_delta, "a text delta")
    return got


def steer_events(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e["type"] == f"response.steer.{kind}"]


def of_response(events: list[Event], target: str) -> list[Event]:
    """The response events (not steer events) of one response, from its created on."""
    start = next(
        i
        for i, e in enumerate(events)
        if e["type"] == "response.created" and e["response"]["id"] == target
    )
    ours: list[Event] = []
    for event in events[start:]:
        if event["type"].startswith("response.steer"):
            continue
        if event["type"] == "response.created" and event["response"]["id"] != target:
            break
        ours.append(event)
    return ours


async def tool_running(ws: Socket, server: ServerProcess) -> str:
    """Once the response streaming on `ws` runs its tool body (its journal claim is
    committed): its id. Before that a steer would stop it before the tool starts."""
    await ws.until(lambda e: e["type"] == "response.output_item.done", "the tool's call")
    target = response_id(ws.events)
    sql = "SELECT count(*) FROM journal WHERE response_id = ? AND state = 'claimed'"
    for _ in range(500):
        if await asyncio.to_thread(count, server.db, sql, target):
            return target
        await asyncio.sleep(0.02)
    raise AssertionError(f"the tool of {target} never started")


async def input_texts(url: str, response: str) -> list[str]:
    items = (await get(url, f"/v1/responses/{response}/input_items?order=asc"))["data"]
    return [part["text"] for item in items for part in item.get("content", [])]


@pytest.fixture
def tool_server(start_server: StartServer, tmp_path: Path) -> ServerProcess:
    return start_server(*AGENT, env={"SIDE_EFFECTS_DIR": str(tmp_path)})


# -- a steer applied --------------------------------------------------------------------


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
async def test_a_steer_cuts_the_answer_and_a_successor_follows_on_the_lane(
    server: ServerProcess, background: bool
) -> None:
    async with connect(server.url) as ws:
        await ws.create(input=LONG, stream_id="s", background=background)
        before = await deltas(ws, 5)
        target = response_id(before)
        await ws.steer(target, "actually, say something else [[words 4]]")
        first = before + await ws.response("s")
        second = await ws.response("s")

    [accepted] = steer_events(first, "accepted")
    assert accepted["steer"]["previous_response_id"] == target
    assert accepted["steer"]["id"].startswith("steer_")
    assert accepted["stream_id"] == "s"
    # Its sequence number is the target's last event sent before it on this socket.
    sent_before = first[: first.index(accepted)]
    assert accepted["sequence_number"] == sent_before[-1]["sequence_number"]

    target_events = [e for e in first if not e["type"].startswith("response.steer")]
    checked(target_events)
    end = target_events[-1]
    assert end["type"] == "response.incomplete"
    assert end["response"]["incomplete_details"] == {"reason": "steered"}
    streamed = text_of(target_events)
    assert 5 <= len(streamed.split()) < 200
    assert set(streamed.split()) == {"first"}  # cut between two words
    assert end["response"]["output"][0]["content"][0]["text"] == streamed

    checked(second)
    successor = second[0]["response"]
    assert successor["id"] != target and successor["previous_response_id"] == target
    assert all(e["stream_id"] == "s" for e in second)
    assert second[-1]["type"] == "response.completed"
    assert text_of(second) == "actually, say something else"
    texts = await input_texts(server.url, successor["id"])
    assert texts == ["actually, say something else [[words 4]]"]
    assert unlaned(second) == await replay(server.url, successor["id"])


async def test_several_steers_make_one_successor_holding_their_input_in_order(
    tool_server: ServerProcess,
) -> None:
    async with connect(tool_server.url) as ws:
        # A tool body of 4 s: no safe point before it ends, so all three steers land.
        await ws.create(input=WAIT, stream_id="s", background=True)
        target = await tool_running(ws, tool_server)
        await ws.steer(target, "one [[words 2]]")
        await ws.steer(
            target, [{"role": "user", "content": [{"type": "input_text", "text": "two"}]}]
        )
        await ws.steer(
            target, [{"type": "message", "role": "user", "content": "three [[words 3]]"}]
        )
        first = await ws.response("s")
        second = await ws.response("s")
        rest = await ws.quiet(0.5)

    assert len(steer_events(first, "accepted")) == 3
    assert first[-1]["type"] == "response.incomplete"
    successor = second[0]["response"]["id"]
    texts = await input_texts(tool_server.url, successor)
    assert texts == ["one [[words 2]]", "two", "three [[words 3]]"]
    assert text_of(second) == "three three three"  # the model answers the last message
    assert rest == []  # one successor for all three


async def test_a_steer_of_a_response_this_socket_does_not_stream_is_accepted(
    server: ServerProcess,
) -> None:
    async with http(server.url) as client:
        created = await client.post(
            "/v1/responses", json={"model": MODEL, "input": LONG, "background": True}
        )
    target = created.json()["id"]
    async with connect(server.url) as ws:
        await ws.steer(target, "from elsewhere [[words 2]]")
        accepted = await ws.recv()
        log = await replay(server.url, target)  # follows it to its end
        rest = await ws.quiet(0.5)

    assert accepted == {
        "type": "response.steer.accepted",
        "sequence_number": 0,
        "steer": {"id": accepted["steer"]["id"], "previous_response_id": target},
    }
    assert log[-1]["response"]["incomplete_details"] == {"reason": "steered"}
    assert rest == []  # applied: its successor is not this socket's to stream


# -- steers refused ---------------------------------------------------------------------


async def test_steering_a_finished_response_is_refused_with_its_input(
    server: ServerProcess,
) -> None:
    async with connect(server.url) as ws:
        await ws.create(input="done soon [[words 2]]", stream_id="s")
        done = await ws.response("s")
        await ws.create(input="cut short [[words 40]]", max_output_tokens=16, stream_id="c")
        cut = await ws.response("c")
        refusals = []
        for target in (response_id(done), response_id(cut), "resp_unknown"):
            await ws.steer(target, "too late")
            refusals.append(await ws.recv())

    assert [r["error"]["code"] for r in refusals] == [
        "response_already_completed",
        "response_not_active",
        "response_not_found",
    ]
    for refusal, target, lane, end in zip(
        refusals,
        (response_id(done), response_id(cut), "resp_unknown"),
        ("s", "c", None),
        (done[-1]["sequence_number"], cut[-1]["sequence_number"], 0),
        strict=True,
    ):
        assert refusal["type"] == "response.steer.failed"
        assert refusal["error"]["type"] == "invalid_request_error"
        assert refusal["steer"] == {"input": "too late", "previous_response_id": target}
        assert refusal.get("stream_id") == lane and refusal["sequence_number"] == end


async def test_steering_a_cancelled_response_is_refused(server: ServerProcess) -> None:
    async with connect(server.url) as ws:
        await ws.create(input=LONG, background=True, stream_id="s")
        target = response_id(await deltas(ws, 1))
        async with http(server.url) as client:
            await client.post(f"/v1/responses/{target}/cancel")
        end = (await ws.response("s"))[-1]
        await ws.steer(target, "too late")
        refusal = await ws.recv()

    assert end["type"] == "response.failed" and end["response"]["status"] == "cancelled"
    assert refusal["error"]["code"] == "response_not_active"


@pytest.mark.parametrize(
    "event",
    [
        pytest.param({"input": ""}, id="empty-string"),
        pytest.param({"input": []}, id="empty-list"),
        pytest.param({"input": 7}, id="not-input"),
        pytest.param({"input": [{"role": "assistant", "content": "x"}]}, id="assistant"),
        pytest.param({"input": [{"role": "user", "content": "x", "id": "msg_1"}]}, id="id"),
        pytest.param({"input": [{"role": "user", "content": ""}]}, id="empty-content"),
        pytest.param(
            {"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]},
            id="tool-output",
        ),
        pytest.param(
            {"input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]},
            id="output-part",
        ),
        pytest.param(
            {"input": [{"role": "user", "content": [{"type": "input_text"}]}]}, id="no-text"
        ),
        pytest.param(
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            id="image-by-file-id",
        ),
        pytest.param({"input": "x", "stream_id": "s"}, id="stream-id"),
        pytest.param({"input": "x", "previous_response_id": None}, id="no-target"),
    ],
)
async def test_an_invalid_steer_is_refused_with_its_input(
    server: ServerProcess, event: dict[str, Any]
) -> None:
    async with connect(server.url) as ws:
        await ws.create(input=LONG, stream_id="s", background=True)
        target = response_id(await ws.until(lambda e: e["type"] == "response.created", "it"))
        await ws.send(
            {"type": "response.steer", "previous_response_id": target, **event}
        )  # raw: the SDK would refuse to send most of these
        refusal = await ws.until(lambda e: e["type"].startswith("response.steer"), "the refusal")
        await ws.steer(target, "a valid one")
        accepted = await ws.until(lambda e: e["type"].startswith("response.steer"), "acceptance")

    refused = refusal[-1]
    assert refused["type"] == "response.steer.failed"
    assert refused["error"]["code"] == "invalid_input" and refused["error"]["message"]
    assert "id" not in refused["steer"]
    assert refused["steer"]["input"] == event["input"]
    assert accepted[-1]["type"] == "response.steer.accepted"  # the socket goes on


async def test_too_many_pending_steers(tool_server: ServerProcess) -> None:
    async with connect(tool_server.url) as ws:
        await ws.create(input=WAIT, stream_id="s", background=True)
        target = await tool_running(ws, tool_server)
        for n in range(17):
            await ws.steer(target, f"steer {n}")
        answers = [
            (await ws.until(lambda e: e["type"].startswith("response.steer"), "an answer"))[-1]
            for _ in range(17)
        ]

    assert types(answers) == ["response.steer.accepted"] * 16 + ["response.steer.failed"]
    assert answers[-1]["error"]["code"] == "too_many_pending_steers"
    assert answers[-1]["steer"]["input"] == "steer 16"


async def test_a_steer_of_a_response_that_ends_cancelled_fails_with_its_id_and_input(
    tool_server: ServerProcess,
) -> None:
    async with connect(tool_server.url) as ws:
        await ws.create(input=WAIT, stream_id="s", background=True)
        target = await tool_running(ws, tool_server)
        await ws.steer(target, "never mind [[words 2]]")
        accepted = await ws.until(lambda e: e["type"] == "response.steer.accepted", "acceptance")
        async with http(tool_server.url) as client:  # the tool body still runs: no safe point
            await client.post(f"/v1/responses/{target}/cancel")
        end = await ws.response("s")
        failed = await ws.recv()

    assert end[-1]["type"] == "response.failed"
    assert end[-1]["response"]["status"] == "cancelled"
    assert failed["type"] == "response.steer.failed" and failed["stream_id"] == "s"
    assert failed["error"]["code"] == "successor_creation_failed"
    assert failed["steer"]["id"] == accepted[-1]["steer"]["id"]
    assert failed["sequence_number"] == end[-1]["sequence_number"]
    [message] = failed["steer"]["input"]
    assert message["role"] == "user"
    assert message["content"] == [{"type": "input_text", "text": "never mind [[words 2]]"}]


# -- a steer pending on a client tool ---------------------------------------------------


async def test_a_steer_of_a_response_waiting_for_a_client_tool_is_pending_until_its_output(
    server: ServerProcess,
) -> None:
    ask = '[[call get_weather {"city": "Paris"}]]'
    async with connect(server.url) as ws:
        await ws.create(input=ask, tools=[WEATHER], stream_id="t")
        asked = await ws.response("t")
        target = response_id(asked)
        [call] = asked[-1]["response"]["output"]
        await ws.steer(target, "and pack an umbrella")
        accepted, pending = await ws.recv(), await ws.recv()
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": "rain"}
        await ws.create(previous_response_id=target, input=[output], tools=[WEATHER], stream_id="t")
        continued = await ws.response("t")
        rest = await ws.quiet(0.5)

    assert call["type"] == "function_call" and asked[-1]["type"] == "response.completed"
    assert accepted["type"] == "response.steer.accepted"
    assert pending == {
        "type": "response.steer.pending",
        "sequence_number": asked[-1]["sequence_number"],
        "steer": {"id": accepted["steer"]["id"], "previous_response_id": target},
        "reason": "waiting_for_required_input",
        "required_input": [
            {"type": "function_call_output", "call_id": call["call_id"], "name": "get_weather"}
        ],
        "stream_id": "t",
    }
    checked(continued)
    assert continued[-1]["type"] == "response.completed"
    successor = continued[0]["response"]["id"]
    items = (await get(server.url, f"/v1/responses/{successor}/input_items?order=asc"))["data"]
    assert sorted(item["type"] for item in items) == ["function_call_output", "message"]
    [message] = [item for item in items if item["type"] == "message"]
    assert message["content"][0]["text"] == "and pack an umbrella"  # carried, once
    assert text_of(continued).startswith("and pack an umbrella")  # the model was given it
    assert rest == []
    # The steer ran in the client's continuation only: no automatic successor besides.
    sql = "SELECT count(*) FROM responses WHERE previous_response_id = ?"
    assert await asyncio.to_thread(count, server.db, sql, target) == 1


# -- following after a reconnect --------------------------------------------------------


async def test_follow_after_a_reconnect_goes_on_with_the_successor(server: ServerProcess) -> None:
    async with connect(server.url) as first:
        await first.create(input=LONG, stream_id="s", background=True)
        seen = await deltas(first, 3)
        target = response_id(seen)
        await first.steer(target, "after the drop [[words 3]]")
        seen += await first.until(lambda e: e["type"] == "response.steer.accepted", "acceptance")
    seen = [e for e in seen if not e["type"].startswith("response.steer")]
    last = seen[-1]["sequence_number"]  # the connection dropped here

    async with raw(server.url) as second:
        await second.send(
            {"type": "response.follow", "response_id": target, "starting_after": last}
        )
        rest = await second.response()
        successor = await second.response()

    assert unlaned(seen) + rest == await replay(server.url, target)
    assert rest[-1]["type"] == "response.incomplete"
    assert successor[0]["response"]["previous_response_id"] == target
    checked(successor)
    assert successor == await replay(server.url, successor[0]["response"]["id"])
