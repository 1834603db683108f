"""What a create request asks of the answer: `text` (its format and verbosity),
`reasoning`, `include`, and the known parameters this server refuses because it cannot
honour them (docs/protocol.md section 3: nothing asked for is dropped silently).

`text.format` is a `type`-tagged union, dispatched by hand (as input items and tools are
in `_request_rules.py`) so that an error names `text.format.<field>`; its field is typed
loosely for pydantic and documented exactly with `WithJsonSchema`. A `json_schema` format
must have a minimal instance within the bounds of `_minimal_instance.py`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, WithJsonSchema

from ._errors import APIError
from ._minimal_instance import UnbuildableSchema, minimal_json
from ._validation_base import Json, _Strict, validate
from ._validation_errors import invalid_type


class TextFormatText(_Strict):
    type: Literal["text"]


class TextFormatJsonSchema(_Strict):
    type: Literal["json_schema"]
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")]
    # `schema` would shadow a BaseModel attribute: the field has another name.
    json_schema: Json = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextFormatJsonObject(_Strict):
    type: Literal["json_object"]


TEXT_FORMAT_MODELS: dict[str, type[_Strict]] = {
    "text": TextFormatText,
    "json_schema": TextFormatJsonSchema,
    "json_object": TextFormatJsonObject,
}


def _any_of(*models: type[_Strict]) -> Json:
    return {"anyOf": [m.model_json_schema(by_alias=True) for m in models]}


class TextParam(_Strict):
    format: Annotated[Json | None, WithJsonSchema(_any_of(*TEXT_FORMAT_MODELS.values()))] = None
    verbosity: Literal["low", "medium", "high"] | None = None


_SUMMARY = Literal["auto", "concise", "detailed"]


class ReasoningParam(_Strict):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    summary: _SUMMARY | None = None
    generate_summary: _SUMMARY | None = None  # deprecated name of `summary`
    context: Literal["auto", "current_turn", "all_turns"] | None = None
    mode: str | None = None


# include[] values honoured: logprobs are returned (as `top_logprobs` asks too); input
# images keep their URL in the stored items; reasoning items keep a Responses upstream's
# encrypted content (the others make none).
INCLUDE_SUPPORTED = (
    "message.output_text.logprobs",
    "message.input_image.image_url",
    "reasoning.encrypted_content",
)
# include[] values that ask for the results of a hosted tool, by tool.
INCLUDE_HOSTED = {
    "file_search_call.results": "file_search",
    "web_search_call.results": "web_search",
    "web_search_call.action.sources": "web_search",
    "computer_call_output.output.image_url": "computer_use",
    "code_interpreter_call.outputs": "code_interpreter",
}

Include = Annotated[
    list[str],
    WithJsonSchema({"type": "array", "items": {"enum": list(INCLUDE_SUPPORTED)}}),
]

# Known parameters asking for what this server cannot do: 400 unsupported_parameter.
UNSUPPORTED_PARAMETERS = {
    "prompt": "Prompt templates ('prompt') are not supported by this server.",
    "moderation": "Moderation ('moderation') is not supported: this server does not run "
    "moderation on a response's input or output.",
}


def check_output_options(params: Json) -> None:
    """Check what `validate(CreateResponse)` cannot: `text.format` by its type, and each
    `include` value; refuse what cannot be honoured, naming it."""
    for name, message in UNSUPPORTED_PARAMETERS.items():
        if params.get(name) is not None:
            raise APIError(400, message, param=name, code="unsupported_parameter")
    if (params.get("prompt_cache_options") or {}).get("prewarm"):
        raise APIError(
            400,
            "prompt_cache_options.prewarm is not supported: this server has no prompt cache "
            "to prepare, and would answer the request.",
            param="prompt_cache_options.prewarm",
            code="unsupported_value",
        )
    text = params.get("text")
    if text and text.get("format") is not None:
        text["format"] = validate_text_format(text["format"], path="text.format")
    for index, value in enumerate(params.get("include") or ()):
        check_include(value, f"include[{index}]")


def validate_text_format(value: Any, *, path: str) -> Json:
    if not isinstance(value, dict):
        raise invalid_type(path, "an object", value)
    kind = value.get("type")
    model = TEXT_FORMAT_MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        supported = ", ".join(map(repr, TEXT_FORMAT_MODELS))
        raise APIError(
            400,
            f"Invalid value: '{kind}'. Supported values are: {supported}.",
            param=f"{path}.type",
            code="invalid_value",
        )
    checked = validate(model, value, path=path)
    if model is TextFormatJsonSchema:
        _check_buildable(checked, path)
    return checked


def _check_buildable(text_format: Json, path: str) -> None:
    """Refuse a schema whose minimal instance cannot be built within the bounds of
    `_minimal_instance.py` (a `$ref` cycle, an answer too large, a `$ref` to nothing),
    before anything is stored: the embedded model answers with that instance, and a
    recovered response would build it again after every restart. Whichever model will
    answer, since that is decided only when the turn runs (an agent may have its own);
    the bounds are far past what structured outputs use."""
    try:
        minimal_json(text_format["schema"])
    except UnbuildableSchema as exc:
        raise APIError(
            400,
            f"Invalid schema for response_format '{text_format['name']}': {exc}",
            param=f"{path}.schema",
            code="invalid_json_schema",
        ) from None


def check_include(value: str, param: str) -> None:
    if value in INCLUDE_SUPPORTED:
        return
    tool = INCLUDE_HOSTED.get(value)
    if tool is not None:
        raise APIError(
            400,
            f"include value '{value}' is not supported by this server: it asks for results of "
            f"the hosted '{tool}' tool, which this server does not run.",
            param=param,
            code="unsupported_value",
        )
    supported = ", ".join(map(repr, INCLUDE_SUPPORTED))
    raise APIError(
        400,
        f"Invalid value: '{value}'. Supported values are: {supported}.",
        param=param,
        code="invalid_value",
    )
