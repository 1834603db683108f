"""Compaction before a model step, as a create's `context_management` asks
(`[{"type": "compaction", "compact_threshold": N}]`).

Before each model step of the turn, the request the step would send is counted
(_tokens.py). When it is over N tokens and holds something no compaction has summarised
yet, the model first summarises it (_summary.py), and a compaction item holding the
summary (_compaction.py) is added to the output. From then on, every model call of the
turn, and of each later turn whose history holds the item, is sent the summary in place
of what it summarised (`model_view`).

The compaction is durable as a step is: the runner commits the item and its events
in one checkpoint before the step's model call (`TurnRunner._compact`). A crash before
that commit leaves no trace of it, and the resumed turn compacts again; after it, the
item is in the output the turn resumes from, and nothing new follows it, so it is never
made twice. No item of the history is changed or dropped: those a compaction summarised
stay stored in the responses and conversations that hold them.
"""

from __future__ import annotations

import logging
from typing import Any

from ._agent import Agent
from ._compaction import compaction_item, has_uncompacted
from ._model import Model, Usage
from ._request import model_request
from ._summary import summarize
from ._tokens import count_tokens
from ._turn import Turn

log = logging.getLogger("recovery.compaction")

Item = dict[str, Any]


class Compactor:
    """The compactions of one turn whose request has `context_management`."""

    def __init__(
        self, turn: Turn, model: Model, agent: Agent, params: dict[str, Any], threshold: int
    ) -> None:
        self._turn = turn
        self._model = model
        self._agent = agent
        self._params = params
        self._threshold = threshold

    @classmethod
    def of(cls, turn: Turn, model: Model, agent: Agent, params: dict[str, Any]) -> Compactor | None:
        """The compactor a turn's request asks for, or None."""
        for entry in params.get("context_management") or ():
            if entry.get("type") == "compaction" and entry.get("compact_threshold"):
                return cls(turn, model, agent, params, int(entry["compact_threshold"]))
        return None

    async def before_step(self, items: list[Item]) -> tuple[Item, Usage] | None:
        """The compaction item for a step that would send `items`, and the usage of its
        summary; None when the step need not compact."""
        if not has_uncompacted(items):
            return None
        request = model_request(self._agent, self._model, self._params, items)
        tokens = await count_tokens(self._model, request)
        if tokens <= self._threshold:
            return None
        log.info(
            "response %s: compacting its history (%d tokens, over %d)",
            self._turn.response_id,
            tokens,
            self._threshold,
        )
        summary, usage = await summarize(
            self._model,
            request,
            observer=self._turn.observer,
            settings=self._turn.settings,
            stop=self._turn.stop,
        )
        return compaction_item(summary), usage
