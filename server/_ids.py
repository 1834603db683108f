"""What an id sent by the client may hold.

Ours are ASCII. PostgreSQL's text cannot hold a NUL character, so an id with one names
nothing on either store; it is answered the same on both, before it reaches a store:
in a path it matches no route (404), in a body it is refused by name (400). An id a
client gives in a body must also be one URL path segment, or the item it names could
be listed but never fetched or deleted on its own.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator
from starlette.convertors import Convertor, register_url_convertor


class IdConvertor(Convertor[str]):
    """`{name:id}` in a route: one path segment without a NUL character."""

    regex = "[^/\x00]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("id", IdConvertor())


# An id the client gives an item must name it in a URL later (GET and DELETE of a
# conversation's item): one path segment that no client or proxy rewrites.
_UNADDRESSABLE = re.compile(r"[/?#%\\\s]")
MAX_ID = 256


def check_id(value: str) -> str:
    if "\x00" in value:
        raise ValueError("an id must not contain a NUL character")
    if not value or len(value) > MAX_ID:
        raise ValueError(f"an id must be 1 to {MAX_ID} characters long")
    if value in (".", "..") or not value.isprintable() or _UNADDRESSABLE.search(value):
        raise ValueError(
            "an id must be usable as one URL path segment: no '/', '?', '#', '%', '\\', "
            "spaces or control characters, and not '.' or '..'"
        )
    return value


Id = Annotated[str, AfterValidator(check_id)]
