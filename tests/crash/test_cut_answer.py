"""A response whose answer a crash or a hand-over cut off reads as one answer afterwards.

The embedded model is deterministic, so the answer a crashed response should give is the
one the same request gives without a crash. After SIGKILL and restart, and after SIGTERM
with another process taking over, `output_text` (as the openai SDK computes it) must equal
that answer exactly once, the replay must stay well formed (G7), and a client that follows
the stream across the cut, resuming from its last event, must read the answer once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai.types.responses import Response

from tests.conftest import NewStore, StartServer
from tests.crash._support import check_replays, replay
from tests.support.fake_responses_upstream import FakeResponsesUpstream, reset_mid, text
from tests.support.peek import count
from tests.support.schemas import validate_event
from tests.support.server import ServerProcess
from tests.support.stores import Location
from tests.support.stream_rules import check_stream, parse_sse
from tests.support.waiting import wait_terminal, wait_until

FAST = ("--lease-ttl", "2", "--scan-interval", "0.2")
PROMPT = "tell me about the sea [[words 40]] [[delay 40]]"


def _deltas_logged(db: Location, response_id: str) -> int:
    sql = "SELECT count(*) FROM events WHERE response_id = ? AND type = ?"
    return count(db, sql, response_id, "response.output_text.delta")


def _create(url: str, prompt: str) -> str:
    body = {"model": "m", "input": prompt, "background": True}
    created = httpx.post(f"{url}/v1/responses", json=body, timeout=30).json()
    return str(created["id"])


def _answer(url: str) -> str:
    """The answer the same request gives when nothing goes wrong."""
    response_id = _create(url, PROMPT.replace("[[delay 40]]", ""))
    return Response.model_validate(wait_terminal(url, response_id)).output_text


class _Follower:
    """A client following a background stream in a thread, keeping what it read."""

    def __init__(self, url: str, response_id: str) -> None:
        self.text = ""
        self._thread = threading.Thread(target=self._read, args=(url, response_id))
        self._thread.start()

    def _read(self, url: str, response_id: str) -> None:
        try:
            with httpx.stream(
                "GET", f"{url}/v1/responses/{response_id}?stream=true", timeout=30
            ) as response:
                for chunk in response.iter_text():
                    self.text += chunk
        except httpx.HTTPError:
            pass  # the server went away mid-stream

    def events(self) -> list[dict[str, Any]]:
        self._thread.join(30)
        return parse_sse(self.text, allow_partial=True)


def _cut(
    start_server: StartServer, db: Location, how: str
) -> tuple[ServerProcess, str, list[dict[str, Any]]]:
    """Start a response, cut it mid-answer (`kill` or `term`), and return the server that
    finishes it, its id, and what a following client read before the cut."""
    args = (*FAST, "--shutdown-grace", "0.3")
    first = start_server(*args, db=db)
    heir = start_server(*args, db=db) if how == "term" else None
    response_id = _create(first.url, PROMPT)
    follower = _Follower(first.url, response_id)
    wait_until(lambda: _deltas_logged(db, response_id) >= 8, "part of the answer")
    if how == "kill":
        first.kill()
    else:
        assert first.stop(signal.SIGTERM) == 0
    seen = follower.events()
    assert 0 < _deltas_logged(db, response_id) < 40, "the answer was cut, not finished"
    return heir or start_server(*FAST, db=db), response_id, seen


@pytest.mark.parametrize("how", ["kill", "term"], ids=["sigkill", "sigterm-handover"])
def test_a_cut_answer_is_read_once_after_recovery(
    start_server: StartServer, new_store: NewStore, tmp_path: Path, how: str
) -> None:
    survivor, response_id, seen = _cut(start_server, new_store("cut"), how)

    final = wait_terminal(survivor.url, response_id)
    assert final["status"] == "completed", final["error"]
    answer = _answer(survivor.url)
    assert Response.model_validate(final).output_text == answer
    messages = [i for i in final["output"] if i["type"] == "message"]
    assert [m["status"] for m in messages] == ["completed"], "continued, not regenerated"
    check_replays(survivor.url, response_id, final)

    # The follower resumes after the last event it read: the text it shows is the answer.
    assert seen, "the follower read nothing before the cut"
    rest = replay(survivor.url, response_id, seen[-1]["sequence_number"])
    check_stream(seen + rest)
    streamed = "".join(e["delta"] for e in seen + rest if e["type"] == "response.output_text.delta")
    assert streamed == answer


def test_a_cut_answer_the_next_attempt_does_not_repeat_is_dropped(
    start_server: StartServer, new_store: NewStore, tmp_path: Path
) -> None:
    """With the word count changed between the runs, the new attempt says something else:
    the cut message is closed `incomplete` with no content, and the answer is the new one."""
    db = new_store("diverged")
    first = start_server(*FAST, db=db, env={"DURABLE_RESPONSES_EMBEDDED_WORDS": "10"})
    response_id = _create(first.url, "tell me [[delay 60]]")
    wait_until(lambda: _deltas_logged(db, response_id) >= 6, "part of the answer")
    first.kill()
    survivor = start_server(*FAST, db=db, env={"DURABLE_RESPONSES_EMBEDDED_WORDS": "4"})

    final = wait_terminal(survivor.url, response_id)
    assert final["status"] == "completed", final["error"]
    cut, answer = (i for i in final["output"] if i["type"] == "message")
    assert cut["status"] == "incomplete" and cut["content"] == []
    assert answer["status"] == "completed"
    assert Response.model_validate(final).output_text == answer["content"][0]["text"]
    check_replays(survivor.url, response_id, final)


THINK = ("The user asks about Paris.",)


@pytest.fixture
def responses_upstream() -> Iterator[FakeResponsesUpstream]:
    upstream = FakeResponsesUpstream().start()
    yield upstream
    upstream.stop()


def test_reasoning_a_crash_left_without_its_answer_is_shown_once(
    start_server: StartServer, new_store: NewStore, responses_upstream: FakeResponsesUpstream
) -> None:
    """A Responses upstream finished a reasoning item, then the server was killed before
    the answer began. That reasoning led to nothing (the recovered step is not sent it,
    and reasons again): it is closed `incomplete` with its summary, not `completed`, so the
    response shows one finished reasoning, then the answer, live and in every replay."""
    db = new_store("reasoning_cut")
    cli = ("--upstream-base-url", responses_upstream.url, "--upstream-api", "responses", *FAST)
    # The first attempt reasons, begins its message and hangs there until the kill.
    responses_upstream.push(
        reset_mid("", summary=THINK, hang=30), text("Sunny in Paris.", summary=THINK)
    )
    first = start_server(*cli, db=db)
    body = {
        "model": "fake-model",
        "input": "Weather in Paris?",
        "reasoning": {"summary": "auto"},
        "background": True,
    }
    response_id = httpx.post(f"{first.url}/v1/responses", json=body, timeout=30).json()["id"]
    words = len(THINK[0].split(" "))
    sql = "SELECT count(*) FROM events WHERE response_id = ? AND type = ?"
    delta = "response.reasoning_summary_text.delta"
    wait_until(lambda: count(db, sql, response_id, delta) == words, "the whole reasoning")
    first.kill()
    survivor = start_server(*cli, db=db)

    final = wait_terminal(survivor.url, response_id)
    assert final["status"] == "completed", final["error"]
    summary = [{"type": "summary_text", "text": THINK[0]}]
    assert [(i["type"], i["status"], i.get("summary")) for i in final["output"]] == [
        ("reasoning", "incomplete", summary),
        ("reasoning", "completed", summary),
        ("message", "completed", None),
    ]
    assert Response.model_validate(final).output_text == "Sunny in Paris."
    assert len(responses_upstream.requests) == 2
    assert responses_upstream.requests[1] == responses_upstream.requests[0]
    check_replays(survivor.url, response_id, final)
    for event in replay(survivor.url, response_id):
        validate_event(event)
    stored = httpx.get(f"{survivor.url}/v1/responses/{response_id}", timeout=30).json()
    assert stored == final
