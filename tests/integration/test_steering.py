"""Steering a busy lane (docs/guarantees.md, Steering, G9, G10; issue 5), through the openai SDK
and raw SSE against a real server process.

A lane is a conversation, or a previous_response_id chain whose last turn still runs. While
its first turn streams text or runs a server tool, a second turn arrives with each
`multitask_strategy`; the tests check what a user sees: the statuses and
`incomplete_details` of both turns, the stream of each (raw SSE, `check_stream`), the
conversation's items, and the history the second turn was given. The embedded model
counts the words of the whole history it is sent as `usage.input_tokens`, so that number
proves which items a turn saw. Tool side effects are counted in files, outside the server.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import httpx2
import openai
import pytest

from tests.conftest import StartServer, make_client
from tests.integration._responses_support import MODEL, checked_events, get_stream, types
from tests.support.peek import count
from tests.support.server import ServerProcess
from tests.support.side_effects import effects
from tests.support.stores import Location
from tests.support.stream_rules import parse_sse
from tests.support.waiting import DEADLINE, wait_status, wait_terminal, wait_until

AGENT = ("--agent", "tests.agents.tool_agent:agent")
HELLO = "hello there"  # what a lane holds before the turns under test
LONG = "first [[words 200]] [[delay 30]]"  # about 6 s: a steer always catches it running
MEDIUM = "first [[words 60]] [[delay 30]]"  # about 1.8 s: still running when the next arrives
MEDIUM_WORDS = 60
TOOL = 'first [[call wait_a_bit {"seconds": 1.0}]]'  # a tool body of 1 s
SECOND = "second [[words 3]]"

Event = dict[str, Any]
Item = dict[str, Any]
LaneKind = Literal["conversation", "chain"]
Phase = Literal["text", "tool"]


# -- helpers ------------------------------------------------------------------------------


def words(item: Item) -> int:
    """The words the embedded model counts for an item of the history it is sent."""
    kind = item.get("type", "message")
    if kind == "message":
        content = item["content"]
        text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
        return len(text.split())
    if kind == "function_call":
        return len(str(item["arguments"]).split())
    if kind == "function_call_output":
        return len(str(item["output"]).split())
    return 0


def history_words(items: list[Item]) -> int:
    return sum(words(item) for item in items)


def assert_tool_consistent(items: list[Item]) -> None:
    """Each function_call has exactly one function_call_output after it (G5)."""
    calls = [i["call_id"] for i in items if i["type"] == "function_call"]
    outputs = [i["call_id"] for i in items if i["type"] == "function_call_output"]
    assert sorted(calls) == sorted(outputs), items
    assert len(set(calls)) == len(calls), items
    for call_id in calls:
        call_at = next(n for n, i in enumerate(items) if i.get("call_id") == call_id)
        output_at = next(
            n
            for n, i in enumerate(items)
            if i["type"] == "function_call_output" and i["call_id"] == call_id
        )
        assert call_at < output_at, items


class LiveStream:
    """A raw SSE response read in a thread, so the test can act while it runs."""

    def __init__(self, base_url: str, method: str, path: str, **kwargs: Any) -> None:
        self.lines: list[str] = []
        self.events: list[Event] = []  # decoded as they arrive
        self.status_code: int | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._read, args=(base_url, method, path, kwargs), daemon=True
        )
        self._thread.start()

    def _read(self, base_url: str, method: str, path: str, kwargs: dict[str, Any]) -> None:
        try:
            with (
                httpx.Client(base_url=base_url, timeout=DEADLINE) as http,
                http.stream(method, path, **kwargs) as response,
            ):
                self.status_code = response.status_code
                for line in response.iter_lines():
                    self.lines.append(line)
                    if line.startswith("data:"):
                        self.events.append(json.loads(line[len("data:") :]))
        except BaseException as exc:  # reported by wait_for and result
            self.error = exc

    def wait_for(self, what: str, predicate: Callable[[Event], bool]) -> Event:
        end = time.monotonic() + DEADLINE
        seen = 0
        while True:
            events = list(self.events)
            for event in events[seen:]:
                if predicate(event):
                    return event
            seen = len(events)
            if not self._thread.is_alive() and seen == len(self.events):
                raise AssertionError(f"the stream ended without {what}: {types(self.events)}")
            if time.monotonic() > end:
                raise AssertionError(f"no {what} after {DEADLINE}s: {types(self.events)}")
            time.sleep(0.01)  # polling interval, not synchronization

    def result(self) -> list[Event]:
        """The whole stream once it has ended, decoded strictly and checked."""
        self._thread.join(DEADLINE)
        assert not self._thread.is_alive(), f"the stream did not end: {types(self.events)}"
        if self.error is not None:
            raise self.error
        assert self.status_code == 200, self.lines
        return checked(parse_sse("\n".join(self.lines) + "\n"))


def as_published(value: Any) -> Any:
    """`value` with incomplete_details.reason "steered" read as "max_output_tokens".

    Deliberate divergence: docs/guarantees.md (Steering) ends an interrupted turn with
    `incomplete_details.reason = "steered"`, a reason the vendored OpenAI schema's enum
    does not list yet (it has max_output_tokens and content_filter). Every other field of
    such an event is still validated against both schemas."""
    if isinstance(value, dict):
        if value.get("incomplete_details") == {"reason": "steered"}:
            value = {**value, "incomplete_details": {"reason": "max_output_tokens"}}
        return {k: as_published(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_published(v) for v in value]
    return value


def checked(events: list[Event], starting_after: int | None = None) -> list[Event]:
    """`checked_events` (both schemas, every stream rule), allowing the steered reason."""
    checked_events(as_published(events), starting_after=starting_after)
    return events


def is_type(event_type: str) -> Callable[[Event], bool]:
    return lambda event: event["type"] == event_type


def function_call_done(event: Event) -> bool:
    return bool(
        event["type"] == "response.output_item.done" and event["item"]["type"] == "function_call"
    )


PHASE_STARTED: dict[str, tuple[str, Callable[[Event], bool]]] = {
    "text": ("a first text delta", is_type("response.output_text.delta")),
    "tool": ("a finished function_call (the tool body runs next)", function_call_done),
}


@dataclass
class Lane:
    """A conversation, or a chain from a finished response: `prefix` is what it holds."""

    kind: LaneKind
    sdk: openai.OpenAI
    url: str
    prefix: list[Item] = field(default_factory=list)
    conversation_id: str | None = None
    root_id: str | None = None

    def target(self, previous_id: str) -> dict[str, Any]:
        """Where a turn after `previous_id` goes: the conversation, or the chain."""
        if self.kind == "conversation":
            return {"conversation": self.conversation_id}
        return {"previous_response_id": previous_id}

    def start(self, prompt: str, *, background: bool | None = None) -> tuple[str, LiveStream]:
        """Start the first turn and follow its stream live: in a conversation a foreground
        streaming create (unless `background`), on a chain a background response."""
        if background is None:
            background = self.kind == "chain"
        target = self.target(self.root_id or "")
        if not background:
            body = {"model": MODEL, "input": prompt, "stream": True, **target}
            live = LiveStream(self.url, "POST", "/v1/responses", json=body)
            created = live.wait_for("response.created", is_type("response.created"))
            return created["response"]["id"], live
        first = self.sdk.responses.create(model=MODEL, input=prompt, background=True, **target)
        live = LiveStream(self.url, "GET", f"/v1/responses/{first.id}", params={"stream": "true"})
        return first.id, live

    def items(self) -> list[Item]:
        assert self.conversation_id is not None
        return conversation_items(self.url, self.conversation_id)


def open_lane(kind: LaneKind, sdk: openai.OpenAI, url: str) -> Lane:
    if kind == "conversation":
        hello = {"type": "message", "role": "user", "content": HELLO}
        conversation = sdk.conversations.create(items=[hello])  # type: ignore[list-item]
        lane = Lane(kind, sdk, url, conversation_id=conversation.id)
        lane.prefix = lane.items()
        return lane
    root = sdk.responses.create(model=MODEL, input=HELLO)
    assert root.status == "completed"
    prefix = input_items(url, root.id) + response_json(url, root.id)["output"]
    return Lane(kind, sdk, url, prefix=prefix, root_id=root.id)


def conversation_items(url: str, conversation_id: str) -> list[Item]:
    page = httpx.get(
        f"{url}/v1/conversations/{conversation_id}/items",
        params={"order": "asc", "limit": 100},
        timeout=DEADLINE,
    ).json()
    assert page["has_more"] is False
    items: list[Item] = page["data"]
    return items


def input_items(url: str, response_id: str) -> list[Item]:
    page = httpx.get(
        f"{url}/v1/responses/{response_id}/input_items",
        params={"order": "asc", "limit": 100},
        timeout=DEADLINE,
    ).json()
    items: list[Item] = page["data"]
    return items


def response_json(url: str, response_id: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{url}/v1/responses/{response_id}", timeout=DEADLINE).json()
    return body


def ids(items: list[Item]) -> list[str]:
    return [item["id"] for item in items]


def kinds(items: list[Item]) -> list[str]:
    return [item["type"] for item in items]


def message_words(item: Item) -> list[str]:
    return "".join(part["text"] for part in item["content"]).split()


def finish(live: LiveStream, url: str, response_id: str) -> tuple[dict[str, Any], list[Event]]:
    """The first turn's final object and its (checked) stream, which ends with it."""
    events = live.result()
    final = response_json(url, response_id)
    assert events[-1]["response"] == final
    return final, events


def queued_stream(url: str, response_id: str, final: dict[str, Any]) -> list[Event]:
    """The replay of a background turn that waited in its lane: it was queued first."""
    with httpx.Client(base_url=url, timeout=DEADLINE) as http:
        events = get_stream(http, response_id)
    assert types(events)[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert events[0]["response"]["status"] == "queued"
    assert events[-1]["response"] == final
    return events


END_OF: dict[str, tuple[str, dict[str, str] | None, str]] = {
    # strategy: the running turn's status, incomplete_details, and its stream's last event
    "enqueue": ("completed", None, "response.completed"),
    "interrupt": ("incomplete", {"reason": "steered"}, "response.incomplete"),
    "rollback": ("cancelled", None, "response.failed"),
}


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture
def effects_dir(tmp_path: Path) -> Path:
    return tmp_path / "effects"


@pytest.fixture
def tool_server(start_server: StartServer, effects_dir: Path) -> ServerProcess:
    return start_server(*AGENT, env={"SIDE_EFFECTS_DIR": str(effects_dir)})


@pytest.fixture
def sdk(tool_server: ServerProcess) -> Iterator[openai.OpenAI]:
    with make_client(tool_server.url) as client:
        yield client


LANES = [
    pytest.param("conversation", id="conversation"),
    pytest.param("chain", id="previous_response_id"),
]
PHASES = [
    pytest.param("text", id="streaming-text"),
    pytest.param("tool", id="running-a-tool"),
]


# -- each strategy, on each kind of lane, in each phase of the running turn -------------


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("lane_kind", LANES)
@pytest.mark.parametrize(
    "strategy",
    [
        pytest.param("enqueue", id="enqueue"),
        pytest.param("interrupt", id="interrupt"),
        pytest.param("rollback", id="rollback"),
    ],
)
def test_a_new_turn_on_a_busy_lane_follows_its_strategy(
    tool_server: ServerProcess,
    sdk: openai.OpenAI,
    effects_dir: Path,
    strategy: str,
    lane_kind: LaneKind,
    phase: Phase,
) -> None:
    url = tool_server.url
    lane = open_lane(lane_kind, sdk, url)
    steered = strategy != "enqueue"
    prompt = TOOL if phase == "tool" else (LONG if steered else MEDIUM)
    first_id, live = lane.start(prompt)
    live.wait_for(*PHASE_STARTED[phase])

    second = sdk.responses.create(
        model=MODEL,
        input=SECOND,
        background=True,
        extra_body={"multitask_strategy": strategy},
        **lane.target(first_id),
    )

    assert second.status == "queued"
    if not steered:  # it waits for the running turn, visibly
        assert sdk.responses.retrieve(second.id).status == "queued"
    first, first_events = finish(live, url, first_id)
    status, details, last_event = END_OF[strategy]
    assert first["status"] == status
    assert first["incomplete_details"] == details
    assert first_events[-1]["type"] == last_event
    output = first["output"]
    if phase == "text":
        assert kinds(output) == ["message"]
        said = message_words(output[0])
        assert set(said) == {"first"}
        if steered:  # cut at once: the open item is closed incomplete
            assert output[0]["status"] == "incomplete"
            assert 1 <= len(said) < 200
        else:
            assert output[0]["status"] == "completed"
            assert len(said) == MEDIUM_WORDS
    else:  # the running tool body finished and was recorded, once
        expected = ["function_call", "function_call_output"] + ([] if steered else ["message"])
        assert kinds(output) == expected
        assert {item["status"] for item in output} == {"completed"}
        assert output[1]["call_id"] == output[0]["call_id"]
        assert output[1]["output"] == "waited 1.0"
        assert_tool_consistent(output)
    assert len(effects(effects_dir, "wait_a_bit")) == (1 if phase == "tool" else 0)

    final = wait_terminal(sdk, second.id).model_dump(mode="json", exclude_unset=True)
    assert final["status"] == "completed"
    assert message_words(final["output"][0]) == ["second"] * 3
    queued_stream(url, second.id, final)
    # What the second turn saw: the lane, plus the first turn unless it was rolled back.
    kept = [] if strategy == "rollback" else input_items(url, first_id) + output
    second_input = input_items(url, second.id)
    assert final["usage"]["input_tokens"] == history_words(lane.prefix + kept + second_input)
    if lane.kind == "conversation":
        items = lane.items()
        assert ids(items) == ids(lane.prefix + kept + second_input + final["output"])
        assert_tool_consistent(items)


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("lane_kind", LANES)
def test_reject_answers_409_once_and_stores_nothing(
    tool_server: ServerProcess,
    sdk: openai.OpenAI,
    effects_dir: Path,
    lane_kind: LaneKind,
    phase: Phase,
) -> None:
    url = tool_server.url
    lane = open_lane(lane_kind, sdk, url)
    first_id, live = lane.start(TOOL if phase == "tool" else MEDIUM)
    live.wait_for(*PHASE_STARTED[phase])
    before = lane.items() if lane.kind == "conversation" else []
    sent: list[httpx2.Request] = []
    counting = httpx2.Client(event_hooks={"request": [sent.append]})

    with (
        openai.OpenAI(
            base_url=f"{url}/v1", api_key="test-key", max_retries=2, http_client=counting
        ) as retrying,
        pytest.raises(openai.ConflictError) as caught,
    ):
        retrying.responses.create(
            model=MODEL,
            input=SECOND,
            extra_body={"multitask_strategy": "reject"},
            **lane.target(first_id),
        )

    assert len(sent) == 1  # x-should-retry: false stops the SDK's retries of a 409
    error = caught.value
    assert error.status_code == 409
    assert error.code == "conversation_locked"
    assert error.type == "invalid_request_error"
    assert error.response.headers["x-should-retry"] == "false"
    assert "x-request-id" in error.response.headers
    if lane.kind == "conversation":
        assert lane.items() == before
    # The running turn went on as if nothing had happened.
    first, first_events = finish(live, url, first_id)
    assert first["status"] == "completed"
    assert first["incomplete_details"] is None
    assert first_events[-1]["type"] == "response.completed"
    expected = (
        ["function_call", "function_call_output", "message"] if phase == "tool" else ["message"]
    )
    assert kinds(first["output"]) == expected
    assert len(effects(effects_dir, "wait_a_bit")) == (1 if phase == "tool" else 0)
    first_turn = input_items(url, first_id) + first["output"]
    if lane.kind == "conversation":
        assert ids(lane.items()) == ids(lane.prefix + first_turn)
    else:  # the next turn of the chain sees no trace of the rejected one
        third = sdk.responses.create(model=MODEL, input="third", previous_response_id=first_id)
        assert third.status == "completed"
        seen = lane.prefix + first_turn + input_items(url, third.id)
        assert third.usage is not None and third.usage.input_tokens == history_words(seen)


def test_the_server_default_strategy_applies_when_the_request_names_none(
    start_server: StartServer, tmp_path: Path
) -> None:
    server = start_server("--multitask-strategy", "reject")
    with make_client(server.url) as sdk:
        lane = open_lane("conversation", sdk, server.url)
        first_id, live = lane.start(MEDIUM, background=True)
        wait_status(sdk, first_id, "in_progress")

        with pytest.raises(openai.ConflictError) as caught:
            sdk.responses.create(model=MODEL, input=SECOND, conversation=lane.conversation_id)
        enqueued = sdk.responses.create(
            model=MODEL,
            input=SECOND,
            conversation=lane.conversation_id,
            background=True,
            extra_body={"multitask_strategy": "enqueue"},  # the request's choice wins
        )

        assert caught.value.code == "conversation_locked"
        assert enqueued.status == "queued"
        assert finish(live, server.url, first_id)[0]["status"] == "completed"
        assert wait_terminal(sdk, enqueued.id).status == "completed"


def test_a_turn_after_a_finished_response_is_never_locked(sdk: openai.OpenAI) -> None:
    first = sdk.responses.create(model=MODEL, input=HELLO)
    forks = [
        sdk.responses.create(
            model=MODEL,
            input=f"fork {n}",
            previous_response_id=first.id,
            extra_body={"multitask_strategy": "reject"},
        )
        for n in range(2)
    ]

    assert [fork.status for fork in forks] == ["completed", "completed"]


# -- queues -------------------------------------------------------------------------------


def test_three_queued_turns_run_in_order_each_seeing_the_ones_before(
    tool_server: ServerProcess, sdk: openai.OpenAI
) -> None:
    url = tool_server.url
    lane = open_lane("conversation", sdk, url)
    first_id, live = lane.start(MEDIUM, background=True)
    live.wait_for(*PHASE_STARTED["text"])

    queued = [
        sdk.responses.create(
            model=MODEL,
            input=f"turn {n} [[words 3]]",
            conversation=lane.conversation_id,
            background=True,
            extra_body=None if n == 2 else {"multitask_strategy": "enqueue"},  # None: default
        )
        for n in (2, 3, 4)
    ]
    assert [turn.status for turn in queued] == ["queued"] * 3
    assert [sdk.responses.retrieve(turn.id).status for turn in queued] == ["queued"] * 3
    # A stream of a queued turn waits, then follows it to its end.
    follower = LiveStream(url, "GET", f"/v1/responses/{queued[-1].id}", params={"stream": "true"})
    follower.wait_for("response.queued", is_type("response.queued"))

    first, _ = finish(live, url, first_id)
    finals = [
        wait_terminal(sdk, turn.id).model_dump(mode="json", exclude_unset=True) for turn in queued
    ]

    assert first["status"] == "completed"
    assert [final["status"] for final in finals] == ["completed"] * 3
    turns = [input_items(url, first_id) + first["output"]]
    for turn, final in zip(queued, finals, strict=True):
        own_input = input_items(url, turn.id)
        seen = lane.prefix + [item for t in turns for item in t] + own_input
        assert final["usage"]["input_tokens"] == history_words(seen), turn.id
        turns.append(own_input + final["output"])
        assert message_words(final["output"][0])[0] == "turn"
        queued_stream(url, turn.id, final)
    assert ids(lane.items()) == ids(lane.prefix + [item for t in turns for item in t])
    followed = follower.result()
    assert followed[-1]["response"] == finals[-1]
    assert types(followed)[:3] == ["response.created", "response.queued", "response.in_progress"]


@pytest.mark.parametrize(
    "strategy", [pytest.param("enqueue", id="enqueue"), pytest.param("interrupt", id="interrupt")]
)
def test_a_full_queue_answers_429_with_retry_after_and_stores_nothing(
    start_server: StartServer, strategy: str
) -> None:
    server = start_server("--max-queued", "2")
    url = server.url
    with make_client(url) as sdk:
        lane = open_lane("conversation", sdk, url)
        first_id, live = lane.start(MEDIUM, background=True)
        live.wait_for(*PHASE_STARTED["text"])
        queued = [
            sdk.responses.create(
                model=MODEL, input=f"turn {n}", conversation=lane.conversation_id, background=True
            )
            for n in (2, 3)
        ]

        with pytest.raises(openai.RateLimitError) as caught:
            sdk.responses.create(
                model=MODEL,
                input="one too many",
                conversation=lane.conversation_id,
                background=True,
                extra_body={"multitask_strategy": strategy},
            )

        error = caught.value
        assert error.status_code == 429
        assert error.code == "queue_full"
        assert int(error.response.headers["retry-after"]) >= 1
        assert [turn.status for turn in queued] == ["queued", "queued"]
        # Refused means refused: the running turn was not steered, nothing was queued.
        first, _ = finish(live, url, first_id)
        assert first["status"] == "completed"
        finals = [wait_terminal(sdk, turn.id) for turn in queued]
        assert [final.status for final in finals] == ["completed", "completed"]
        expected = input_items(url, first_id) + first["output"]
        for turn, final in zip(queued, finals, strict=True):
            expected += input_items(url, turn.id) + final.model_dump(mode="json")["output"]
        assert ids(lane.items()) == ids(lane.prefix + expected)


def test_a_queued_turn_can_be_cancelled_and_the_next_one_runs(
    tool_server: ServerProcess, sdk: openai.OpenAI
) -> None:
    url = tool_server.url
    lane = open_lane("conversation", sdk, url)
    first_id, live = lane.start(MEDIUM, background=True)
    live.wait_for(*PHASE_STARTED["text"])
    doomed, after = (
        sdk.responses.create(
            model=MODEL, input=text, conversation=lane.conversation_id, background=True
        )
        for text in ("doomed [[words 3]]", "after [[words 3]]")
    )

    cancelled = sdk.responses.cancel(doomed.id)
    again = sdk.responses.cancel(doomed.id)

    assert cancelled.status == "cancelled"
    assert again.model_dump(mode="json") == cancelled.model_dump(mode="json")
    assert sdk.responses.retrieve(doomed.id).status == "cancelled"
    with httpx.Client(base_url=url, timeout=DEADLINE) as http:
        events = get_stream(http, doomed.id)
    assert types(events) == ["response.created", "response.queued", "response.failed"]
    assert events[-1]["response"]["status"] == "cancelled"
    assert events[-1]["response"]["output"] == []
    first, _ = finish(live, url, first_id)
    assert first["status"] == "completed"  # cancelling a queued turn does not touch it
    final = wait_terminal(sdk, after.id).model_dump(mode="json", exclude_unset=True)
    assert final["status"] == "completed"
    queued_stream(url, after.id, final)
    seen = lane.prefix + input_items(url, first_id) + first["output"] + input_items(url, after.id)
    assert final["usage"]["input_tokens"] == history_words(seen)  # nothing of the cancelled one
    assert ids(lane.items()) == ids(seen + final["output"])


def test_a_rolled_back_chain_turn_keeps_the_outputs_its_client_sent_for_earlier_calls(
    sdk: openai.OpenAI,
) -> None:
    """A rollback undoes the running turn's own work, not the answer its client gave to a
    call of the turn before: that tool ran, and a chain holding the answer refuses it a
    second time (duplicate output). Before, the rollback's successor lost the answer and
    always failed tool_output_missing, with no way out for the client."""
    weather: Any = {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    asked = sdk.responses.create(
        model=MODEL,
        input='weather please [[call get_weather {"city": "Paris"}]]',
        tools=[weather],
        background=True,
    )
    [call] = wait_terminal(sdk, asked.id).output
    assert call.type == "function_call"
    answer = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}
    running = sdk.responses.create(
        model=MODEL,
        previous_response_id=asked.id,
        input=[answer, {"role": "user", "content": "long answer [[words 200]] [[delay 30]]"}],
        tools=[weather],
        background=True,
    )
    wait_status(sdk, running.id, "in_progress")

    successor = sdk.responses.create(
        model=MODEL,
        previous_response_id=running.id,
        input="never mind, something else [[words 3]]",
        tools=[weather],
        background=True,
        extra_body={"multitask_strategy": "rollback"},
    )

    assert wait_terminal(sdk, running.id).status == "cancelled"
    final = wait_terminal(sdk, successor.id)
    assert final.status == "completed", final.error
    assert final.output_text == "never mind, something"
    with pytest.raises(openai.BadRequestError, match="uplicate"):
        sdk.responses.create(
            model=MODEL, previous_response_id=successor.id, input=[answer], tools=[weather]
        )


# -- a foreground new turn waits in place ------------------------------------------------


@pytest.mark.parametrize(
    "strategy",
    [
        pytest.param("enqueue", id="enqueue"),
        pytest.param("interrupt", id="interrupt"),
        pytest.param("rollback", id="rollback"),
    ],
)
def test_a_foreground_stream_on_a_busy_lane_waits_then_streams_its_turn(
    tool_server: ServerProcess, sdk: openai.OpenAI, strategy: str
) -> None:
    url = tool_server.url
    lane = open_lane("conversation", sdk, url)
    steered = strategy != "enqueue"
    first_id, first_live = lane.start(LONG if steered else MEDIUM, background=True)
    first_live.wait_for(*PHASE_STARTED["text"])

    body = {
        "model": MODEL,
        "input": SECOND,
        "conversation": lane.conversation_id,
        "stream": True,
        "multitask_strategy": strategy,
    }
    second_live = LiveStream(url, "POST", "/v1/responses", json=body)
    events = second_live.result()

    first, _ = finish(first_live, url, first_id)
    status, details, _ = END_OF[strategy]
    assert (first["status"], first["incomplete_details"]) == (status, details)
    assert types(events)[:2] == ["response.created", "response.in_progress"]
    assert events[-1]["type"] == "response.completed"
    final = events[-1]["response"]
    assert response_json(url, final["id"]) == final
    kept = [] if strategy == "rollback" else input_items(url, first_id) + first["output"]
    seen = lane.prefix + kept + input_items(url, final["id"])
    assert final["usage"]["input_tokens"] == history_words(seen)
    assert ids(lane.items()) == ids(seen + final["output"])


def test_a_foreground_create_on_a_busy_lane_returns_when_its_turn_has_run(
    tool_server: ServerProcess, sdk: openai.OpenAI
) -> None:
    url = tool_server.url
    lane = open_lane("chain", sdk, url)
    first_id, live = lane.start(MEDIUM)
    live.wait_for(*PHASE_STARTED["text"])

    second = sdk.responses.create(model=MODEL, input=SECOND, previous_response_id=first_id)

    first, _ = finish(live, url, first_id)
    assert first["status"] == "completed"
    assert second.status == "completed"
    seen = lane.prefix + input_items(url, first_id) + first["output"] + input_items(url, second.id)
    assert second.usage is not None and second.usage.input_tokens == history_words(seen)


def waiting_turns(db: Location, conversation_id: str) -> int:
    """Turns of the conversation stored and not finished (read-only look at the store: a
    foreground create that waits in place has no id the client could know yet)."""
    sql = (
        "SELECT count(*) FROM responses WHERE conversation_id = ?"
        " AND status IN ('queued', 'in_progress')"
    )
    return count(db, sql, conversation_id)


def test_interrupt_stops_the_running_turn_not_a_foreground_turn_waiting_behind_it(
    tool_server: ServerProcess, sdk: openai.OpenAI
) -> None:
    """A foreground create waiting in place is queued, not running: an interrupt sent
    after it stops the running turn only; the waiting turn runs next, then the new one."""
    url = tool_server.url
    lane = open_lane("conversation", sdk, url)
    assert lane.conversation_id is not None
    first_id, first_live = lane.start(LONG, background=True)
    first_live.wait_for(*PHASE_STARTED["text"])
    body = {"model": MODEL, "input": SECOND, "conversation": lane.conversation_id, "stream": True}
    waiting = LiveStream(url, "POST", "/v1/responses", json=body)
    wait_until(
        lambda: waiting_turns(tool_server.db, lane.conversation_id or "") == 2, "the 2nd turn"
    )

    third = sdk.responses.create(
        model=MODEL,
        input="third [[words 3]]",
        conversation=lane.conversation_id,
        background=True,
        extra_body={"multitask_strategy": "interrupt"},
    )

    first, _ = finish(first_live, url, first_id)
    assert (first["status"], first["incomplete_details"]) == ("incomplete", {"reason": "steered"})
    second = waiting.result()[-1]["response"]
    assert (second["status"], second["incomplete_details"]) == ("completed", None)
    assert message_words(second["output"][0]) == ["second"] * 3
    final = wait_terminal(sdk, third.id).model_dump(mode="json", exclude_unset=True)
    assert final["status"] == "completed"
    turns = input_items(url, first_id) + first["output"]
    turns += input_items(url, second["id"]) + second["output"]
    seen = lane.prefix + turns + input_items(url, third.id)
    assert final["usage"]["input_tokens"] == history_words(seen)
    assert ids(lane.items()) == ids(seen + final["output"])


def test_interrupt_with_turns_queued_stops_the_running_one_and_keeps_the_queue_order(
    tool_server: ServerProcess, sdk: openai.OpenAI
) -> None:
    url = tool_server.url
    lane = open_lane("conversation", sdk, url)
    first_id, live = lane.start(LONG, background=True)
    live.wait_for(*PHASE_STARTED["text"])
    queued = sdk.responses.create(
        model=MODEL, input=SECOND, conversation=lane.conversation_id, background=True
    )

    steering = sdk.responses.create(
        model=MODEL,
        input="third [[words 3]]",
        conversation=lane.conversation_id,
        background=True,
        extra_body={"multitask_strategy": "interrupt"},
    )

    first, _ = finish(live, url, first_id)
    assert (first["status"], first["incomplete_details"]) == ("incomplete", {"reason": "steered"})
    second = wait_terminal(sdk, queued.id).model_dump(mode="json", exclude_unset=True)
    third = wait_terminal(sdk, steering.id).model_dump(mode="json", exclude_unset=True)
    assert (second["status"], third["status"]) == ("completed", "completed")
    turns = input_items(url, first_id) + first["output"]
    turns += input_items(url, queued.id) + second["output"]
    turns += input_items(url, steering.id)
    assert third["usage"]["input_tokens"] == history_words(lane.prefix + turns)
    assert ids(lane.items()) == ids(lane.prefix + turns + third["output"])
