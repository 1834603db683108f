"""A resumed turn rebuilds its state from every event logged since its last checkpoint,
however many one step streamed (it read at most 100,000, and a longer answer cut by a
crash then resumed at a sequence number the log already held).

The embedded model answers 101,000 words in one step, one delta each; the server exits
at the failpoint after more than 100,000 of them were streamed. The survivor must finish
the same answer once, with a replay that is well formed (G7).
"""

from __future__ import annotations

import contextlib

import httpx
import pytest
from openai.types.responses import Response

from tests.conftest import NewStore, StartServer
from tests.crash._support import only_response_id, wait_for_exit
from tests.support.stream_rules import check_stream, parse_sse
from tests.support.waiting import wait_terminal

EXIT_AT_FAILPOINT = 86
FAST = ("--lease-ttl", "2", "--scan-interval", "0.2")
WORDS = 101_000


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_step_longer_than_any_one_read_resumes_where_it_was_cut(
    start_server: StartServer, new_store: NewStore
) -> None:
    db = new_store("crash")
    request = {"model": "m", "input": f"the sea [[words {WORDS}]]", "background": True}
    doomed = start_server(
        *FAST, db=db, env={"DURABLE_RESPONSES_FAILPOINT": f"model_stream:{WORDS - 500}"}
    )
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(f"{doomed.url}/v1/responses", json=request, timeout=30)
    assert wait_for_exit(doomed, 120) == EXIT_AT_FAILPOINT
    response_id = only_response_id(db)

    survivor = start_server(*FAST, db=db)
    final = wait_terminal(survivor.url, response_id, deadline=90)
    with httpx.Client(base_url=survivor.url, timeout=60) as http:
        replayed = parse_sse(http.get(f"/v1/responses/{response_id}?stream=true").text)
        cut = sum(1 for e in replayed if e["type"] == "response.output_text.delta")

    assert final["status"] == "completed", final["error"]
    assert len(Response.model_validate(final).output_text.split()) == WORDS  # read once
    check_stream(replayed)
    assert replayed[-1]["response"] == final
    assert cut >= WORDS  # the deltas before the cut were logged, and are replayed
