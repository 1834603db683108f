"""The windows at a turn's last step: a crash there must neither fail the turn nor repeat
its answer (docs/guarantees.md G1, G5, G7).

A client call (found by the random soak, seed 1726408092):

A background turn's step asks for `ask_user`, a function the client declared: the turn
ends there, waiting for the client's output. The process died after that call was logged
and before the terminal write. Recovery then asked the model again with the call in the
history and no output, and the turn failed `server_error` ("has function call ... with no
output"). A client call is now published only with its step's record, so recovery ends
the turn on the recorded call instead.

A final answer: its text was logged as finished before the terminal write, so a crash in
between made recovery ask the model again and the answer was repeated as a second
message. The close now commits with the terminal status (failpoint `answer_streamed`).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import NewStore, StartServer
from tests.crash._support import check_replays, only_response_id, wait_for_exit
from tests.support.stores import Location
from tests.support.waiting import TERMINAL, wait_terminal, wait_until

EXIT_AT_FAILPOINT = 86
FAST = ("--lease-ttl", "2", "--scan-interval", "0.2")
ASK_USER: dict[str, Any] = {
    "type": "function",
    "name": "ask_user",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
}


def die_at(start_server: StartServer, db: Location, point: str, request: dict[str, Any]) -> str:
    """Create `request` on a server armed to die at `point`; the id of the response it
    left behind."""
    doomed = start_server(*FAST, db=db, env={"DURABLE_RESPONSES_FAILPOINT": point})
    httpx.post(f"{doomed.url}/v1/responses", json=request, timeout=30)
    assert wait_for_exit(doomed) == EXIT_AT_FAILPOINT
    return only_response_id(db)


def ask_user(text: str) -> dict[str, Any]:
    return {"model": "m", "input": text, "tools": [ASK_USER], "background": True}


@pytest.mark.parametrize("point", ["step_streamed", "step_recorded"])
def test_a_crash_around_a_client_call_step_ends_the_turn_on_that_call(
    start_server: StartServer, new_store: NewStore, point: str
) -> None:
    db = new_store("client-call")
    response_id = die_at(
        start_server, db, point, ask_user('Checking. [[call ask_user {"q": "which city?"}]]')
    )

    survivor = start_server(*FAST, db=db)
    final = wait_terminal(survivor.url, response_id)

    assert final["status"] == "completed", final["error"]
    calls = [i for i in final["output"] if i["type"] == "function_call"]
    assert [(c["name"], c["status"]) for c in calls] == [("ask_user", "completed")]
    assert final["output"][-1]["type"] == "function_call", "the turn ends on the client call"
    check_replays(survivor.url, response_id, final)


def test_a_crash_after_the_last_answer_streamed_does_not_repeat_it(
    start_server: StartServer, new_store: NewStore
) -> None:
    db = new_store("answer")
    request = {"model": "m", "input": "hello world [[words 6]]", "background": True}
    response_id = die_at(start_server, db, "answer_streamed", request)

    survivor = start_server(*FAST, db=db)
    final = wait_terminal(survivor.url, response_id)

    assert final["status"] == "completed", final["error"]
    assert [(i["type"], i["status"]) for i in final["output"]] == [("message", "completed")]
    check_replays(survivor.url, response_id, final)


def test_a_recovered_client_call_step_ends_the_turn_before_any_checkpoint(
    start_server: StartServer, new_store: NewStore
) -> None:
    """A recovered turn whose recorded step holds only client calls ends there: it used to
    write a checkpoint first, and a crash between that checkpoint and the end made the next
    recovery ask the model with the client call unanswered (found by the random soak)."""
    db = new_store("recovered-client-call")
    response_id = die_at(
        start_server, db, "step_recorded", ask_user('[[call ask_user {"q": "which city?"}]]')
    )

    # This process would die at a checkpoint; the recovered turn must need none.
    survivor = start_server(*FAST, db=db, env={"DURABLE_RESPONSES_FAILPOINT": "checkpoint"})
    assert survivor.proc is not None

    def ended() -> bool:
        assert survivor.proc is not None
        if survivor.proc.poll() is not None:
            raise AssertionError(f"the survivor died at a checkpoint:\n{survivor.log()}")
        status = httpx.get(f"{survivor.url}/v1/responses/{response_id}", timeout=10).json()
        return status["status"] in TERMINAL

    wait_until(ended, "the recovered turn to end")
    final = wait_terminal(survivor.url, response_id)
    assert final["status"] == "completed", final["error"]
    assert final["output"][-1]["type"] == "function_call"
