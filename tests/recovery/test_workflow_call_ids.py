"""A workflow step's call id and recorded arguments: the same in every run and process,
at most 64 characters, and unique (recovery/_workflow.py); and the ids a server before
per-name ids gave, still found in the runs it journaled."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from recovery import (
    Runtime,
    RuntimeSettings,
    WorkflowContext,
    normalize_input,
    open_store,
    workflow,
)
from recovery._admission import new_turn
from recovery._workflow import _arguments, _call_id, _stable_id
from store import Fence
from tests.recovery.test_workflow_store_errors import Unused


class Opaque:
    """An argument JSON cannot hold, with the default repr (its memory address)."""


def test_a_call_id_names_the_step_and_its_occurrence_and_fits_in_64_characters() -> None:
    long = "notify_the_customer_that_the_order_has_shipped_and_send_the_invoice"
    ids = {
        _call_id("post", 1),
        _call_id("post", 2),
        _call_id("1_post", 1),
        _call_id(long, 1),
        _call_id(long, 2),
        _call_id(long + "_again", 1),
    }

    assert _call_id("post", 1) == "step-1-post"
    assert len(ids) == 6, "unique"
    assert all(len(call_id) <= 64 for call_id in ids)


def test_recorded_arguments_are_compared_only_where_every_process_writes_them_alike() -> None:
    """Compared on replay: sets of plain values are sorted; an object JSON cannot hold is
    written as its str(), which may differ between processes (its memory address, a set
    inside it in the process's hash order), so such arguments are not compared."""
    assert _arguments(({"b", "a"},), {"to": "ops"}) == _arguments(({"a", "b"},), {"to": "ops"})
    assert _arguments(({"a", "b"},), {})[1], "comparable"
    assert _arguments((1,), {}) != _arguments((2,), {})
    text, comparable = _arguments((Opaque(),), {})
    assert not comparable and " at 0x" not in text


async def test_a_run_journaled_with_the_former_ids_keeps_them(tmp_path: Path) -> None:
    """A deploy while a workflow runs: the server before this one numbered a step by its
    place among all steps (`step_{n}_{name}`). The new server, resuming the run, finds
    those steps as that server did: the finished ones are not run again, and the
    ambiguous one fails closed (G3, G4)."""
    runs: list[str] = []

    def act(name: str) -> str:
        runs.append(name)
        return f"{name} done"

    @workflow
    async def three(ctx: WorkflowContext) -> str:
        for name in ("a", "b", "c", "d"):
            await ctx.step(name, act, name)
        return "finished"

    settings = RuntimeSettings(scan_interval=0.1, heartbeat_interval=0.05)
    async with open_store(tmp_path / "deploy.db") as store:
        params = {"model": "m", "input": normalize_input("go"), "background": True}
        new, events = new_turn(params, "t", None, "old-server", settings)
        _, _, held = await store.create_response(new, [], events, None, ("old-server", 0.5))
        assert held is not None
        fence = Fence("old-server", held.epoch)
        for n, name in enumerate(("a", "b", "c"), start=1):
            call = {"tool": name, "arguments": json.dumps({"args": [name], "kwargs": {}})}
            await store.claim_call(
                new.id, fence, call_id=f"step_{n}_{name}", idempotency_key=f"k{n}", **call
            )
            if name != "c":  # c was running when the old server went away
                output = json.dumps(f"{name} done")
                await store.finish_call(
                    new.id, fence, f"step_{n}_{name}", state="completed", output=output
                )
        await asyncio.sleep(0.6)  # its lease expires: the new server takes the run over
        async with Runtime(store, three, Unused(), settings).running() as runtime:
            final = await asyncio.wait_for(runtime.wait_final(new.id, "t"), 10)

    assert runs == [], "a and b were recorded, c is ambiguous: nothing ran again"
    assert final["status"] == "failed" and final["error"]["code"] == "tool_outcome_unknown"
    assert "step_3_c" in final["error"]["message"]


class _SayOnly:
    """The part of a Turn that `say` reads."""

    response_id = "resp_say"


async def _said(output: list[dict[str, object]], *texts: str) -> list[str]:
    """The ids `say` gives `texts`, said in this order, with `output` already there."""
    added: list[str] = []

    async def add_items(items: list[dict[str, object]], *, checkpoint: bool = False) -> None:
        added.extend(str(item["id"]) for item in items)

    ctx = WorkflowContext(_SayOnly(), add_items, [], "", output)  # type: ignore[arg-type]
    for text in texts:
        await ctx.say(text)
    return added


def _message(item_id: str, text: str) -> dict[str, object]:
    return {"type": "message", "id": item_id, "content": [{"type": "output_text", "text": text}]}


async def test_a_message_is_known_by_its_text_whatever_order_branches_say_them_in() -> None:
    """On a replay, concurrent branches may say their messages in another order: each
    must get the id it had, or the replay skips one message as said and says another
    again."""
    texts, reordered = ("from y", "from x", "from y"), ("from x", "from y", "from y")
    first = set(zip(await _said([], *texts), texts, strict=True))
    replay = set(zip(await _said([], *reordered), reordered, strict=True))

    assert len(first) == 3, "the second time one text is said is a message of its own"
    assert first == replay, "each message found again under its id"


async def test_a_message_said_by_a_server_that_numbered_them_keeps_its_id() -> None:
    """A deploy while a workflow runs: the server before this one numbered every message
    said in order. Its messages are found again under those ids, so not said twice."""
    [numbered] = await _said([], "from y")
    legacy = _stable_id("msg", "resp_say", "say_1")
    assert numbered != legacy

    assert await _said([_message(legacy, "from y")], "from y") == [legacy]
    assert await _said([_message(legacy, "other")], "from y") == [numbered]
