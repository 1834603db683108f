"""A workflow step's call id and recorded arguments: the same in every run and process,
at most 64 characters, and unique (recovery/_workflow.py)."""

from __future__ import annotations

from recovery._workflow import _arguments, _call_id


class Opaque:
    """An argument JSON cannot hold, with the default repr (its memory address)."""


def test_a_call_id_names_the_step_and_its_occurrence_and_fits_in_64_characters() -> None:
    long = "notify_the_customer_that_the_order_has_shipped_and_send_the_invoice"
    ids = {
        _call_id("post", 1),
        _call_id("post", 2),
        _call_id("1_post", 1),
        _call_id(long, 1),
        _call_id(long, 2),
        _call_id(long + "_again", 1),
    }

    assert _call_id("post", 1) == "step_1_post"
    assert len(ids) == 6, "unique"
    assert all(len(call_id) <= 64 for call_id in ids)


def test_recorded_arguments_do_not_depend_on_the_process() -> None:
    """Compared on replay: an object's memory address or a set's order would make a
    step recorded by another process look called with other arguments."""
    assert _arguments((Opaque(), {"b", "a"}), {"to": "ops"}) == _arguments(
        (Opaque(), {"a", "b"}), {"to": "ops"}
    )
    assert _arguments((1,), {}) != _arguments((2,), {})
