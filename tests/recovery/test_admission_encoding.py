"""A new background turn's rows (recovery/_admission.py `new_turn`) encode its response
once: `response.created` and `response.queued` are built around the snapshot's JSON text
(`encode_lifecycle`). Pinned here: those rows are byte for byte what encoding each event
whole (`encode(emitter.lifecycle(...))`) wrote before, whatever the response holds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from recovery._admission import new_turn
from recovery._emitter import Emitter
from recovery._settings import RuntimeSettings
from recovery._sinks import encode


@pytest.mark.parametrize(
    "params",
    [
        pytest.param({"model": "m", "input": [], "background": True}, id="plain"),
        pytest.param(
            {
                "model": "m",
                "input": [],
                "background": True,
                "instructions": 'quotes " and \\ and \u2028, é, 😀, \x1f',
                "metadata": {"k": "v", "nested": "ünïcode"},
                "temperature": 0.7,
                "top_p": 1e-7,
                "tools": [{"type": "function", "name": "f", "parameters": {"a": [1, 2.5]}}],
            },
            id="escapes-unicode-floats",
        ),
    ],
)
def test_lifecycle_rows_are_the_events_encoded_whole(params: dict[str, Any]) -> None:
    new, events = new_turn(params, "tenant", None, "owner", RuntimeSettings())
    emitter = Emitter(json.loads(new.snapshot), 0)
    expected = [encode(emitter.lifecycle(t)) for t in ("response.created", "response.queued")]
    assert events == expected
    assert new.last_seq == 1


def test_a_foreground_turn_has_no_first_events() -> None:
    new, events = new_turn({"model": "m", "input": []}, "tenant", None, "owner", RuntimeSettings())
    assert events == []
    assert new.last_seq == -1
    assert json.loads(new.snapshot)["status"] == "in_progress"
