"""Helpers shared by the /v1/responses integration tests.

Raw SSE is read with httpx and decoded with `parse_sse`, so the stream rules see
exactly what the server sent (nothing hidden by the SDK's parsing); SDK objects are
dumped with `exclude_unset=True` so schema validation sees only what the server sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import httpx
from openai.types.responses import Response

from tests.support.schemas import validate_event, validate_item, validate_response
from tests.support.stream_rules import check_stream, parse_sse

MODEL = "embedded"
# An answer slow enough to be caught running (24 words x 30 ms, about 0.7 s).
SLOW_WORDS = 24
SLOW = f"slow answer [[words {SLOW_WORDS}]] [[delay 30]]"

Event = dict[str, Any]


def dump(obj: Any) -> dict[str, Any]:
    """What the server sent for an SDK object, as JSON. (Serializer warnings are off:
    the SDK's Parsed* output models are not members of the declared output union.)"""
    data: dict[str, Any] = obj.model_dump(mode="json", exclude_unset=True, warnings=False)
    return data


_HELPER_FIELDS = frozenset({"parsed", "parsed_arguments"})


def unparsed(data: Any) -> Any:
    """`data` without the fields the SDK's stream helper adds to the server's objects
    (`parsed` on output text, `parsed_arguments` on function calls)."""
    if isinstance(data, dict):
        return {k: unparsed(v) for k, v in data.items() if k not in _HELPER_FIELDS}
    if isinstance(data, list):
        return [unparsed(v) for v in data]
    return data


def checked_response(response: Response) -> Response:
    """Validate an SDK Response (and each output item) against both schemas."""
    data = dump(response)
    validate_response(data)
    for item in data["output"]:
        validate_item(item)
    return response


def checked_events(
    events: list[Event], *, starting_after: int | None = None, complete: bool = True
) -> list[Event]:
    for event in events:
        validate_event(event)
    check_stream(events, starting_after=starting_after, complete=complete)
    for event in events:
        if "response" in event:
            validate_response(event["response"])
    return events


def sse_events(response: httpx.Response) -> list[Event]:
    """Decode a streamed httpx response (already read) into its event payloads."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_sse(response.text)


def post_stream(http: httpx.Client, **body: Any) -> list[Event]:
    """POST /v1/responses with stream=true; the checked events, read raw."""
    with http.stream("POST", "/v1/responses", json={"model": MODEL, **body, "stream": True}) as r:
        r.read()
    return checked_events(sse_events(r))


def get_stream(
    http: httpx.Client, response_id: str, starting_after: int | None = None
) -> list[Event]:
    """GET /v1/responses/{id}?stream=true[&starting_after=N]; the checked events, read raw."""
    params: dict[str, Any] = {"stream": "true"}
    if starting_after is not None:
        params["starting_after"] = starting_after
    with http.stream("GET", f"/v1/responses/{response_id}", params=params) as r:
        r.read()
    events = sse_events(r)
    checked_events(events, starting_after=starting_after, complete=bool(events))
    return events


def sdk_events(stream: Iterable[Any]) -> list[Event]:
    """The payloads of an SDK stream, as the server sent them."""
    return [dump(event) for event in stream]


def types(events: Iterable[Mapping[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


def text_of(response: Mapping[str, Any]) -> str:
    return "".join(
        part.get("text", "")
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
    )
