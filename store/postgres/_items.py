"""Items found by id among everything a tenant has stored, for `item_reference` input
items: what store/sqlite/_items.py does, in PostgreSQL's terms.

The JSON documents are read in Python, never by PostgreSQL's json functions: those fail
on a document holding `\\u0000` (text cannot hold NUL), which any client can send.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ._base import PostgresBase

# Candidates, each source in order (0: a finished response's output items, 1: an input
# item, 2: a conversation's item); an id found in an earlier source is taken from it.
_FIND = (
    "SELECT 0 AS source, x.item_id, r.snapshot AS doc, NULL AS params"
    " FROM response_outputs AS x JOIN responses AS r ON r.id = x.response_id"
    " WHERE x.item_id = ANY($1::text[]) AND r.tenant = $2"
    " UNION ALL SELECT 1, i.item_id, i.item, r.params FROM response_items AS i"
    " JOIN responses AS r ON r.id = i.response_id"
    " WHERE i.item_id = ANY($1::text[]) AND r.tenant = $2"
    " UNION ALL SELECT 2, i.item_id, i.item, NULL FROM conversation_items AS i"
    " JOIN conversations AS c ON c.id = i.conversation_id"
    " WHERE i.item_id = ANY($1::text[]) AND c.tenant = $2"
)

# The terminal save's part that records the ids of the output items (store/postgres/_runs.py):
# `u` is its UPDATE, $1 the response's id, $14 the ids (`output_ids`).
INDEX_OUTPUTS = (
    "outputs AS (INSERT INTO response_outputs (response_id, item_id)"
    " SELECT $1, x FROM u, unnest($14::text[]) AS x ON CONFLICT DO NOTHING)"
)


def output_items(snapshot: str) -> list[dict[str, Any]]:
    """A snapshot's output items that have an id (none if it has no output array)."""
    output = json.loads(snapshot).get("output")
    if not isinstance(output, list):
        return []
    return [o for o in output if isinstance(o, dict) and isinstance(o.get("id"), str)]


def output_ids(snapshot: str) -> list[str]:
    return [o["id"] for o in output_items(snapshot)]


def _stored(params: str) -> bool:
    """False for a `store: false` response, never found, not even while it runs."""
    return json.loads(params).get("store") is not False


class ItemStore(PostgresBase):
    async def find_items(self, tenant: str, item_ids: Sequence[str]) -> dict[str, str]:
        """As SQLite's (store/sqlite/_items.py)."""
        if not item_ids:
            return {}
        ids = list(dict.fromkeys(item_ids))
        rows = await self._db.fetch("find items", _FIND, ids, tenant)
        found: dict[str, tuple[int, str]] = {}
        for row in rows:
            item_id, source = row["item_id"], row["source"]
            if item_id in found and found[item_id][0] <= source:
                continue
            if source == 0:
                item = next((o for o in output_items(row["doc"]) if o["id"] == item_id), None)
                if item is None:
                    continue
                found[item_id] = (source, json.dumps(item, separators=(",", ":")))
            elif source == 1 and not _stored(row["params"]):
                continue
            else:
                found[item_id] = (source, row["doc"])
        return {item_id: item for item_id, (_, item) in found.items()}
