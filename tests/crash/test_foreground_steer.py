"""An accepted `response.steer` of a foreground response (docs/guarantees.md G12).

`accepted` means the server owns the input: its successor runs once, whatever happens
to the target. A foreground target whose client goes away (its socket drops) or whose
server dies ends `incomplete` / `steered` at its first safe point, and the successor
runs the steer's input once. Before, the first ended `cancelled` and the second
`failed`, and both failed the accepted steer: its input was never run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import NewStore, StartServer
from tests.integration._issue17_support import Socket, connect, response_id
from tests.support.peek import count, query
from tests.support.side_effects import effects
from tests.support.stores import Location
from tests.support.waiting import wait_terminal, wait_until

AGENT = ("--agent", "tests.agents.tool_agent:agent", "--lease-ttl", "2", "--scan-interval", "0.2")
WAIT = '[[call wait_a_bit {"seconds": 2.0}]]'
STEER = 'second [[call send_email {"to": "steerer"}]]'


async def steer_while_the_tool_runs(ws: Socket, db: Location) -> str:
    """Create a foreground response, and steer it once its tool's body has started."""
    await ws.create(input=WAIT)
    await ws.until(lambda e: e["type"] == "response.output_item.done", "the tool's call")
    target = response_id(ws.events)
    sql = "SELECT count(*) FROM journal WHERE response_id = ? AND state = 'claimed'"
    for _ in range(500):
        if await asyncio.to_thread(count, db, sql, target):
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("the tool's body never started")
    await ws.steer(target, STEER)
    await ws.until(lambda e: e["type"] == "response.steer.accepted", "the steer's acceptance")
    return target


def check_steered(url: str, db: Location, target: str, effects_dir: Path) -> None:
    final = wait_terminal(url, target)
    assert final["status"] == "incomplete", final
    assert final["incomplete_details"] == {"reason": "steered"}
    # Each call with its output (G5): a foreground response has no log to rebuild its
    # calls from when it is resumed, and it once ended with the output alone.
    calls = [i["call_id"] for i in final["output"] if i["type"] == "function_call"]
    answered = [i["call_id"] for i in final["output"] if i["type"] == "function_call_output"]
    assert calls == answered and calls, final["output"]
    sql = "SELECT id FROM responses WHERE previous_response_id = ?"
    wait_until(lambda: query(db, sql, target), "the steer's successor")
    ((successor,),) = query(db, sql, target)
    assert wait_terminal(url, successor)["status"] == "completed"
    assert query(db, "SELECT state FROM steers WHERE target_id = ?", target) == [("applied",)]
    assert [to for _, to in effects(effects_dir, "send_email")] == ["steerer"]
    assert len(effects(effects_dir, "wait_a_bit")) == 1


async def test_a_foreground_targets_client_going_away_does_not_drop_its_steer(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    db = new_store("s")
    server = start_server(*AGENT, db=db, env={"SIDE_EFFECTS_DIR": str(tmp_path)})
    async with connect(server.url) as ws:
        target = await steer_while_the_tool_runs(ws, db)
    # The socket is gone, as after a network drop: the SDK reconnects after a 1006.

    await asyncio.to_thread(check_steered, server.url, db, target, tmp_path)


async def test_a_foreground_targets_crash_does_not_drop_its_steer(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    db = new_store("s")
    env = {"SIDE_EFFECTS_DIR": str(tmp_path)}
    # Dies once the tool's result is recorded: no call is left ambiguous (G4).
    dying = start_server(*AGENT, db=db, env={**env, "DURABLE_RESPONSES_FAILPOINT": "tool_recorded"})
    async with connect(dying.url) as ws:
        target = await steer_while_the_tool_runs(ws, db)
    assert dying.proc is not None and await asyncio.to_thread(dying.proc.wait, 20) == 86

    survivor = start_server(*AGENT, db=db, env=env)
    await asyncio.to_thread(check_steered, survivor.url, db, target, tmp_path)


async def test_a_steered_turn_waiting_for_its_lane_keeps_its_place(
    start_server: StartServer, new_store: NewStore
) -> None:
    """A foreground turn of a conversation waits behind a running one; a steer of it is
    accepted. It still waits for its lane: it ends, and its input lands in the
    conversation, after the turn ahead. Before, it ended at once, out of order (G10)."""
    db = new_store("s")
    server = start_server("--scan-interval", "0.2", db=db)
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        conversation = (await client.post("/v1/conversations", json={})).json()["id"]
        ahead = {"conversation": conversation, "input": "first [[words 60]] [[delay 50]]"}
        first = (await client.post("/v1/responses", json=turn(**ahead, background=True))).json()
        body = turn(conversation=conversation, input="second", stream=True)
        async with client.stream("POST", "/v1/responses", json=body) as stream:
            sql = "SELECT id FROM responses WHERE conversation_id = ? AND id <> ?"
            await asyncio.to_thread(
                wait_until, lambda: query(db, sql, conversation, first["id"]), "the second turn"
            )
            ((second,),) = await asyncio.to_thread(query, db, sql, conversation, first["id"])
            async with connect(server.url) as ws:
                await ws.steer(second, "third")
                await ws.until(lambda e: e["type"] == "response.steer.accepted", "acceptance")
            await stream.aread()
        ended = await asyncio.to_thread(wait_terminal, server.url, second)
        assert ended["incomplete_details"] == {"reason": "steered"}
        assert (await client.get(f"/v1/responses/{first['id']}")).json()["status"] == "completed"

        def said() -> list[str]:
            items = httpx.get(
                f"{server.url}/v1/conversations/{conversation}/items",
                params={"order": "asc", "limit": 100},
            ).json()["data"]
            users = [i for i in items if i.get("role") == "user"]
            return [i["content"][0]["text"].split()[0] for i in users]

        await asyncio.to_thread(wait_until, lambda: len(said()) == 3, "the steer's successor")
        assert said() == ["first", "second", "third"]


def turn(**fields: Any) -> dict[str, Any]:
    return {"model": "m", **fields}


def interrupt(url: str, target: str) -> None:
    """A create that interrupts `target` (it overwrites the row's record of the steer)."""
    body = {
        "model": "m",
        "previous_response_id": target,
        "input": "third",
        "multitask_strategy": "interrupt",
        "background": True,
    }
    assert httpx.post(f"{url}/v1/responses", json=body, timeout=30).status_code == 200


def steer_applied(url: str, db: Location, target: str) -> None:
    wait_terminal(url, target)
    sql = "SELECT state FROM steers WHERE target_id = ?"
    wait_until(lambda: query(db, sql, target) not in ([], [("queued",)]), "the steer settled")
    assert query(db, sql, target) == [("applied",)]


async def test_an_interrupt_after_the_steer_does_not_drop_it(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    """Client gone, then server dead, each after a steer and then an interrupting create:
    the steer is still applied. Before, the interrupt hid it from both checks."""
    db = new_store("s")
    env = {"SIDE_EFFECTS_DIR": str(tmp_path)}
    server = start_server(*AGENT, db=db, env=env)
    async with connect(server.url) as ws:
        target = await steer_while_the_tool_runs(ws, db)
        await asyncio.to_thread(interrupt, server.url, target)
    await asyncio.to_thread(steer_applied, server.url, db, target)

    dying = start_server(*AGENT, db=db, env={**env, "DURABLE_RESPONSES_FAILPOINT": "tool_recorded"})
    async with connect(dying.url) as ws:
        target = await steer_while_the_tool_runs(ws, db)
        await asyncio.to_thread(interrupt, dying.url, target)
        assert dying.proc is not None and await asyncio.to_thread(dying.proc.wait, 20) == 86
    await asyncio.to_thread(steer_applied, server.url, db, target)
