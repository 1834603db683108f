"""Checks of our own for the schemathesis run of test_openapi.py (loaded by the CLI
through SCHEMATHESIS_HOOKS, in its own process; `DR_TEST_DB` names the server's store).

- A refused create stores nothing: the responses table has as many rows after a 4xx of
  POST /v1/responses as before it.
- Schema-valid data is accepted, or refused only for a rule the document states in prose
  (JSON Schema cannot): these replace schemathesis's `positive_data_acceptance`.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any

import schemathesis
from schemathesis import Case, CheckContext, GenerationMode, HookContext, Response

from tests.support.peek import Peek
from tests.support.stores import as_location

# (code, param) of the 400s a schema-valid request may still get.
DOCUMENTED_REFUSALS = {
    ("missing_required_parameter", "input"),  # no input, conversation or previous response
    ("invalid_parameter_combination", "conversation"),  # with previous_response_id
    ("invalid_value", "store"),  # background needs store
    ("invalid_value", "stream_options"),  # needs stream
    ("invalid_value", "tool_choice"),  # a function not declared in tools; required, none
    ("previous_response_not_found", "previous_response_id"),
    ("idempotency_key_reused", "Idempotency-Key"),  # the same key with another body
    ("invalid_parameter_combination", "Idempotency-Key"),  # a key with store: false
    ("invalid_value", "after"),  # a cursor that is no item of the list
    ("invalid_parameter_combination", "starting_after"),  # needs stream=true
    (None, "response_id"),  # a cancel of a response that is not a background one
}
# Tool pairing (an output without its call, a call without its output, an output or a call
# twice), for whichever parameter holds the items.
DOCUMENTED_CODES = {"tool_call_not_found", "tool_output_missing", "duplicate_tool_output"}
DOCUMENTED_CODES |= {"duplicate_tool_call"}
# An `item_reference` must name an item the tenant has stored, and a conversation holds an
# item once (docs/protocol.md, section 4), whichever item holds them.
DOCUMENTED_CODES |= {"item_not_found", "duplicate_item"}
# Inline images and files over --max-attachment-bytes (docs/protocol.md, section 4).
DOCUMENTED_CODES |= {"file_too_large"}
# A compaction item this server did not make, which its model cannot read (the
# document's description; docs/protocol.md, section 4).
DOCUMENTED_CODES |= {"invalid_encrypted_content"}
# A json_schema whose smallest instance is infinite or too large to build (docs/protocol.md,
# section 3).
DOCUMENTED_CODES |= {"invalid_json_schema"}

_stored_before: dict[str, int] = {}


@functools.cache
def _store() -> Peek:
    """One connection for the whole run (closed when the process ends): two reads per
    create, and a new PostgreSQL connection per read would slow the run several-fold."""
    return Peek(as_location(os.environ["DR_TEST_DB"]))


def _responses_stored() -> int:
    return _store().count("SELECT count(*) FROM responses")


def _is_create(case: Case) -> bool:
    return case.method.upper() == "POST" and case.path == "/v1/responses"


@schemathesis.hook
def before_call(context: HookContext, case: Case, kwargs: dict[str, Any]) -> None:
    if _is_create(case):
        _stored_before[case.id] = _responses_stored()


@schemathesis.check
def refused_create_stores_nothing(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    before = _stored_before.pop(case.id, None)
    if before is not None and response.status_code >= 400:
        stored = _responses_stored()
        assert stored == before, f"a refused create ({response.status_code}) stored a response"
    return None


@schemathesis.check
def schema_valid_refused_only_by_documented_rule(
    ctx: CheckContext, response: Response, case: Case
) -> bool | None:
    meta = case.meta
    if meta is None or meta.generation.mode is not GenerationMode.POSITIVE:
        return None
    if response.status_code != 400:
        return None
    error = response.json()["error"]
    documented = (
        error["code"] in DOCUMENTED_CODES
        or _nul_in_id(error)
        or _file_in_output(error)
        or _part_of_the_wrong_side(error)
        or _not_an_allowed_tool(error)
    )
    assert documented or (error["code"], error["param"]) in DOCUMENTED_REFUSALS, (
        f"schema-valid data refused for a reason the document does not give: {error}"
    )
    return None


def _file_in_output(error: dict[str, Any]) -> bool:
    """An `input_file` inside a function call output (docs/protocol.md, section 4)."""
    param = error["param"] or ""
    return error["code"] == "unsupported_value" and bool(re.search(r"\.output\[\d+\]$", param))


def _nul_in_id(error: dict[str, Any]) -> bool:
    """An id holding a NUL character, or that is not one URL path segment of at most 256
    characters, refused naming it (docs/protocol.md, section 9)."""
    param = error["param"] or ""
    named = param.endswith(".id") or param in ("conversation", "previous_response_id")
    return error["code"] == "invalid_value" and named and "an id must" in error["message"]


def _part_of_the_wrong_side(error: dict[str, Any]) -> bool:
    """An `input_*` part in an assistant message, or an `output_text` or `refusal` part
    elsewhere (docs/protocol.md, section 4)."""
    param = error["param"] or ""
    return error["code"] == "invalid_value" and bool(
        re.search(r"\.(content|output)\[\d+\]\.type$", param)
    )


def _not_an_allowed_tool(error: dict[str, Any]) -> bool:
    """An `allowed_tools` entry that is no function tool of the request or the server
    (docs/protocol.md, section 5)."""
    param = error["param"] or ""
    return error["code"] == "invalid_value" and param.startswith("tool_choice.tools[")
