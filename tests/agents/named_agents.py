"""Agents to host side by side under names (`--agent alpha=tests.agents.named_agents:alpha`).

Each answers with its own tag and the words of the latest user message, upper-cased, so a
test sees which agent ran a turn. A message holding `[[slow]]` takes half a second a word
(long enough for a test to kill the server mid-turn). The model can count its input:
one token per word of every message, the same count its usage reports.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from recovery import Agent, ModelEvent, ModelRequest, TextDelta, Usage, text_of


class Tagged:
    def __init__(self, tag: str) -> None:
        self.name = tag

    def count_input_tokens(self, request: ModelRequest) -> int:
        return sum(len(text_of(item).split()) for item in request.input)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        said = text_of(request.input[-1]).split()
        delay = 0.5 if "[[slow]]" in said else 0.0
        words = [self.name.upper(), *(w.upper() for w in said if w != "[[slow]]")]
        for index, word in enumerate(words):
            await asyncio.sleep(delay)
            yield TextDelta(word if index == 0 else " " + word)
        yield Usage(input_tokens=self.count_input_tokens(request), output_tokens=len(words))


default = Agent()  # the built-in agent, to host as the default beside named ones
alpha = Agent(model=Tagged("alpha"))
beta = Agent(model=Tagged("beta"), instructions="You are beta.")
