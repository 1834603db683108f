"""A server process on the (strict) fake upstream, with an SDK client and a raw HTTP
client, for the issue 16 tests (structured outputs, reasoning, files and images); and
servers on the scripted Responses API upstream (`--upstream-api responses`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai

from tests.conftest import StartServer, make_client
from tests.support.fake_responses_upstream import FakeResponsesUpstream
from tests.support.fake_upstream import FakeUpstream
from tests.support.server import ServerProcess

MODEL = "fake-model"


@dataclass
class Rig:
    fake: FakeUpstream
    server: ServerProcess
    effects: Path
    client: openai.OpenAI
    http: httpx.Client

    def messages(self, index: int) -> list[dict[str, Any]]:
        """The chat messages of the upstream's `index`-th request."""
        messages: list[dict[str, Any]] = self.fake.requests[index]["messages"]
        return messages


@contextlib.contextmanager
def rig_on(
    start_server: StartServer, fake: FakeUpstream, folder: Path, *args: str, tools: bool = False
) -> Iterator[Rig]:
    """A server pointed at `fake`; with `tools`, hosting tests/agents/tool_agent.py."""
    cli = ["--upstream-base-url", fake.url, "--retry-base-delay", "0.01", *args]
    env: dict[str, str] = {}
    if tools:
        cli += ["--agent", "tests.agents.tool_agent:agent"]
        env["SIDE_EFFECTS_DIR"] = str(folder)
    server = start_server(*cli, env=env)
    with make_client(server.url) as client, httpx.Client(base_url=server.url, timeout=30) as http:
        yield Rig(fake, server, folder, client, http)


@dataclass
class ResponsesRig:
    fake: FakeResponsesUpstream
    server: ServerProcess
    effects: Path
    client: openai.OpenAI
    http: httpx.Client

    def sent(self, index: int) -> list[dict[str, Any]]:
        """The `input` of the upstream's `index`-th request."""
        return self.fake.inputs(index)


ServeResponses = Callable[..., ResponsesRig]


@contextlib.contextmanager
def responses_servers(
    start_server: StartServer, fake: FakeResponsesUpstream, folder: Path
) -> Iterator[ServeResponses]:
    """Starts servers on the Responses upstream `fake`: `serve(*args)` hosts the tool agent
    (tests/agents/tool_agent.py, its side effects in `folder`) unless `tools=False`, with
    `--upstream-api responses` by flag, or by its environment variable with `env=True`."""
    opened: list[openai.OpenAI | httpx.Client] = []

    def serve(*args: str, tools: bool = True, env: bool = False) -> ResponsesRig:
        cli = ["--upstream-base-url", fake.url, "--retry-base-delay", "0.01"]
        variables: dict[str, str] = {}
        if env:
            variables["DURABLE_RESPONSES_UPSTREAM_API"] = "responses"
        else:
            cli += ["--upstream-api", "responses"]
        if tools:
            cli += ["--agent", "tests.agents.tool_agent:agent"]
            variables["SIDE_EFFECTS_DIR"] = str(folder)
        server = start_server(*cli, *args, env=variables)
        client, http = make_client(server.url), httpx.Client(base_url=server.url, timeout=30.0)
        opened.extend((client, http))
        return ResponsesRig(fake, server, folder, client, http)

    try:
        yield serve
    finally:
        for each in opened:
            each.close()
