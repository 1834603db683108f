"""Issue 16, item 8, in process: compaction items and the history a model is sent when one
is in it (recovery/_compaction.py), checked in milliseconds beside the server tests
(tests/integration/test_issue16_compaction.py, tests/crash/test_issue16_compaction_crash.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from recovery import InvalidRequest, ModelError, ModelRequest, model_view, normalize_item
from recovery._compaction import (
    check_compaction_items,
    compaction_item,
    has_uncompacted,
    summary_of,
)
from recovery._observer import Observer
from recovery._settings import RuntimeSettings
from recovery._summary import summarize
from server._embedded_model import EmbeddedModel

Item = dict[str, Any]


def user(text: str) -> Item:
    return normalize_item({"role": "user", "content": text})


def assistant(text: str) -> Item:
    return normalize_item({"role": "assistant", "content": text})


def call(call_id: str) -> Item:
    return normalize_item(
        {"type": "function_call", "call_id": call_id, "name": "lookup", "arguments": "{}"}
    )


def output(call_id: str) -> Item:
    return normalize_item({"type": "function_call_output", "call_id": call_id, "output": "ok"})


def said(items: list[Item]) -> list[str]:
    return [f"{i['role']}: {i['content'][0]['text']}" for i in items]


def test_the_summary_round_trips_and_another_servers_item_has_none() -> None:
    item = compaction_item("the user asked; sunny")

    assert item["type"] == "compaction" and item["id"].startswith("cmp_")
    assert summary_of(item) == "the user asked; sunny"
    for content in ("gAAAAABpM0Yj-x=", item["encrypted_content"][:-4], ""):
        assert summary_of({**item, "encrypted_content": content}) is None
    assert summary_of(user("hi")) is None


def test_a_model_is_sent_the_user_messages_then_the_summary_then_what_follows() -> None:
    first = user("weather in Paris")
    history = [first, call("c1"), output("c1"), assistant("sunny"), user("and Rome")]
    item = compaction_item("Paris sunny")

    view = model_view([*history, item, user("tomorrow")])

    assert said(view) == [
        "user: weather in Paris",
        "user: and Rome",
        "assistant: Summary of the conversation so far (it replaces the earlier turns):"
        "\n\nParis sunny",
        "user: tomorrow",
    ]
    # Resent after the chain it compacted, its user messages are given once.
    again = model_view([first, assistant("sunny"), first, item])
    assert said(again)[0] == "user: weather in Paris" and len(again) == 2
    # Only the latest compaction counts; without one, the history is as it is.
    later = compaction_item("all of it")
    assert said(model_view([*history, item, assistant("x"), later]))[-1].endswith("all of it")
    assert model_view(history) == history


def test_only_what_follows_the_latest_compaction_is_left_to_compact() -> None:
    item = compaction_item("s")

    assert has_uncompacted([user("a"), assistant("b")])
    assert not has_uncompacted([user("a")])
    assert not has_uncompacted([user("a"), assistant("b"), item, user("c")])
    assert has_uncompacted([user("a"), item, user("c"), assistant("d")])


@pytest.mark.parametrize(
    ("history", "given", "param"),
    [
        pytest.param(
            [], [user("hi"), {"type": "compaction", "id": "cmp_x", "encrypted_content": "g"}],
            "input[1].encrypted_content", id="foreign-in-input",
        ),
        pytest.param(
            [{"type": "compaction", "id": "cmp_x", "encrypted_content": "g"}], [user("hi")],
            "conversation", id="foreign-in-history",
        ),
        pytest.param(
            [call("c1")], [compaction_item("s"), output("c1")], "input",
            id="between-call-and-output",
        ),
    ],
)  # fmt: skip
def test_what_a_model_cannot_be_given_is_refused(
    history: list[Item], given: list[Item], param: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_compaction_items(history, given, reads_foreign=False, history_param="conversation")

    assert refused.value.param == param


def test_a_model_that_reads_foreign_items_is_given_them() -> None:
    foreign = {"type": "compaction", "id": "cmp_x", "encrypted_content": "g"}

    check_compaction_items([], [foreign], reads_foreign=True, history_param="conversation")

    items = [user("a"), assistant("b"), foreign]
    assert model_view(items) == items  # left where it stands, for the model to read


async def test_a_summary_of_an_unpaired_history_is_not_asked_for() -> None:
    """The summary call is checked just before it goes out, as a step's is (G5 at the
    wire): a history with an output whose call is missing never reaches the model."""
    model = EmbeddedModel()
    asked: list[ModelRequest] = []
    own = model.summarize

    def recorded(request: ModelRequest) -> Any:
        asked.append(request)
        return own(request)

    model.summarize = recorded  # type: ignore[method-assign]
    orphan = normalize_item({"type": "function_call_output", "call_id": "c9", "output": "x"})
    request = ModelRequest(model="embedded", instructions=None, input=[orphan], tools=[])

    with pytest.raises(ModelError, match="an output for function call 'c9' with no such call"):
        await summarize(model, request, observer=Observer(), settings=RuntimeSettings())
    assert asked == []
    await summarize(
        model,
        dataclasses.replace(request, input=[]),
        observer=Observer(),
        settings=RuntimeSettings(),
    )
    assert len(asked) == 1
