"""Issue 16, item 8: a crash in the middle of a compaction neither loses the history nor
compacts twice.

A background response with `context_management` compacts its history (the previous
response's long answer) before its step: the model is asked for a summary (one more call
of the scripted Chat Completions upstream, which lives in the test's process and so
counts every call across the server's deaths), then the compaction item commits with its
events in one checkpoint, and only then does the step's model call go out.

- SIGKILL while the summary is being asked: nothing of the compaction was committed; the
  recovered turn asks again (two summary calls), commits one compaction item, and its
  step is sent the summary.
- Killed just after the commit (failpoint `compacted`): the recovered turn finds the item
  in its output, with nothing after it to compact, and asks for no summary again.

Either way the history stays whole: the previous response with its long answer, and the
response's own input, are still stored, and the replay is well formed (G7).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import NewStore, StartServer
from tests.crash._support import check_replays, wait_for_exit
from tests.support.fake_upstream import FakeUpstream, Turn, text
from tests.support.peek import count
from tests.support.server import ServerProcess
from tests.support.stores import Location
from tests.support.waiting import wait_terminal, wait_until

EXIT_AT_FAILPOINT = 86
PROMPT = "Summarize the conversation above"  # how a summary request ends
LONG = " ".join(["lorem"] * 1500)  # about 2,250 estimated tokens
SUMMARY = "A long lorem ipsum was said."
COMPACTION = [{"type": "compaction", "compact_threshold": 1000}]


class Upstream:
    """The scripted upstream: the long answer, summaries (the first one held until
    `release`), and short answers; the summary calls it was asked, counted."""

    def __init__(self) -> None:
        self.summaries = 0
        self.release = threading.Event()
        self.fake = FakeUpstream(respond=self._respond).start()

    def _respond(self, body: dict[str, Any]) -> Turn:
        last = str(body["messages"][-1]["content"])
        if last.startswith(PROMPT):
            self.summaries += 1
            if self.summaries == 1:
                self.release.wait(30)  # the server is killed meanwhile
            return text(SUMMARY)
        return text(LONG if last == "say a lot" else "Short now.")

    def steps(self) -> list[list[dict[str, Any]]]:
        """The messages of every request but the summaries."""
        return [
            request["messages"]
            for request in self.fake.requests
            if not str(request["messages"][-1]["content"]).startswith(PROMPT)
        ]


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    made = Upstream()
    yield made
    made.release.set()
    made.fake.stop()


def _start(
    start_server: StartServer, db: Location, upstream: Upstream, **env: str
) -> ServerProcess:
    args = ("--lease-ttl", "2", "--scan-interval", "0.2", "--retry-base-delay", "0.01")
    return start_server(*args, "--upstream-base-url", upstream.fake.url, db=db, env=env)


def _compacting(url: str) -> tuple[str, str]:
    """(the long first response, the background one that compacts it) on `url`."""
    with httpx.Client(base_url=url, timeout=30) as http:
        first = http.post("/v1/responses", json={"model": "m", "input": "say a lot"}).json()
        assert first["status"] == "completed", first
        body = {
            "model": "m",
            "input": "and now briefly",
            "previous_response_id": first["id"],
            "background": True,
            "context_management": COMPACTION,
        }
        second = http.post("/v1/responses", json=body).json()
    return first["id"], second["id"]


def _compaction_events(db: Location, response_id: str) -> int:
    sql = "SELECT count(*) FROM events WHERE response_id = ? AND type = ?"
    return count(db, sql, response_id, "response.output_item.added")


def _check_recovered(url: str, upstream: Upstream, first_id: str, response_id: str) -> None:
    """One compaction item before the answer, the step sent the summary, the history whole."""
    final = wait_terminal(url, response_id)
    assert final["status"] == "completed", final["error"]
    assert [item["type"] for item in final["output"]] == ["compaction", "message"]
    check_replays(url, response_id, final)
    step = upstream.steps()[-1]
    assert [m["role"] for m in step] == ["user", "user", "assistant"]
    assert step[2]["content"].endswith(SUMMARY)
    with httpx.Client(base_url=url, timeout=30) as http:
        first = http.get(f"/v1/responses/{first_id}").json()
        own = http.get(f"/v1/responses/{response_id}/input_items").json()["data"]
    assert first["output"][0]["content"][0]["text"] == LONG
    assert [item["content"][0]["text"] for item in own] == ["and now briefly"]


def test_a_sigkill_while_the_summary_is_asked_compacts_once_after_recovery(
    start_server: StartServer, new_store: NewStore, upstream: Upstream
) -> None:
    db = new_store("compaction-kill")
    doomed = _start(start_server, db, upstream)
    first_id, response_id = _compacting(doomed.url)
    wait_until(lambda: upstream.summaries == 1, "the summary to be asked")

    doomed.kill()
    upstream.release.set()
    assert _compaction_events(db, response_id) == 0, "nothing of the compaction was committed"
    survivor = _start(start_server, db, upstream)

    _check_recovered(survivor.url, upstream, first_id, response_id)
    assert upstream.summaries == 2  # asked again: the first was cut before its commit
    assert len(upstream.steps()) == 2  # the first response's step, then this one's, once


def test_a_crash_after_the_compaction_commits_does_not_compact_again(
    start_server: StartServer, new_store: NewStore, upstream: Upstream
) -> None:
    upstream.release.set()
    db = new_store("compaction-committed")
    doomed = _start(start_server, db, upstream, DURABLE_RESPONSES_FAILPOINT="compacted")
    first_id, response_id = _compacting(doomed.url)

    assert wait_for_exit(doomed) == EXIT_AT_FAILPOINT
    assert _compaction_events(db, response_id) == 1, "the compaction item was committed"
    survivor = _start(start_server, db, upstream)

    _check_recovered(survivor.url, upstream, first_id, response_id)
    assert upstream.summaries == 1  # never asked again
    assert len(upstream.steps()) == 2
