"""A history compacted on request: `POST /v1/responses/compact`, OpenAI's
`client.responses.compact(...)`.

The history is the `previous_response_id` chain (if any), then the request's input, with
its `item_reference`s resolved. It is checked as a create's is: a call that no output
answers cannot be compacted away (its output would later answer nothing, G5), and a
compaction item another server made is refused unless the model reads it
(_compaction.py). The model of the agent that the request's `model` names summarises the
history as a turn's model would be sent it (_summary.py): the answer lists the user's
messages, then one compaction item holding the summary, which is what a client sends, with
its next message, as its next turn's input.

Nothing is stored and nothing runs in the background: the history is read, never changed,
so a compaction cut short (by a crash, or a client gone) is simply asked again.
"""

from __future__ import annotations

import time
from typing import Any

from store import Store

from ._agent import Agent
from ._compaction import (
    check_compaction_items,
    compaction_item,
    is_user_message,
    model_view,
    takes_compaction_items,
)
from ._history import check_tool_pairing
from ._ids import new_id
from ._inspect import turn_history
from ._observer import Observer
from ._references import resolve_references
from ._request import model_request
from ._response import usage_object
from ._roster import Roster
from ._settings import RuntimeSettings
from ._summary import summarize


class Compactions:
    def __init__(
        self, store: Store, roster: Roster, observer: Observer, settings: RuntimeSettings
    ) -> None:
        self._store = store
        self._roster = roster
        self._observer = observer
        self._settings = settings

    async def compact(self, params: dict[str, Any], *, tenant: str) -> dict[str, Any]:
        """The compacted response (`object: "response.compaction"`) of the history that
        `params` (a create's, validated, its input normalized) names."""
        agent = self._roster.choose(params.get("model"))
        model = self._roster.model_of(agent)
        history = await turn_history(
            self._store, tenant, previous_response_id=params.get("previous_response_id")
        )
        given = await resolve_references(self._store, params["input"], tenant=tenant)
        check_tool_pairing(history, given)
        check_compaction_items(
            history,
            given,
            reads_foreign=takes_compaction_items(model),
            history_param="previous_response_id",
        )
        # A workflow's steps ask no model: its server's model summarises, as for an agent
        # without instructions or tools of its own.
        summarizer = agent if isinstance(agent, Agent) else Agent()
        request = model_request(summarizer, model, params, history + given)
        summary, usage = await summarize(
            model, request, observer=self._observer, settings=self._settings
        )
        kept = [item for item in model_view(history + given) if is_user_message(item)]
        return {
            "id": new_id("resp"),
            "object": "response.compaction",
            "created_at": int(time.time()),
            "output": [*kept, compaction_item(summary)],
            "usage": usage_object(usage),
        }
