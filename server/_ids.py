"""What an id sent by the client may hold.

Ours are ASCII. PostgreSQL's text cannot hold a NUL character, so an id with one names
nothing on either store; it is answered the same on both, before it reaches a store:
in a path it matches no route (404), in a body it is refused by name (400).
"""

from __future__ import annotations

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


def check_id(value: str) -> str:
    if "\x00" in value:
        raise ValueError("an id must not contain a NUL character")
    return value


Id = Annotated[str, AfterValidator(check_id)]
