"""The public surface of each package, pinned: a change here is an API change."""

from __future__ import annotations

import pytest

import recovery
import server
import store

PUBLIC = {
    server: [
        "EmbeddedModel",
        "ResponsesUpstreamModel",
        "Settings",
        "UpstreamModel",
        "create_app",
    ],
    recovery: [
        "TERMINAL_EVENTS",
        "Agent",
        "FunctionCallDelta",
        "Incomplete",
        "InvalidRequest",
        "LaneLocked",
        "Model",
        "ModelCall",
        "ModelError",
        "ModelEvent",
        "ModelInfo",
        "ModelRequest",
        "NotFound",
        "Observer",
        "QueueFull",
        "ReasoningDelta",
        "RecoveryError",
        "RefusalDelta",
        "ResponseEnd",
        "ResponseStatus",
        "StepFailed",
        "SteerAccepted",
        "SteerOutcome",
        "SteerRefused",
        "Runtime",
        "RuntimeSettings",
        "TextDelta",
        "Tool",
        "ToolContext",
        "TurnStopped",
        "Unavailable",
        "Usage",
        "Workflow",
        "WorkflowContext",
        "current_response_id",
        "encode_event",
        "new_id",
        "normalize_input",
        "normalize_item",
        "synthesize_events",
        "text_of",
        "tool",
        "workflow",
        # What the server uses instead of the store (tests/test_layering.py).
        "Conversations",
        "Inspector",
        "ConversationRecord",
        "EventRow",
        "ResponseRecord",
        "StoreError",
        "StoreOpenError",
        "open_store",
        "redacted",
        "sqlite_path",
    ],
    store: [
        "SCHEMA_VERSION",
        "Admission",
        "CommitListener",
        "Conflict",
        "IdempotencyMismatch",
        "ConversationRecord",
        "EventRow",
        "Fence",
        "ItemRow",
        "JournalEntry",
        "LaneBusy",
        "LeaseLost",
        "NewResponse",
        "NewSteer",
        "Order",
        "ResponseRecord",
        "SQLiteStore",
        "SignalListener",
        "StaleSteers",
        "SteerNotAdded",
        "SteerRecord",
        "StopRequested",
        "Store",
        "StoreError",
        "StoreOpenError",
        "StoreUnavailable",
        "StoreVanished",
        "TooManyQueued",
        "is_postgres",
        "open_sqlite_store",
        "open_store",
        "redacted",
        "sqlite_path",
    ],
}


@pytest.mark.parametrize("package", list(PUBLIC), ids=lambda p: p.__name__)
def test_public_names_are_exactly_the_documented_ones(package: object) -> None:
    assert sorted(package.__all__) == sorted(PUBLIC[package])  # type: ignore[index, attr-defined]
    for name in package.__all__:  # type: ignore[attr-defined]
        assert getattr(package, name) is not None
