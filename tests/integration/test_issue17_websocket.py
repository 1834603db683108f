"""Issue 17, WebSocket mode: `client.responses.connect()` of the openai SDK, served on
/v1/responses (docs/protocol.md section 13). Before it, the upgrade was refused (501).

A `response.create` on a socket is an HTTP create with `stream: true`: the same events,
the same errors (as `error` events, the socket staying open), the same stored response.
Creates of one `stream_id` run in order, different stream_ids side by side, and every
event of a lane carries its stream_id. The upgrade is authenticated like an HTTP request,
tenants stay apart, and the limits (message size, idle time, sockets and streams per
tenant) hold. `response.follow`, this server's extension, resumes a background response
on a new socket without a gap or a repeat.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest
import websockets
from starlette.types import Message
from websockets.exceptions import ConnectionClosed, InvalidStatus

from server import Settings
from server._auth import Keys
from server._cli import hypercorn_config
from server._websocket import SocketEndpoint
from tests.conftest import StartServer
from tests.integration._issue17_support import (
    MODEL,
    Event,
    checked,
    connect,
    get,
    http,
    of_lane,
    raw,
    replay,
    response_id,
    split_responses,
    text_of,
    types,
    unlaned,
    ws_url,
)
from tests.support.schemas import validate_error_envelope
from tests.support.server import ServerProcess

SLOW = "slow lane [[words 40]] [[delay 30]]"  # about 1.2 s of streaming


# -- creating ----------------------------------------------------------------------------


async def test_a_foreground_create_streams_as_over_http(server: ServerProcess) -> None:
    async with connect(server.url) as ws:
        await ws.create(input="hello socket [[words 4]]")
        events = await ws.response()

    checked(events)
    assert types(events)[:2] == ["response.created", "response.in_progress"]
    assert events[-1]["type"] == "response.completed"
    assert all("stream_id" not in e for e in events)  # none was asked for
    assert text_of(events) == "hello socket hello socket"
    stored = await get(server.url, f"/v1/responses/{response_id(events)}")
    assert stored == events[-1]["response"]


async def test_a_background_create_streams_its_log(server: ServerProcess) -> None:
    async with connect(server.url) as ws:
        await ws.create(input="in the background [[words 5]]", background=True, stream_id="bg")
        events = await ws.response()

    checked(events)
    assert types(events)[:2] == ["response.created", "response.queued"]
    assert all(e["stream_id"] == "bg" for e in events)
    assert unlaned(events) == await replay(server.url, response_id(events))  # the log, as committed


async def test_creates_of_a_lane_run_in_order_and_lanes_run_side_by_side(
    server: ServerProcess,
) -> None:
    async with connect(server.url) as ws:
        await ws.create(input=SLOW, stream_id="a")
        await ws.create(input="second of a [[words 3]]", stream_id="a", background=True)
        await ws.create(input="only of b [[words 3]]", stream_id="b")
        await ws.create(input="no lane named [[words 3]]")
        ends = 0
        while ends < 4:
            ends += (await ws.recv())["type"] == "response.completed"
        events = ws.events

    lane_a, lane_b, lane_none = (of_lane(events, lane) for lane in ("a", "b", None))
    assert len(lane_a) + len(lane_b) + len(lane_none) == len(events)
    first, second = split_responses(lane_a)  # one after the other: never interleaved
    assert text_of(first).startswith("slow lane") and text_of(second) == "second of a"
    for response in (first, second, lane_b, lane_none):
        checked(response)
    # b and the unnamed lane did not wait for a's slow answer.
    slow_end = events.index(first[-1])
    assert events.index(lane_b[-1]) < slow_end and events.index(lane_none[-1]) < slow_end


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"model": MODEL}, id="missing-input"),
        pytest.param({"model": MODEL, "input": "x", "temperature": 5}, id="out-of-range"),
        pytest.param({"model": MODEL, "input": "x", "bogus": 1}, id="unknown-parameter"),
        pytest.param({"model": MODEL, "input": [{"role": "robot", "content": "x"}]}, id="role"),
        pytest.param(
            {"model": MODEL, "input": "x", "background": True, "store": False}, id="combination"
        ),
    ],
)
async def test_a_bad_create_is_an_error_event_with_the_http_error(
    server: ServerProcess, body: dict[str, Any]
) -> None:
    async with http(server.url) as client:
        answer = await client.post("/v1/responses", json={**body, "stream": True})
    assert answer.status_code == 400

    async with connect(server.url) as ws:
        await ws.send({"type": "response.create", **body, "stream_id": "s"})
        error = await ws.recv()
        await ws.create(input="still here [[words 2]]", stream_id="s")
        after = await ws.response()

    assert error == {"type": "error", "status": 400, **answer.json(), "stream_id": "s"}
    assert after[-1]["type"] == "response.completed"


async def test_a_create_that_asks_not_to_stream_is_refused(server: ServerProcess) -> None:
    async with connect(server.url) as ws:
        await ws.create(input="x", stream=False)
        error = await ws.recv()

    assert error["type"] == "error" and error["status"] == 400
    assert (error["error"]["param"], error["error"]["code"]) == ("stream", "invalid_value")


# -- what is not an event ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "code", "param"),
    [
        pytest.param("this is not json", "invalid_json", None, id="not-json"),
        pytest.param(b"\x00\x01binary", "invalid_json", None, id="binary"),
        pytest.param("[1, 2]", "invalid_json", None, id="not-an-object"),
        pytest.param('{"a": NaN}', "invalid_json", None, id="nan"),
        pytest.param("{}", "missing_required_parameter", "type", id="no-type"),
        pytest.param('{"type": "session.update"}', "invalid_value", "type", id="unknown-type"),
        pytest.param(
            '{"type": "response.create", "stream_id": 7}', "invalid_type", "stream_id", id="lane"
        ),
        pytest.param(
            '{"type": "response.follow", "response_id": "resp_x", "stream_id": {"a": [1]}}',
            "invalid_type",
            "stream_id",
            id="lane-object",
        ),
    ],
)
async def test_a_malformed_message_is_an_error_event_and_the_socket_goes_on(
    server: ServerProcess, message: str | bytes, code: str, param: str | None
) -> None:
    async with raw(server.url) as ws:
        await ws.send(message)
        error = await ws.recv()
        await ws.create(input="still here [[words 2]]")
        after = await ws.response()

    assert error["type"] == "error" and error["status"] == 400
    validate_error_envelope({"error": error["error"]})
    assert (error["error"]["type"], error["error"]["code"]) == ("invalid_request_error", code)
    assert error["error"]["param"] == param
    assert "stream_id" not in error  # a stream_id that is not a string is echoed nowhere
    assert after[-1]["type"] == "response.completed"


# -- keys and tenants -------------------------------------------------------------------


@pytest.mark.parametrize(("key", "code"), [("wrong", "invalid_api_key"), (None, "missing_api_key")])
async def test_a_bad_api_key_is_refused_at_the_upgrade(
    start_server: StartServer, key: str | None, code: str
) -> None:
    server = start_server("--api-keys", "alice:alice-key")

    with pytest.raises(InvalidStatus) as refused:
        async with raw(server.url, key):
            pass

    answer = refused.value.response
    assert answer.status_code == 401
    envelope = json.loads(answer.body or b"")
    validate_error_envelope(envelope)
    assert envelope["error"]["code"] == code
    async with connect(server.url, "alice-key") as ws:  # the right key opens it
        await ws.create(input="mine [[words 1]]")
        assert (await ws.response())[-1]["type"] == "response.completed"


async def test_the_sdk_reports_a_refused_upgrade(start_server: StartServer) -> None:
    server = start_server("--api-keys", "alice:alice-key")

    with pytest.raises(InvalidStatus, match="401"):
        async with connect(server.url, "wrong"):
            pass


async def test_a_tenant_cannot_steer_follow_or_see_another_s_response(
    start_server: StartServer,
) -> None:
    server = start_server("--api-keys", "alice:alice-key,bob:bob-key")

    async with connect(server.url, "alice-key") as alice, raw(server.url, "bob-key") as bob:
        await alice.create(input=SLOW, background=True, stream_id="a")
        created = await alice.recv()
        target = created["response"]["id"]
        await bob.steer(target, "let me in")
        steer = await bob.recv()
        await bob.send({"type": "response.follow", "response_id": target, "starting_after": -1})
        follow = await bob.recv()
        alice_events = [created, *await alice.response("a")]
        bob_rest = await bob.quiet(0.5)

    assert steer["type"] == "response.steer.failed"
    assert steer["error"]["code"] == "response_not_found" and "id" not in steer["steer"]
    assert steer["steer"] == {"input": "let me in", "previous_response_id": target}
    assert follow["type"] == "error" and follow["status"] == 404
    assert follow["error"]["code"] == "response_not_found"
    assert bob_rest == []  # nothing of alice's response reached bob
    assert not [e for e in alice_events if e["type"].startswith("response.steer")]
    checked(alice_events)


# -- limits -----------------------------------------------------------------------------


async def test_a_message_over_the_limit_is_refused_and_twice_the_limit_closes(
    start_server: StartServer,
) -> None:
    server = start_server("--ws-max-message-bytes", "4096")

    async with raw(server.url) as ws:
        await ws.create(input="x " * 2500)
        error = await ws.recv()
        await ws.create(input="small [[words 2]]")
        after = await ws.response()
        await ws.create(input="x " * 4500)
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()

    assert error["status"] == 413 and error["error"]["code"] == "request_too_large"
    assert after[-1]["type"] == "response.completed"
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


async def test_an_idle_socket_is_closed_but_not_while_a_response_streams(
    start_server: StartServer,
) -> None:
    server = start_server("--ws-idle-timeout", "0.5")

    async with raw(server.url) as ws:
        await ws.create(input="longer than idle [[words 30]] [[delay 50]]")  # 1.5 s
        events = await ws.response()
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv(within=10)

    assert events[-1]["type"] == "response.completed"
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1000, "Idle for 0.5 seconds.")


async def test_open_sockets_per_tenant_are_limited(start_server: StartServer) -> None:
    server = start_server("--ws-max-sockets-per-tenant", "1")

    async with raw(server.url):
        with pytest.raises(InvalidStatus) as refused:
            async with raw(server.url):
                pass
    async with raw(server.url) as again:  # the first one's slot is free again
        await again.create(input="ok [[words 1]]")
        await again.response()

    assert refused.value.response.status_code == 429
    assert json.loads(refused.value.response.body or b"")["error"]["code"] == "too_many_streams"


async def test_each_response_streamed_on_a_socket_takes_a_stream_slot(
    start_server: StartServer,
) -> None:
    server = start_server("--max-streams-per-tenant", "1")

    async with connect(server.url) as ws:
        await ws.create(input=SLOW, stream_id="a")
        await ws.until(lambda e: e["type"] == "response.created", "the first response")
        await ws.create(input="second [[words 1]]", stream_id="b")
        refused = await ws.until(lambda e: e.get("stream_id") == "b", "lane b's answer")
        await ws.response("a")
        await ws.create(input="second [[words 1]]", stream_id="b")
        after = await ws.response("b")

    assert refused[-1]["type"] == "error" and refused[-1]["status"] == 429
    assert refused[-1]["error"]["code"] == "too_many_streams"
    assert refused[-1]["error"]["headers"] == {"retry-after": "1"}
    assert after[-1]["type"] == "response.completed"


def test_hypercorn_sends_pings_and_bounds_a_message_at_twice_the_limit() -> None:
    config = hypercorn_config(Settings(ws_ping_interval=7, max_body_bytes=4096))
    assert config.websocket_ping_interval == 7
    assert config.websocket_max_message_size == 2 * 4096
    config = hypercorn_config(Settings(ws_ping_interval=0, ws_max_message_bytes=2048))
    assert config.websocket_ping_interval is None
    assert config.websocket_max_message_size == 2 * 2048


# -- following a background response on a new socket ------------------------------------


async def test_follow_resumes_a_background_response_without_gap_or_repeat(
    server: ServerProcess,
) -> None:
    async with connect(server.url) as first:
        await first.create(input=SLOW, background=True, stream_id="x")
        seen = await first.until(lambda e: e["type"] == "response.output_text.delta", "a delta")
    target, last = response_id(seen), seen[-1]["sequence_number"]  # the socket dropped here

    async with raw(server.url) as second:
        await second.send(
            {
                "type": "response.follow",
                "response_id": target,
                "starting_after": last,
                "stream_id": "y",
            }
        )
        rest = await second.response()

    assert all(e["stream_id"] == "y" for e in rest)
    assert rest[0]["sequence_number"] == last + 1
    assert unlaned(seen) + unlaned(rest) == await replay(server.url, target)
    checked(seen + rest)


async def test_follow_refuses_what_it_cannot_follow(server: ServerProcess) -> None:
    async with connect(server.url) as ws:
        await ws.create(input="foreground [[words 1]]")
        foreground = response_id(await ws.response())
    refusals: list[Event] = []
    async with raw(server.url) as ws:
        for event in (
            {"response_id": foreground},
            {"response_id": "resp_nope"},
            {"response_id": "resp_\u0000nul"},
            {},
            {"response_id": foreground, "starting_after": -2},
            {"response_id": foreground, "after": 3},
        ):
            await ws.send({"type": "response.follow", **event})
            refusals.append(await ws.recv())

    assert [(e["status"], e["error"]["code"], e["error"]["param"]) for e in refusals] == [
        (400, "invalid_value", "response_id"),
        (404, "response_not_found", "response_id"),
        (404, "response_not_found", "response_id"),
        (400, "missing_required_parameter", "response_id"),
        (400, "invalid_value", "starting_after"),
        (400, "unknown_parameter", "after"),
    ]


async def test_the_root_path_serves_the_socket_too(server: ServerProcess) -> None:
    async with websockets.connect(ws_url(server.url, "/responses")) as ws:
        await ws.send(json.dumps({"type": "response.create", "model": MODEL, "input": "root"}))
        while json.loads(await ws.recv())["type"] != "response.completed":
            pass


async def test_a_client_that_goes_away_stops_its_foreground_response(
    server: ServerProcess,
) -> None:
    async with connect(server.url) as ws:
        await ws.create(input=SLOW)
        target = response_id(await ws.until(lambda e: e["type"] == "response.created", "it"))
    for _ in range(200):
        status = (await get(server.url, f"/v1/responses/{target}"))["status"]
        if status != "in_progress":
            break
        await asyncio.sleep(0.05)

    assert status == "cancelled"  # as an HTTP stream's client that hangs up


def test_without_the_denial_extension_a_refused_socket_is_closed_with_a_reason() -> None:
    """(An ASGI server without `websocket.http.response`, e.g. behind another server.)"""
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(message: Message) -> None:
        sent.append(message)

    settings = Settings()
    app = SimpleNamespace(
        state=SimpleNamespace(settings=settings, context=SimpleNamespace(settings=settings))
    )
    scope = {"type": "websocket", "path": "/v1/responses", "headers": [], "extensions": {}}
    endpoint = SocketEndpoint(Keys.load("alice:alice-key", None))
    asyncio.run(endpoint({**scope, "app": app}, receive, send))

    accept, event, close = sent
    assert accept["type"] == "websocket.accept"
    error_event = json.loads(event["text"])
    assert error_event["type"] == "error" and error_event["status"] == 401
    assert error_event["error"]["code"] == "missing_api_key"
    assert close["type"] == "websocket.close"
    assert close["code"] == 1008  # policy: not one of the codes the SDK reconnects after
    assert "API key" in close["reason"]
