"""Issue 16, item 8: the OpenAI Agents SDK's compaction session
(`OpenAIResponsesCompactionSession`, of `openai-agents`, a dev extra) against a real server
process with the embedded model.

After a turn, the session calls `responses.compact` (here on every turn: its decision
hook says yes), with the turn's `previous_response_id` or with its stored items as
`input`, and replaces its history with the answer: the user's message and one compaction
item. The next turn sends that history with its new message, and the model is given the
summary in place of the first turn's answer (the embedded model counts words as input
tokens, so the usage shows it).

Every run has tracing off: nothing is sent to openai.com.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import (
    Agent,
    OpenAIResponsesCompactionSession,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    SQLiteSession,
)
from openai import AsyncOpenAI

from tests.support.server import ServerProcess

QUIET = RunConfig(tracing_disabled=True)


@pytest.fixture
async def sdk(server: ServerProcess) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(
        base_url=f"{server.url}/v1", api_key="test-key", max_retries=0, timeout=30.0
    ) as client:
        yield client


def _always(context: dict[str, Any]) -> bool:
    return True


@pytest.mark.parametrize("mode", ["previous_response_id", "input"])
async def test_a_compaction_session_sends_the_compacted_history_next_turn(
    sdk: AsyncOpenAI, mode: Any
) -> None:
    agent: Agent[Any] = Agent(
        name="assistant", instructions="Be brief.", model=OpenAIResponsesModel("embedded", sdk)
    )
    underlying = SQLiteSession(f"compaction-{mode}")
    session = OpenAIResponsesCompactionSession(
        f"compaction-{mode}",
        underlying,
        client=sdk,
        compaction_mode=mode,
        should_trigger_compaction=_always,
    )
    try:
        first = await Runner.run(
            agent, "tell me a story [[words 300]]", session=session, run_config=QUIET
        )
        compacted = await session.get_items()
        second = await Runner.run(agent, "the end [[words 2]]", session=session, run_config=QUIET)
    finally:
        underlying.close()

    assert first.final_output.count(" ") == 299
    assert [item.get("type") for item in compacted] == ["message", "compaction"]
    assert second.final_output == "the end"
    assert second.last_response_id is not None
    sent = await sdk.responses.input_items.list(second.last_response_id, order="asc")
    assert [item.type for item in sent.data] == ["message", "compaction", "message"]
    stored = await sdk.responses.retrieve(second.last_response_id)
    assert stored.usage is not None
    assert stored.usage.input_tokens < 150  # not the 300 words of the first answer
