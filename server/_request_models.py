"""The pydantic models of request bodies: content parts, input items, tools, tool_choice,
the create request and the conversation requests, and the `type`-tagged dispatch tables
that `_request_rules.py` picks a model from (and `_openapi.py` documents).

Every model has `extra="forbid"` (`_Strict`), so an unknown field is a 400 naming it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Discriminator, Field, Tag, WithJsonSchema

from ._ids import Id
from ._validation_base import Json, _Strict
from ._validation_output import Include, ReasoningParam, TextParam

# -- content parts and items ----------------------------------------------------------


class InputText(_Strict):
    type: Literal["input_text"]
    text: str


# What `_attachments.py` accepts, documented: a base64 data: URL (padded, as decoded).
_BASE64 = r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"
DATA_URL = rf"^data:[^,]*;base64,{_BASE64}$"


class InputImage(_Strict):
    type: Literal["input_image"]
    detail: Literal["low", "high", "auto", "original"] = "auto"
    # An http(s) URL or a base64 data: URL; by `file_id` it is refused (no Files API).
    image_url: Annotated[str, Field(pattern=rf"^(?:https?://.*|{DATA_URL[1:-1]})$")]
    file_id: Annotated[None, WithJsonSchema({"type": "null"})] = None


class InputFile(_Strict):
    """An `input_file` as stored and listed (see `InputFileInline` for a request's)."""

    type: Literal["input_file"]
    file_id: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None


class InputFileInline(_Strict):
    """An `input_file` as a request may send it: inline, with its name. By `file_id` or
    `file_url` it is refused (`_attachments.py`)."""

    type: Literal["input_file"]
    file_data: Annotated[str, Field(pattern=DATA_URL)]
    filename: Annotated[str, Field(min_length=1)]
    file_id: Annotated[None, WithJsonSchema({"type": "null"})] = None
    file_url: Annotated[None, WithJsonSchema({"type": "null"})] = None


class FileCitation(_Strict):
    type: Literal["file_citation"]
    file_id: str
    index: int
    filename: str


class UrlCitation(_Strict):
    type: Literal["url_citation"]
    url: str
    start_index: int
    end_index: int
    title: str


class ContainerFileCitation(_Strict):
    type: Literal["container_file_citation"]
    container_id: str
    file_id: str
    start_index: int
    end_index: int
    filename: str


class FilePath(_Strict):
    type: Literal["file_path"]
    file_id: str
    index: int


_ANNOTATIONS: dict[str, str] = {
    "file_citation": "FileCitation",
    "url_citation": "UrlCitation",
    "container_file_citation": "ContainerFileCitation",
    "file_path": "FilePath",
}


def _annotation_tag(value: Any) -> str | None:
    """The branch an annotation is checked against, by its `type`. Each branch is tagged
    with its model's name, which an error's `param` leaves out (`_validation_errors.py`);
    what is not an object is checked against the first, to be refused as not one."""
    if not isinstance(value, dict):
        return "FileCitation"
    kind = value.get("type")
    return _ANNOTATIONS.get(kind) if isinstance(kind, str) else None


# OpenAI's `Annotation`: one of four kinds, by `type`.
Annotation = Annotated[
    Annotated[FileCitation, Tag("FileCitation")]
    | Annotated[UrlCitation, Tag("UrlCitation")]
    | Annotated[ContainerFileCitation, Tag("ContainerFileCitation")]
    | Annotated[FilePath, Tag("FilePath")],
    Discriminator(
        _annotation_tag,
        custom_error_type="invalid_annotation",
        custom_error_message="an annotation's type must be one of " + ", ".join(_ANNOTATIONS),
    ),
]


class TopLogProb(_Strict):
    token: str
    logprob: float
    bytes: list[int]


class LogProb(_Strict):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[TopLogProb]


class OutputText(_Strict):
    type: Literal["output_text"]
    text: str
    annotations: list[Annotation] = Field(default_factory=list)
    logprobs: list[LogProb] = Field(default_factory=list)


class Refusal(_Strict):
    type: Literal["refusal"]
    refusal: str


# An `input_file` is taken inline only (`file_data` with `filename`); by `file_id` or
# `file_url` it is refused before its model is picked (`_attachments.py`).
PART_MODELS: dict[str, type[_Strict]] = {
    "input_text": InputText,
    "input_image": InputImage,
    "input_file": InputFileInline,
    "output_text": OutputText,
    "refusal": Refusal,
}


class Message(_Strict):
    type: Literal["message"] | None = None
    id: Id | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[Json]
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    phase: Literal["commentary", "final_answer"] | None = None


class FunctionCall(_Strict):
    type: Literal["function_call"]
    id: Id | None = None
    call_id: Annotated[str, Field(min_length=1, max_length=64)]
    name: Annotated[str, Field(min_length=1)]
    arguments: str
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    namespace: str | None = None


class FunctionCallOutput(_Strict):
    type: Literal["function_call_output"]
    id: Id | None = None
    call_id: Annotated[str, Field(min_length=1, max_length=64)]
    output: str | list[Json]
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class SummaryText(_Strict):
    type: Literal["summary_text"]
    text: str


class ReasoningText(_Strict):
    type: Literal["reasoning_text"]
    text: str


class Reasoning(_Strict):
    type: Literal["reasoning"]
    id: Id | None = None
    summary: list[SummaryText] = Field(default_factory=list)
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class Compaction(_Strict):
    """A compaction item (POST /v1/responses/compact, or a create's `context_management`):
    it stands for the items it summarised (recovery/_compaction.py). One another server
    made is refused unless the model reads it as it is (a Responses upstream)."""

    type: Literal["compaction"]
    id: Id | None = None
    encrypted_content: Annotated[str, Field(min_length=1, max_length=20_971_520)]
    created_by: str | None = None


class ItemReference(_Strict):
    """An item stored earlier, by id; replaced by that item before the request is checked
    or stored (recovery/_references.py). `type` may be left out, as OpenAI's schema allows."""

    type: Literal["item_reference"] | None = None
    id: Id


ITEM_MODELS: dict[str, type[_Strict]] = {
    "message": Message,
    "function_call": FunctionCall,
    "function_call_output": FunctionCallOutput,
    "reasoning": Reasoning,
    "compaction": Compaction,
    "item_reference": ItemReference,
}


class ToolChoiceFunction(_Strict):
    type: Literal["function"]
    name: str


class ToolChoiceAllowedTools(_Strict):
    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"]
    tools: list[Json]


TOOL_CHOICE_MODELS: dict[str, type[_Strict]] = {
    "function": ToolChoiceFunction,
    "allowed_tools": ToolChoiceAllowedTools,
}


class FunctionTool(_Strict):
    type: Literal["function"]
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")]
    description: str | None = None
    parameters: Json | None = None
    strict: bool | None = None
    defer_loading: bool | None = None
    allowed_callers: list[Literal["direct", "programmatic"]] | None = None
    output_schema: Json | None = None


# -- create ---------------------------------------------------------------------------


def check_metadata(value: dict[str, str]) -> dict[str, str]:
    if len(value) > 16:
        raise ValueError("metadata can have at most 16 key-value pairs")
    for key, item in value.items():
        if len(key) > 64:
            raise ValueError(f"metadata key '{key[:16]}...' is longer than 64 characters")
        if len(item) > 512:
            raise ValueError(f"metadata value of '{key}' is longer than 512 characters")
    return value


Metadata = Annotated[
    dict[str, str],
    AfterValidator(check_metadata),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": 16,
            "propertyNames": {"maxLength": 64},
            "additionalProperties": {"type": "string", "maxLength": 512},
        }
    ),
]


class ConversationRef(_Strict):
    id: Id


class ContextManagement(_Strict):
    """Compact the history before a model step whose input is over `compact_threshold`
    tokens (recovery/_compactor.py). The server knows no model's context window, so the
    threshold is required."""

    type: Literal["compaction"]
    compact_threshold: Annotated[int, Field(ge=1000)]


class StreamOptions(_Strict):
    include_obfuscation: bool | None = None


# Newer parameters that only tune OpenAI's service, in the shapes of OpenAI's
# CreateResponse (the openai SDK's `response_create_params`): checked, then dropped
# (`_request_rules.py`); nothing here changes an answer of this server.


class AccessPrograms(_Strict):
    cyber: Literal["standard", "daybreak_blue", "daybreak_red"] | None = None


class BackgroundOptions(_Strict):
    completion_window: Literal["soonest", "2h", "8h"] | None = None
    continuation_id: str | None = None


class ImageOptions(_Strict):
    context_compression: Literal["auto", "enabled", "disabled"] | None = None


class PromptCacheOptions(_Strict):
    ttl: Literal["30m", "12h"] | None = None
    mode: Literal["implicit", "explicit"] | None = None
    comparison_response_id: str | None = None
    # `true` asks for no output (only a warmed cache): refused, as nothing is cached
    # (_validation_output.check_output_options), and documented as `false` only.
    prewarm: Annotated[
        bool | None, WithJsonSchema({"anyOf": [{"const": False}, {"type": "null"}]})
    ] = None


class ModerationConfig(_Strict):
    mode: Literal["score", "block"]


class ModerationPolicy(_Strict):
    input: ModerationConfig | None = None
    output: ModerationConfig | None = None


class ModerationParam(_Strict):
    """OpenAI's `moderation`: checked, then refused (this server runs no moderation)."""

    model: str
    policy: ModerationPolicy | None = None


class CreateResponse(_Strict):
    model: str
    input: str | list[Json] | None = None
    instructions: str | None = None
    tools: list[Json] | None = None
    tool_choice: Literal["none", "auto", "required"] | Json | None = None
    parallel_tool_calls: bool | None = None
    previous_response_id: Id | None = None
    conversation: Id | ConversationRef | None = None
    store: bool | None = None
    background: bool | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    metadata: Metadata | None = None
    max_output_tokens: Annotated[int, Field(ge=16)] | None = None
    max_tool_calls: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    include: Include | None = None
    text: TextParam | None = None
    reasoning: ReasoningParam | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    safety_identifier: Annotated[str, Field(max_length=64)] | None = None
    user: str | None = None
    service_tier: (
        Literal["auto", "default", "flex", "scale", "priority", "fast", "ultrafast"] | None
    ) = None
    # Extension (docs/protocol.md section 10): what to do when the lane is busy.
    multitask_strategy: Literal["reject", "enqueue", "interrupt", "rollback"] | None = None
    context_management: Annotated[list[ContextManagement], Field(max_length=1)] | None = None
    # Known but not supported here: refused with a clear message
    # (_validation_output.UNSUPPORTED_PARAMETERS).
    prompt: Annotated[Json | None, WithJsonSchema({"type": "null"})] = None
    moderation: Annotated[ModerationParam | None, WithJsonSchema({"type": "null"})] = None
    # 2026 additions that only tune the service: checked, then dropped.
    access_programs: AccessPrograms | None = None
    background_options: BackgroundOptions | None = None
    image: ImageOptions | None = None
    prompt_cache_options: PromptCacheOptions | None = None


# -- conversations --------------------------------------------------------------------


class CreateConversation(_Strict):
    items: list[Json] | None = None
    metadata: Metadata | None = None


class UpdateConversation(_Strict):
    metadata: Metadata | None


class AddConversationItems(_Strict):
    items: list[Json]
