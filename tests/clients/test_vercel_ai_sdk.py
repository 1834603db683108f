"""The Vercel AI SDK (`ai` with `@ai-sdk/openai`, pinned in tests/clients/vercel_ai/) holds a
two-turn chat with the server (issue 16). With its default `store: true` it sends the
first answer back as an `item_reference`, which was a 400 before: every chat failed on its
second turn. Now the reference is resolved, and the model is given the answer's text.

Skipped without Node.js and npm, or when the pinned packages cannot be installed (no
registry in reach); installing them takes a few seconds, the chat about one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.support.server import ServerProcess

PROJECT = Path(__file__).parent / "vercel_ai"


@pytest.fixture(scope="session")
def vercel_ai(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of tests/clients/vercel_ai with its locked packages installed."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js and npm are needed for the Vercel AI SDK")
    folder = tmp_path_factory.mktemp("vercel_ai")
    for name in ("package.json", "package-lock.json", "chat.mjs"):
        shutil.copy(PROJECT / name, folder / name)
    installed = subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=45,
    )
    if installed.returncode != 0:
        pytest.skip(f"the Vercel AI SDK could not be installed: {installed.stderr[-500:]}")
    return folder


def test_a_two_turn_chat_sends_the_first_answer_by_reference(
    vercel_ai: Path, server: ServerProcess, http: httpx.Client
) -> None:
    chat = subprocess.run(
        ["node", "chat.mjs"],
        cwd=vercel_ai,
        env={"BASE_URL": server.url, "PATH": str(Path(shutil.which("node") or "node").parent)},
        capture_output=True,
        text=True,
        timeout=30,
    )

    assert chat.returncode == 0, chat.stderr
    turns = json.loads(chat.stdout.strip().splitlines()[-1])
    assert turns["first"]["text"] == "alpha beta"
    assert turns["second"]["text"] == "gamma"
    # The words of the whole history: both user messages and the answer in between.
    assert turns["second"]["inputTokens"] == 4 + 2 + 3
    items = http.get(f"/v1/responses/{turns['second']['id']}/input_items?order=asc").json()
    answer = http.get(f"/v1/responses/{turns['first']['id']}").json()["output"][0]
    assert items["data"][1] == answer
