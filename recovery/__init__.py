"""The durable runtime of durable-responses: turns, steps, the tool journal, events,
cancellation and recovery, and the public API for hosting an agent (`Agent`, `tool`,
`ToolContext`, and the model protocol)."""

# What the server needs of the store, so that it never imports `store` itself
# (tests/test_layering.py): the records it renders, the error it maps, and `open_store`.
from store import (
    ConversationRecord,
    EventRow,
    ResponseRecord,
    StoreError,
    StoreOpenError,
    StoreUnreachableError,
    open_store,
    redacted,
    sqlite_path,
)

from ._admission import check_tool_choice
from ._agent import Agent
from ._compaction import model_view
from ._conversations import Conversations
from ._errors import (
    InvalidRequest,
    LaneLocked,
    ModelError,
    NotFound,
    QueueFull,
    RecoveryError,
    SteerRefused,
    StepFailed,
    TurnStopped,
    Unavailable,
)
from ._ids import new_id
from ._inspect import Inspector
from ._items import normalize_input, normalize_item, text_of
from ._model import (
    FunctionCallDelta,
    Incomplete,
    MessageStart,
    Model,
    ModelEvent,
    ModelInfo,
    ModelRequest,
    ReasoningDelta,
    ReasoningDone,
    ReasoningStart,
    RefusalDelta,
    TextDelta,
    Usage,
)
from ._observer import ModelCall, Observer, ResponseEnd, current_response_id
from ._runtime import Runtime
from ._settings import RuntimeSettings
from ._sinks import encode as encode_event
from ._status import TERMINAL_EVENTS, ResponseStatus
from ._steering import SteerAccepted, SteerOutcome
from ._synthesize import synthesize as synthesize_events
from ._synthesize import terminal_event
from ._tokens import count_tokens
from ._tools import Tool, ToolContext, tool
from ._workflow import Workflow, WorkflowContext, workflow

__all__ = [
    "TERMINAL_EVENTS",
    "Agent",
    "ConversationRecord",
    "Conversations",
    "EventRow",
    "FunctionCallDelta",
    "Incomplete",
    "Inspector",
    "InvalidRequest",
    "LaneLocked",
    "MessageStart",
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
    "ReasoningDone",
    "ReasoningStart",
    "RecoveryError",
    "RefusalDelta",
    "ResponseEnd",
    "ResponseRecord",
    "ResponseStatus",
    "Runtime",
    "RuntimeSettings",
    "SteerAccepted",
    "SteerOutcome",
    "SteerRefused",
    "StepFailed",
    "StoreError",
    "StoreOpenError",
    "StoreUnreachableError",
    "TextDelta",
    "Tool",
    "ToolContext",
    "TurnStopped",
    "Unavailable",
    "Usage",
    "Workflow",
    "WorkflowContext",
    "check_tool_choice",
    "count_tokens",
    "current_response_id",
    "encode_event",
    "model_view",
    "new_id",
    "normalize_input",
    "normalize_item",
    "open_store",
    "redacted",
    "sqlite_path",
    "synthesize_events",
    "terminal_event",
    "text_of",
    "tool",
    "workflow",
]
