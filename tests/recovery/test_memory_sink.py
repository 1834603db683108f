"""A foreground stream whose turn lost its response to another process (its lease): the
sink closes what its client saw opened, whatever close the runner held back, so that the
stored end appended after it (server/_responses_routes.py) ends a well-formed stream."""

from __future__ import annotations

import json

from recovery._emitter import Emitter
from recovery._model import FunctionCallDelta, TextDelta
from recovery._response import new_response
from recovery._sinks import MemorySink


async def test_an_abandoned_stream_closes_the_items_its_client_saw_opened() -> None:
    emitter = Emitter(new_response("resp_1", 0.0, "in_progress", {"model": "m"}), 0)
    sink = MemorySink(keep=True)
    sink.emit([emitter.lifecycle("response.created"), *emitter.text_delta(TextDelta("cut "))])
    # The step ends with a call: its close of the message and the call go out only with
    # the step's record, which the new owner's fence refuses; they are never emitted.
    held = emitter.function_calls([FunctionCallDelta("call_1", "lookup", "{}")])
    assert any(e["type"] == "response.output_item.done" for e in held)

    sink.abandon()
    rows = [row async for batch in sink.rows() for row in batch]

    events = [json.loads(row.data) for row in rows]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    added = [e for e in events if e["type"] == "response.output_item.added"]
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert [e["output_index"] for e in added] == [e["output_index"] for e in done] == [0]
    assert done[0]["item"]["id"] == added[0]["item"]["id"]
    assert done[0]["item"]["status"] == "incomplete" and done[0]["item"]["content"] == []


async def test_a_stream_that_ends_on_its_own_is_not_touched_by_the_sink() -> None:
    emitter = Emitter(new_response("resp_1", 0.0, "in_progress", {"model": "m"}), 0)
    sink = MemorySink(keep=True)
    sink.emit([*emitter.text_delta(TextDelta("whole")), *emitter.close_open()])
    sink.emit([emitter.finish("completed")])

    rows = [row async for batch in sink.rows() for row in batch]

    assert [row.type for row in rows][-2:] == ["response.output_item.done", "response.completed"]
    assert sum(row.type == "response.output_item.done" for row in rows) == 1
