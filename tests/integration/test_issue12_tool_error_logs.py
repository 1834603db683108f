"""Issue 12, item 8: request data in logs.

The bug: a tool's exception was logged with %r (the tool phase, now
recovery/_tool_phase.py), so its message, which often repeats the call's arguments, put
user input in the log at info level.

The fix: the log names the tool, the call id and the exception's type; the message (with
the traceback) is logged at debug level only. The model still sees the message in the
call's output.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import httpx
import pytest

from tests.conftest import StartServer


@pytest.mark.parametrize(
    "level", [pytest.param("info", id="info"), pytest.param("debug", id="debug")]
)
def test_a_tools_exception_message_is_logged_only_at_debug_level(
    start_server: StartServer, tmp_path: Path, level: str
) -> None:
    secret = f"user-data-{secrets.token_hex(8)}"
    server = start_server(
        "--agent",
        "tests.agents.tool_agent:agent",
        "--log-level",
        level,
        env={"SIDE_EFFECTS_DIR": str(tmp_path / "effects")},
    )
    call = json.dumps({"reason": secret})
    body = {"model": "m", "input": f"[[call explode {call}]]"}
    response = httpx.post(f"{server.url}/v1/responses", json=body, timeout=30).json()
    output = next(i for i in response["output"] if i["type"] == "function_call_output")
    assert output["output"] == f"Error: tool 'explode' failed: ValueError: {secret}"
    call_id = output["call_id"]

    log = server.log()
    assert f"tool explode (call {call_id}) raised ValueError" in log
    if level == "info":
        assert secret not in log
    else:
        assert f"tool explode (call {call_id}) raised: {secret}" in log
