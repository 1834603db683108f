"""The window between a step's model stream and its step record, with a real upstream.

A model that says something before asking for a tool ("Let me check the weather.") streams
a message, then calls. The process dies after that stream ended and before the step
record committed (failpoint `step_streamed`). Afterwards the message must read once, the
calls must be the resumed step's only, and the upstream, which refuses unpaired histories
as OpenAI does, must never have been sent one.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from openai.types.responses import Response

from tests.conftest import NewStore, StartServer
from tests.crash._support import check_replays, only_response_id, wait_for_exit
from tests.support.fake_upstream import FakeUpstream, text, tool_calls
from tests.support.side_effects import runs_per_key
from tests.support.waiting import wait_terminal

EXIT_AT_FAILPOINT = 86
PREFACE = "Let me check the weather."


def test_a_crash_after_a_step_with_text_and_calls_streamed_repeats_neither(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    db, effects = new_store("window"), tmp_path / "effects"
    upstream = FakeUpstream().start()
    try:
        # The first stream dies unrecorded, so the resumed turn asks the model again.
        call = ("call_paris", "lookup", '{"city":"Paris"}')
        upstream.push(tool_calls(call, preface=PREFACE), tool_calls(call, preface=PREFACE))
        upstream.push(text("Sunny in Paris."))
        args = (
            "--upstream-base-url",
            upstream.url,
            "--agent",
            "tests.agents.tool_agent:agent",
            "--lease-ttl",
            "2",
            "--scan-interval",
            "0.2",
        )
        env = {"SIDE_EFFECTS_DIR": str(effects)}
        doomed = start_server(
            *args, db=db, env={**env, "DURABLE_RESPONSES_FAILPOINT": "step_streamed"}
        )
        request = {"model": "m", "input": "Weather in Paris?", "background": True}
        httpx.post(f"{doomed.url}/v1/responses", json=request, timeout=30)
        assert wait_for_exit(doomed) == EXIT_AT_FAILPOINT
        response_id = only_response_id(db)

        survivor = start_server(*args, db=db, env=env)
        final = wait_terminal(survivor.url, response_id)

        assert final["status"] == "completed", final["error"]
        kinds = [(i["type"], i["status"]) for i in final["output"]]
        assert kinds == [
            ("message", "completed"),
            ("function_call", "completed"),
            ("function_call_output", "completed"),
            ("message", "completed"),
        ], "the preface is continued, not repeated, and the cut step left no call behind"
        assert Response.model_validate(final).output_text == PREFACE + "Sunny in Paris."
        assert list(runs_per_key(effects, "lookup").values()) == [1]
        assert upstream.refusals == [], "an unpaired history reached the upstream"
        check_replays(survivor.url, response_id, final)
    finally:
        upstream.stop()
