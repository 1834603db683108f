"""The embedded model: a deterministic stand-in for an LLM, for tests and demos.

It is not a language model. It answers the latest user message by echoing its words
(cycled to the answer length), and obeys directives written in that message:

    [[words N]]          answer with N words (default: --embedded-words)
    [[delay MS]]         pause MS milliseconds before each delta (default: --embedded-delay-ms)
    [[call NAME {json}]] call the tool NAME with these JSON arguments; several directives in
                         one step make parallel calls; `[[next]]` starts the next step's calls
    [[fail]]             fail the step with a server_error

`tool_choice` limits the calls: with `none` it makes none; with a forced function or
`allowed_tools`, a directive naming another tool is not followed. When a call is required
(`required`, a forced function, `allowed_tools` in mode `required`) and the turn's first
step has no directive it may follow, it calls the forced tool, else the first allowed
one (the server's tools first, then the declared ones), with `{}`. Later steps of the
turn call only what their directives say: a step after tool outputs answers them rather
than call again, so a required choice cannot loop.

After tool outputs it answers `NAME -> OUTPUT` for each output it received. Text is
deterministic; call ids are random, as a real model's are. An answer
longer than `max_output_tokens` words is cut there and the response ends `incomplete`.
Usage counts words: input words of the whole history, output words emitted.

Asked for a summary (compaction: POST /v1/responses/compact, or `context_management`), it
gives a deterministic one made of the history's own words: the first words of each item,
in order, at most `SUMMARY_WORDS` in all. Its answers read only the latest user message
and the calls after it, so a `[[call]]` plan compacted in the middle of its turn starts
over (a real model reads the summary).

What the request asks of the answer is honoured: with `text.format` `json_schema` the
answer is a minimal instance of the schema (`_minimal_instance.py`), with `json_object`
it is `{}`; asked for logprobs, each word is a token of log probability 0 (the model is
deterministic: probability 1), its own only alternative. It serves at the `default`
tier, and says so. Other tuning (temperature, reasoning effort, ...) cannot change a
deterministic answer. It never reasons nor refuses. Images and files in the input are
accepted (and stored with it) but not read: it answers from the text alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from recovery import (
    FunctionCallDelta,
    Incomplete,
    ModelError,
    ModelEvent,
    ModelInfo,
    ModelRequest,
    TextDelta,
    Usage,
    text_of,
)

from ._minimal_instance import UnbuildableSchema, minimal_json

SERVED = ModelInfo(service_tier="default")  # the tier it answers at (the model: as asked)
SUMMARY_WORDS = 64  # the longest summary, in words
_GIST_WORDS = 8  # words of each item in a summary
_DIRECTIVE = re.compile(r"\[\[\s*(\w+)\s*(.*?)\s*\]\]", re.DOTALL)


@dataclass(frozen=True, slots=True)
class _Plan:
    words: int
    delay: float
    steps: list[list[tuple[str, str]]]  # per step, the (tool name, arguments JSON) to call
    fail: bool
    text: list[str]


class EmbeddedModel:
    """A deterministic model that needs nothing but this process."""

    name = "embedded"

    def __init__(self, *, words: int = 10, delay_ms: float = 0.0) -> None:
        self._words = words
        self._delay = delay_ms / 1000

    def count_input_tokens(self, request: ModelRequest) -> int:
        """The `input_tokens` of the usage a step sent `request` reports: the words of its
        items (POST /v1/responses/input_tokens answers the same)."""
        return sum(len(_words_of(item)) for item in request.input)

    def summarize(self, request: ModelRequest) -> str:
        """A summary of `request.input`: the first words of each item (a message's role and
        text, a call's name and arguments, an output's text), at most SUMMARY_WORDS."""
        gists = [" ".join(_gist(item)[:_GIST_WORDS]) for item in request.input]
        words = "; ".join(gist for gist in gists if gist).split()[:SUMMARY_WORDS]
        return " ".join(words) or "(nothing was said)"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        user_index, user_text = _last_user_message(request.input)
        plan = self._plan(user_text)
        if plan.fail:
            raise ModelError("The embedded model was asked to fail ([[fail]]).")
        input_tokens = self.count_input_tokens(request)
        after_user = request.input[user_index + 1 :]
        step = sum(
            1
            for i, item in enumerate(after_user)
            if item.get("type") == "function_call"
            and (i == 0 or after_user[i - 1].get("type") != "function_call")
        )
        allowed, forced = _choice(request)
        planned = plan.steps[step] if step < len(plan.steps) else []
        calls = [(n, a) for n, a in planned if n in allowed]
        if not calls and forced and step == 0 and allowed:
            calls = [(allowed[0], "{}")]
        if calls:
            if not request.parallel_tool_calls:
                calls = calls[:1]
            for index, (name, arguments) in enumerate(calls):
                call_id = _call_id()
                await self._pause(plan.delay, index)
                yield FunctionCallDelta(call_id=call_id, name=name, arguments=arguments)
            yield SERVED
            yield Usage(input_tokens=input_tokens, output_tokens=len(calls))
            return
        words = _answer_words(request.input[user_index + 1 :], plan)
        if request.text_format is not None:
            # One token, never cut short; built off the event loop (bounded, but a few
            # milliseconds of CPU for the largest schemas the create admits).
            words = [await asyncio.to_thread(_structured, request.text_format)]
        limit = request.max_output_tokens
        emitted = words if limit is None else words[:limit]
        for i, word in enumerate(emitted):
            await self._pause(plan.delay, i)
            token = word if i == 0 else " " + word
            yield TextDelta(token, _certain(token, request) if request.logprobs else ())
        yield SERVED
        yield Usage(input_tokens=input_tokens, output_tokens=len(emitted))
        if len(emitted) < len(words):
            yield Incomplete("max_output_tokens")

    def _plan(self, text: str) -> _Plan:
        words, delay, fail = self._words, self._delay, False
        steps: list[list[tuple[str, str]]] = [[]]
        for match in _DIRECTIVE.finditer(text):
            name, arg = match.group(1).lower(), match.group(2)
            if name == "words" and arg.isdigit():
                words = max(1, int(arg))
            elif name == "delay":
                with contextlib.suppress(ValueError):
                    delay = max(0.0, float(arg)) / 1000
            elif name == "call":
                tool, _, arguments = arg.partition(" ")
                steps[-1].append((tool, _normalize_json(arguments)))
            elif name == "next":
                steps.append([])
            elif name == "fail":
                fail = True
        plain = _DIRECTIVE.sub(" ", text).split()
        return _Plan(words, delay, [s for s in steps if s], fail, plain)

    @staticmethod
    async def _pause(delay: float, index: int) -> None:
        if delay:
            await asyncio.sleep(delay)
        elif index % 32 == 31:
            # Without a delay, yield to other tasks now and then, not at every delta: each
            # yield waits for a whole turn of a busy event loop.
            await asyncio.sleep(0)


def _choice(request: ModelRequest) -> tuple[list[str], bool]:
    """The tools `tool_choice` lets a step call, in the order the model was given them,
    and whether it must call one: `none`, none; `auto`, any; `required`, any, and one
    must be called; a forced function, that one and it must be; `allowed_tools`, those
    listed, and one must be called when its mode is `required`."""
    names = [name for tool in request.tools if isinstance(name := tool.get("name"), str)]
    choice = request.tool_choice
    if choice == "none":
        return [], False
    if not isinstance(choice, dict):
        return names, choice == "required"
    if choice.get("type") == "function":
        return [name for name in names if name == choice.get("name")], True
    if choice.get("type") == "allowed_tools":
        listed = {tool.get("name") for tool in choice.get("tools") or () if isinstance(tool, dict)}
        return [name for name in names if name in listed], choice.get("mode") == "required"
    return names, False


def _structured(text_format: dict[str, Any]) -> str:
    """The answer for a JSON `text.format`: a minimal instance of its schema, or `{}`."""
    if text_format.get("type") != "json_schema":
        return "{}"
    try:
        return minimal_json(text_format.get("schema"))
    except UnbuildableSchema as exc:
        # The create refuses such a schema (_validation_output.py); one stored before that
        # check, and recovered, fails here within the same bounds rather than running away.
        name = text_format.get("name")
        raise ModelError(
            f"Invalid schema for response_format '{name}': {exc}", code="invalid_prompt"
        ) from None


def _certain(token: str, request: ModelRequest) -> tuple[dict[str, Any], ...]:
    """The logprobs of a token said with certainty: log probability 0."""
    top = {"token": token, "logprob": 0.0, "bytes": list(token.encode())}
    alternatives = [top] if request.top_logprobs else []
    return ({**top, "top_logprobs": alternatives},)


def _last_user_message(items: list[dict[str, Any]]) -> tuple[int, str]:
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        if item.get("type", "message") == "message" and item.get("role") == "user":
            return index, text_of(item)
    return -1, ""


def _answer_words(since_user: list[dict[str, Any]], plan: _Plan) -> list[str]:
    names = {i["call_id"]: i["name"] for i in since_user if i.get("type") == "function_call"}
    outputs = [i for i in since_user if i.get("type") == "function_call_output"]
    if outputs:
        text = "; ".join(
            f"{names.get(o['call_id'], o['call_id'])} -> {_output_text(o['output'])}"
            for o in outputs
        )
        return text.split()
    source = plan.text or ["(empty)"]
    return [source[i % len(source)] for i in range(plan.words)]


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    return " ".join(p.get("text", "") for p in output if isinstance(p, dict))


def _words_of(item: dict[str, Any]) -> list[str]:
    kind = item.get("type", "message")
    if kind == "message":
        return text_of(item).split()
    if kind == "function_call":
        return str(item.get("arguments", "")).split()
    if kind == "function_call_output":
        return _output_text(item.get("output", "")).split()
    return []


def _gist(item: dict[str, Any]) -> list[str]:
    """What a summary says of an item, as words."""
    kind = item.get("type", "message")
    if kind == "message":
        return [f"{item.get('role')}:", *text_of(item).split()]
    if kind == "function_call":
        return [f"{item.get('name')}", *str(item.get("arguments", "")).split()]
    if kind == "function_call_output":
        return ["->", *_output_text(item.get("output", "")).split()]
    return []


def _normalize_json(text: str) -> str:
    text = text.strip() or "{}"
    try:
        return json.dumps(json.loads(text), separators=(",", ":"))
    except json.JSONDecodeError:
        return text  # passed on as the model wrote it: tools see invalid arguments


def _call_id() -> str:
    # Random, as a real model's: a step cut off by a crash and generated again must not
    # repeat the call id of the item it cut off (which stays in the output, incomplete).
    return "call_" + secrets.token_hex(12)
