"""Items found by id among everything a tenant has stored, for `item_reference` input
items: the input items of its responses, the output items of its finished responses, and
the items of its conversations."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ._base import StoreBase
from ._connection import Tx

# The ids asked for, as one JSON array parameter (no limit on the number of `?`s).
_IDS = "(SELECT value FROM json_each(?))"

# Each source is tried in this order; an id found in an earlier one is taken from it.
# The id of an element `e` of a snapshot's `output`, if it is an object (the CASE keeps
# json_extract from reading any other value).
_ELEMENT_ID = "CASE WHEN e.type = 'object' THEN json_extract(e.value, '$.id') END"

_FIND = (
    "SELECT 0, o.item_id, e.value FROM response_outputs AS o"
    " JOIN responses AS r ON r.id = o.response_id, json_each(r.snapshot, '$.output') AS e"
    f" WHERE o.item_id IN {_IDS} AND r.tenant = ? AND {_ELEMENT_ID} = o.item_id"
    " UNION ALL SELECT 1, i.item_id, i.item FROM response_items AS i"
    " JOIN responses AS r ON r.id = i.response_id"
    f" WHERE i.item_id IN {_IDS} AND r.tenant = ?"
    # A `store: false` response is never found, not even while it runs.
    " AND coalesce(json_extract(r.params, '$.store'), 1) <> 0"
    " UNION ALL SELECT 2, i.item_id, i.item FROM conversation_items AS i"
    " JOIN conversations AS c ON c.id = i.conversation_id"
    f" WHERE i.item_id IN {_IDS} AND c.tenant = ?"
    " ORDER BY 1 DESC"
)


def index_outputs(tx: Tx, response_id: str, snapshot: str) -> None:
    """Record the ids of a finishing response's output items (its terminal save)."""
    tx.conn.execute(
        "INSERT OR IGNORE INTO response_outputs (response_id, item_id)"
        f" SELECT ?, {_ELEMENT_ID} FROM json_each(?, '$.output') AS e"
        f" WHERE {_ELEMENT_ID} IS NOT NULL",
        (response_id, snapshot),
    )


class ItemStore(StoreBase):
    async def find_items(self, tenant: str, item_ids: Sequence[str]) -> dict[str, str]:
        """The stored items of `tenant` with these ids (JSON texts, by id), from its
        responses' input items, its finished responses' output items and its
        conversations' items; an id found in none of them is left out, as are another
        tenant's items and those of a running `store: false` response. An id held by
        several (an output item sent back as input) is taken from an output item first,
        then an input item, then a conversation's."""
        if not item_ids:
            return {}
        ids = json.dumps(list(dict.fromkeys(item_ids)))
        rows = await self._readers.fetchall(_FIND, (ids, tenant, ids, tenant, ids, tenant))
        # Sorted last source first, so the first source's row is written last and wins.
        return {row[1]: row[2] for row in rows}
