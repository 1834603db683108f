"""The agents one runtime serves, chosen by the `model` a request names.

A server hosts a default agent (the built-in one, or `--agent module:attr`), named agents
(`--agent NAME=module:attr`), or both. A request whose `model` is a named agent's name
runs that agent; any other name runs the default agent, as a server with one agent always
did; with no default agent, any other name is refused before anything is stored.

The choice is made again from the stored request whenever a turn is started (a claim, a
recovery after a crash), so a recovered turn runs with the agent its request named. A
stored turn whose agent this process no longer serves (the server was restarted with
other agents) ends failed rather than running with another agent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from store import ResponseRecord

from ._agent import Agent
from ._errors import NotFound
from ._model import Model
from ._workflow import Workflow

Hosted = Agent | Workflow


class Roster:
    def __init__(self, default: Hosted | None, named: Mapping[str, Hosted], model: Model) -> None:
        if default is None and not named:
            raise ValueError("a runtime needs a default agent or at least one named agent")
        self.default = default
        self.named = dict(named)
        self._fallback = model  # the model of an agent that has none of its own

    @property
    def names(self) -> list[str]:
        """The named agents' names, in the order they were given."""
        return list(self.named)

    def find(self, model: str | None) -> Hosted | None:
        """The agent a request naming `model` runs; None when nobody serves it."""
        if model is not None and model in self.named:
            return self.named[model]
        return self.default

    def choose(self, model: str | None) -> Hosted:
        """As `find`, but NotFound (404 `model_not_found`) when nobody serves `model`."""
        agent = self.find(model)
        if agent is None:
            raise NotFound(
                f"The model '{model}' does not exist or you do not have access to it; this"
                f" server serves {', '.join(repr(n) for n in self.names)}.",
                param="model",
                code="model_not_found",
            )
        return agent

    def model_of(self, agent: Hosted) -> Model:
        """The model that runs `agent`'s steps (a workflow's are never asked of it)."""
        return (agent.model if isinstance(agent, Agent) else None) or self._fallback

    def for_record(self, record: ResponseRecord) -> Hosted | None:
        """The agent a stored turn runs with, from the `model` of its stored request."""
        if not self.named:
            return self.default  # one agent serves every model: no need to read the request
        return self.find(json.loads(record.params).get("model"))

    def models(self) -> list[Model]:
        """Every model an agent may run with, and the fallback, each once (to watch and to
        close)."""
        agents = [a for a in (self.default, *self.named.values()) if a is not None]
        found = {id(m): m for m in (self._fallback, *(self.model_of(a) for a in agents))}
        return list(found.values())
