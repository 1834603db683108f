"""`item_reference` input items: `{"type": "item_reference", "id"}` stands for an item the
tenant has stored (an input or output item of any of its responses, or an item of one of
its conversations), as OpenAI's clients send earlier turns' items when `store` is on.

A reference is replaced by the item it names before anything is checked or stored, so the
tool-pairing rules (G5) see the item itself, and the stored input (what `input_items`
lists, what later histories read) holds the item, never the reference. An id the tenant
has not stored, another tenant's included, is refused naming the reference.
"""

from __future__ import annotations

import json
from typing import Any

from store import Store

from ._errors import InvalidRequest

Item = dict[str, Any]


def is_reference(item: Item) -> bool:
    return item.get("type") == "item_reference"


async def resolve_references(
    store: Store, items: list[Item], *, tenant: str, param: str = "input"
) -> list[Item]:
    """`items` with each `item_reference` replaced by the stored item it names. Raises
    InvalidRequest `item_not_found` (`param` `input[3].id`) for the first id not found."""
    wanted = [item["id"] for item in items if is_reference(item)]
    if not wanted:
        return items
    found = await store.find_items(tenant, wanted)
    resolved = []
    for index, item in enumerate(items):
        if is_reference(item):
            text = found.get(item["id"])
            if text is None:
                raise _not_found(item["id"], f"{param}[{index}].id")
            item = json.loads(text)
        resolved.append(item)
    return resolved


def check_new_ids(stored: list[Item], items: list[Item], *, param: str) -> None:
    """Refuse items a conversation would hold twice: one whose id the conversation (its
    `stored` items) has, or that an earlier item of `items` has. A reference to an item
    of the conversation it is added to is the common case: that item is already part of
    every history the conversation gives."""
    held = {item.get("id") for item in stored}
    seen: set[str] = set()
    for index, item in enumerate(items):
        item_id = item.get("id")
        if item_id is None:
            continue
        if item_id in held:
            raise duplicate_item(item_id, f"{param}[{index}].id")
        if item_id in seen:
            raise InvalidRequest(
                f"Item with id '{item_id}' appears twice in '{param}'; an item can be added"
                " to a conversation once.",
                param=f"{param}[{index}].id",
                code="duplicate_item",
            )
        seen.add(item_id)


def duplicate_item(item_id: str | None, param: str) -> InvalidRequest:
    """The refusal of an item a conversation already holds (None: which one is unknown)."""
    which = "An item" if item_id is None else f"Item with id '{item_id}'"
    return InvalidRequest(
        f"{which} is already in this conversation; an item can be added to a conversation "
        "once (leave it out: it is already in the history).",
        param=param,
        code="duplicate_item",
    )


def _not_found(item_id: str, param: str) -> InvalidRequest:
    return InvalidRequest(
        f"Item with id '{item_id}' not found. An 'item_reference' must name an item this "
        "API key's responses or conversations have stored.",
        param=param,
        code="item_not_found",
    )
