"""The Vercel AI SDK (`ai` with `@ai-sdk/openai`, pinned in tests/clients/vercel_ai/) holds a
two-turn chat with the server (issue 16). With its default `store: true` it sends the
first answer back as an `item_reference`, which was a 400 before: every chat failed on its
second turn. Now the reference is resolved, and the model is given the answer's text.

Skipped without Node.js and npm, or when the pinned packages cannot be installed (no
registry in reach); installing them takes a few seconds, the chat about one.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.clients._node import installed, run_script
from tests.support.server import ServerProcess


@pytest.fixture(scope="session")
def vercel_ai(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return installed(tmp_path_factory, "vercel_ai", "the Vercel AI SDK")


def test_a_two_turn_chat_sends_the_first_answer_by_reference(
    vercel_ai: Path, server: ServerProcess, http: httpx.Client
) -> None:
    chat = run_script(vercel_ai, "chat.mjs", server.url)

    assert chat.returncode == 0, chat.stderr
    turns = json.loads(chat.stdout.strip().splitlines()[-1])
    assert turns["first"]["text"] == "alpha beta"
    assert turns["second"]["text"] == "gamma"
    # The words of the whole history: both user messages and the answer in between.
    assert turns["second"]["inputTokens"] == 4 + 2 + 3
    items = http.get(f"/v1/responses/{turns['second']['id']}/input_items?order=asc").json()
    answer = http.get(f"/v1/responses/{turns['first']['id']}").json()["output"][0]
    assert items["data"][1] == answer
