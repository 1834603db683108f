"""A scripted upstream that speaks the Responses API (`POST /v1/responses`, streamed), as
strict as OpenAI's: the server under test runs with `--upstream-api responses`.

    upstream.push(text("hello", summary=("Thinking.",)), fault(429), tool_calls(PARIS))
    upstream.push(text("Paris.", commentary=("Let me think.",)))  # two messages, by phase

It shares the Chat Completions fake's server (`ScriptedUpstream`, tests/support/
fake_upstream.py): turns play in order, every request body is kept in `requests` (headers
in `headers`, arrival times in `arrivals`), and a request OpenAI would refuse
(tests/support/responses_rules.py: unknown parameters, `store` not false, an unpaired
`function_call` or output, a reasoning item without encrypted content it issued, ...)
gets OpenAI's error, consumes no turn, and is listed in `refusals`. With the script empty
it answers "ok".

Events go out as OpenAI sends them: `response.created`, `response.in_progress`, each
output item (`output_item.added`, its parts and deltas, `output_item.done`), then one of
`response.completed`, `response.incomplete` or `response.failed`, numbered by
`sequence_number`, text deltas with an `obfuscation` field. As OpenAI does, a reasoning
summary is streamed only when the request asks for one (`reasoning.summary`), a reasoning
item carries `encrypted_content` only when `include` asks for it (bound to the item's
id, and only a partial, unusable one in its `output_item.added`), and logprobs come only
with `include: ["message.output_text.logprobs"]` (made up: -0.5 a word, `top_logprobs`
alternatives). Messages said before the answer (`commentary`) carry `phase: commentary`,
and the answer after them `phase: final_answer`. Under a JSON `text.format` a scripted
answer must be valid for it (a real model's is), and a scripted call must be to a function
the request's `tools` and `tool_choice` allow (`allowed_tools` included): a turn that
breaks either gets HTTP 500 naming the test's mistake, listed in `mistakes`.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tests.support.chat_rules import answer_error
from tests.support.fake_upstream import Fault, ScriptedHandler, ScriptedUpstream
from tests.support.responses_rules import allowed_calls, request_error

Call = tuple[str, str, str]  # (call id, name, arguments)
Event = dict[str, Any]
Item = dict[str, Any]


@dataclass(frozen=True)
class Turn:
    # text | refusal | tool_calls | incomplete | failed | error | fault | reset | reset_mid
    # | stall | malformed
    kind: str
    text: str = ""
    calls: tuple[Call, ...] = ()
    reasoning: str = ""  # raw reasoning: `reasoning_text` deltas (vLLM's gpt-oss)
    summary: tuple[str, ...] = ()  # summary parts, streamed when the request asks
    thinks: bool = False  # a reasoning item even without text (OpenAI's, unsummarized)
    commentary: tuple[str, ...] = ()  # messages said before the answer or the calls
    usage: tuple[int, int] = (7, 3)  # (input_tokens, output_tokens)
    cached_tokens: int = 0
    cache_write_tokens: int | None = None  # reported only when set, as older APIs do
    reasoning_tokens: int = 0
    model: str | None = None  # the `model` it reports (default: the request's)
    service_tier: str | None = None  # the tier it reports (default: the request's)
    reason: str = "max_output_tokens"  # why an `incomplete` turn stopped
    code: str | None = None  # a `failed` or `error` turn's error
    message: str = ""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] | None = None  # a fault's JSON body
    seconds: float = 0.0
    pace: float = 0.0  # seconds between two events


def text(
    value: str,
    *,
    reasoning: str = "",
    summary: tuple[str, ...] = (),
    thinks: bool = False,
    commentary: tuple[str, ...] = (),
    usage: tuple[int, int] = (7, 3),
    cached_tokens: int = 0,
    cache_write_tokens: int | None = None,
    reasoning_tokens: int = 0,
    model: str | None = None,
    service_tier: str | None = None,
    pace: float = 0.0,
) -> Turn:
    """Answer `value`, word by word, after the reasoning and the commentary (if any)."""
    return Turn(
        "text",
        text=value,
        reasoning=reasoning,
        summary=summary,
        thinks=thinks,
        commentary=commentary,
        usage=usage,
        cached_tokens=cached_tokens,
        cache_write_tokens=cache_write_tokens,
        reasoning_tokens=reasoning_tokens,
        model=model,
        service_tier=service_tier,
        pace=pace,
    )


def refusal(value: str) -> Turn:
    """Decline: a message whose one part is a `refusal`."""
    return Turn("refusal", text=value)


def tool_calls(
    *calls: Call,
    preface: str = "",
    reasoning: str = "",
    summary: tuple[str, ...] = (),
    thinks: bool = False,
    commentary: tuple[str, ...] = (),
) -> Turn:
    """Call these tools (arguments in two deltas each), after `preface` as a message."""
    return Turn(
        "tool_calls",
        text=preface,
        calls=calls,
        reasoning=reasoning,
        summary=summary,
        thinks=thinks,
        commentary=commentary,
    )


def incomplete(
    value: str, *, reason: str = "max_output_tokens", calls: tuple[Call, ...] = ()
) -> Turn:
    """Stop early: `value` as a message closed `incomplete`; given `calls`, the last one is
    cut off mid-arguments (never done)."""
    return Turn("incomplete", text=value, reason=reason, calls=calls)


def failed(code: str, message: str, *, partial: str = "") -> Turn:
    """Stream `partial` (if any), then `response.failed` with this error."""
    return Turn("failed", text=partial, code=code, message=message)


def error_event(code: str | None, message: str) -> Turn:
    """An `error` event in the stream, and nothing after it."""
    return Turn("error", code=code, message=message)


def fault(
    status: int, headers: dict[str, str] | None = None, body: dict[str, Any] | None = None
) -> Turn:
    return Turn("fault", status=status, headers=headers or {}, body=body)


def reset() -> Turn:
    return Turn("reset")


def reset_mid(value: str, *, summary: tuple[str, ...] = (), hang: float = 0.0) -> Turn:
    """Stream the reasoning (if any) and the first word of `value`, then drop the
    connection; with `hang`, only after holding it open, silent, that many seconds (time
    for a test to kill the server in between)."""
    return Turn("reset_mid", text=value, summary=summary, seconds=hang)


def stall(seconds: float) -> Turn:
    return Turn("stall", seconds=seconds)


def malformed() -> Turn:
    return Turn("malformed")


_MADE_UP = itertools.count()


class ResponsesHandler(ScriptedHandler):
    """Plays turns as a Responses event stream."""

    upstream: ClassVar[FakeResponsesUpstream]
    request: dict[str, Any]
    turn: Turn
    seq = 0
    output: list[Item]

    def prepare(self, body: dict[str, Any]) -> None:
        self.request = body

    def play(self, turn: Turn) -> None:
        if turn.kind == "reset":
            self.drop()
            return
        mistake = self._mistake(turn)
        if mistake is not None:
            self.upstream.mistakes.append(mistake)
            turn = fault(500, body={"error": {"message": f"fake upstream: {mistake}"}})
        if turn.kind == "fault":
            error = turn.body or {"error": {"message": "scripted fault", "type": "server_error"}}
            self.answer_json(turn.status, error, turn.headers)
            return
        self.start_stream()
        if turn.kind == "stall":
            time.sleep(turn.seconds)
            return
        if turn.kind == "malformed":
            self.send("event: response.created\ndata: {this is not json\n\n")
            return
        self.turn, self.seq, self.output = turn, 0, []
        self.response_id = f"resp_fake{next(_MADE_UP)}"
        self._event("response.created", response=self._response("in_progress"))
        self._event("response.in_progress", response=self._response("in_progress"))
        self._items(turn)

    def _mistake(self, turn: Turn) -> str | None:
        """Why no real model could play `turn` for the request (it passed `fault`)."""
        if turn.kind == "text":
            return answer_error(_chat_format(self.request), turn.text)
        allowed = allowed_calls(self.request)
        for _, name, _ in turn.calls:
            if name not in allowed:
                return (
                    f"the scripted call to '{name}' is not one the request lets the model "
                    f"make (it may call: {sorted(allowed)})"
                )
        return None

    def _items(self, turn: Turn) -> None:
        if turn.kind == "reset_mid":
            self._reasoning(turn)
            self._message_start("output_text")
            if turn.text:
                self._delta("response.output_text.delta", turn.text.split(" ")[0])
            if turn.seconds:
                time.sleep(turn.seconds)
                with contextlib.suppress(OSError):  # the server may be gone by now
                    self.drop()
                return
            self.drop()
            return
        if turn.kind == "error":
            self._event("error", code=turn.code, message=turn.message, param=None)
            return
        self._reasoning(turn)
        for said in turn.commentary:
            self._message(said, "output_text", cut=False, phase="commentary")
        if turn.kind in ("text", "refusal") or turn.text:
            kind = "refusal" if turn.kind == "refusal" else "output_text"
            phase = "final_answer" if turn.commentary and turn.kind != "tool_calls" else None
            self._message(turn.text, kind, cut=turn.kind in ("incomplete", "failed"), phase=phase)
        if turn.kind == "incomplete" and turn.calls:
            for call in turn.calls[:-1]:
                self._call(call)
            self._call(turn.calls[-1], cut=True)
        else:
            for call in turn.calls:
                self._call(call)
        self._end(turn)

    # -- items --------------------------------------------------------------------------

    def _reasoning(self, turn: Turn) -> None:
        asked = (self.request.get("reasoning") or {}).get("summary")
        summary = turn.summary if asked else ()
        if not (turn.reasoning or turn.summary or turn.thinks):
            return
        index = len(self.output)
        item: Item = {"id": f"rs_fake{next(_MADE_UP)}", "type": "reasoning", "summary": []}
        if turn.reasoning:
            item["content"] = []
        self.output.append(item)
        sealed = "reasoning.encrypted_content" in (self.request.get("include") or ())
        # As OpenAI warns, the encrypted content of an item just added may be incomplete.
        added = {**item, "encrypted_content": "gAAAA-partial"} if sealed else dict(item)
        self._event("response.output_item.added", output_index=index, item=added)
        common = {"item_id": item["id"], "output_index": index}
        for number, said in enumerate(summary):
            where = {**common, "summary_index": number}
            self._event(
                "response.reasoning_summary_part.added",
                **where,
                part={"type": "summary_text", "text": ""},
            )
            for word in _words(said):
                self._event("response.reasoning_summary_text.delta", **where, delta=word)
            self._event("response.reasoning_summary_text.done", **where, text=said)
            done = {"type": "summary_text", "text": said}
            self._event("response.reasoning_summary_part.done", **where, part=done)
            item["summary"].append(done)
        if turn.reasoning:
            where = {**common, "content_index": 0}
            self._event(
                "response.content_part.added", **where, part={"type": "reasoning_text", "text": ""}
            )
            for word in _words(turn.reasoning):
                self._event("response.reasoning_text.delta", **where, delta=word)
            self._event("response.reasoning_text.done", **where, text=turn.reasoning)
            part = {"type": "reasoning_text", "text": turn.reasoning}
            self._event("response.content_part.done", **where, part=part)
            item["content"] = [part]
        if sealed:
            thought = turn.reasoning or " ".join(turn.summary)
            item["encrypted_content"] = self.upstream.encrypt(thought, item["id"])
        self._event("response.output_item.done", output_index=index, item=dict(item))

    def _message_start(self, kind: str, phase: str | None = None) -> tuple[int, Item]:
        index = len(self.output)
        item: Item = {
            "id": f"msg_fake{next(_MADE_UP)}",
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        if phase is not None:
            item["phase"] = phase
        self.output.append(item)
        self._event(
            "response.output_item.added", output_index=index, item=json.loads(json.dumps(item))
        )
        empty = {"type": "refusal", "refusal": ""} if kind == "refusal" else _text_part("", [])
        self._event(
            "response.content_part.added",
            item_id=item["id"],
            output_index=index,
            content_index=0,
            part=empty,
        )
        self._where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        return index, item

    def _message(self, value: str, kind: str, *, cut: bool, phase: str | None = None) -> None:
        index, item = self._message_start(kind, phase)
        if kind == "refusal":
            for word in _words(value):
                self._delta("response.refusal.delta", word)
            self._event("response.refusal.done", **self._where, refusal=value)
            part: Item = {"type": "refusal", "refusal": value}
        else:
            logprobs: list[Item] = []
            for word in _words(value):
                logprobs += self._delta("response.output_text.delta", word)
            self._event("response.output_text.done", **self._where, text=value, logprobs=logprobs)
            part = _text_part(value, logprobs)
        self._event("response.content_part.done", **self._where, part=part)
        item.update(status="incomplete" if cut else "completed", content=[part])
        self._event("response.output_item.done", output_index=index, item=item)

    def _delta(self, type_: str, word: str) -> list[Item]:
        """One delta event of the open message; its logprobs, when asked for."""
        fields: dict[str, Any] = {"delta": word}
        logprobs: list[Item] = []
        if type_ == "response.output_text.delta":
            if "message.output_text.logprobs" in (self.request.get("include") or ()):
                logprobs = [self._logprob(word)]
            fields["logprobs"] = logprobs
        self._event(type_, **self._where, **fields, obfuscation="xYz")
        return logprobs

    def _logprob(self, word: str) -> Item:
        alternatives = [{"token": word, "logprob": -0.5}, {"token": "alt", "logprob": -1.5}]
        top = int(self.request.get("top_logprobs") or 0)
        return {"token": word, "logprob": -0.5, "top_logprobs": alternatives[:top]}

    def _call(self, call: Call, *, cut: bool = False) -> None:
        call_id, name, arguments = call
        index = len(self.output)
        item: Item = {
            "id": f"fc_fake{next(_MADE_UP)}",
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": call_id,
            "name": name,
        }
        self.output.append(item)
        self._event("response.output_item.added", output_index=index, item=dict(item))
        where = {"item_id": item["id"], "output_index": index}
        half = len(arguments) // 2
        self._event(
            "response.function_call_arguments.delta",
            **where,
            delta=arguments[:half],
            obfuscation="x",
        )
        if cut:
            item.update(arguments=arguments[:half], status="incomplete")
            return
        self._event(
            "response.function_call_arguments.delta",
            **where,
            delta=arguments[half:],
            obfuscation="x",
        )
        self._event(
            "response.function_call_arguments.done", **where, arguments=arguments, name=name
        )
        item.update(arguments=arguments, status="completed")
        self._event("response.output_item.done", output_index=index, item=dict(item))

    # -- the response ---------------------------------------------------------------------

    def _end(self, turn: Turn) -> None:
        if turn.kind == "failed":
            error = {"code": turn.code, "message": turn.message}
            self._event("response.failed", response=self._response("failed", error=error))
        elif turn.kind == "incomplete":
            details = {"reason": turn.reason}
            self._event(
                "response.incomplete", response=self._response("incomplete", incomplete=details)
            )
        else:
            self._event("response.completed", response=self._response("completed"))

    def _response(
        self, status: str, *, error: Item | None = None, incomplete: Item | None = None
    ) -> Item:
        body, turn = self.request, self.turn
        asked = body.get("service_tier") or "auto"
        tier = turn.service_tier or ("default" if asked == "auto" else asked)
        final = status != "in_progress"
        given, said = turn.usage
        cache: Item = {"cached_tokens": turn.cached_tokens}
        if turn.cache_write_tokens is not None:
            cache["cache_write_tokens"] = turn.cache_write_tokens
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "model": turn.model or body.get("model"),
            "output": json.loads(json.dumps(self.output)) if final else [],
            "error": error,
            "incomplete_details": incomplete,
            "instructions": body.get("instructions"),
            "store": False,
            "service_tier": tier if final else asked,
            "usage": {
                "input_tokens": given,
                "input_tokens_details": cache,
                "output_tokens": said,
                "output_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
                "total_tokens": given + said,
            }
            if final
            else None,
        }

    def _event(self, type_: str, **fields: Any) -> None:
        if self.turn.pace:
            time.sleep(self.turn.pace)
        event = {"type": type_, "sequence_number": self.seq, **fields}
        self.seq += 1
        self.send(f"event: {type_}\ndata: {json.dumps(event)}\n\n")


def _words(value: str) -> list[str]:
    words = value.split(" ")
    return [word if i == 0 else " " + word for i, word in enumerate(words) if value]


def _text_part(value: str, logprobs: list[Item]) -> Item:
    return {"type": "output_text", "text": value, "annotations": [], "logprobs": logprobs}


def _chat_format(body: dict[str, Any]) -> dict[str, Any] | None:
    """The request's `text.format` as Chat Completions' `response_format` (for
    `answer_error`)."""
    form = (body.get("text") or {}).get("format")
    if not isinstance(form, dict) or form.get("type") != "json_schema":
        return form if isinstance(form, dict) else None
    return {
        "type": "json_schema",
        "json_schema": {"name": form.get("name"), "schema": form.get("schema")},
    }


class FakeResponsesUpstream(ScriptedUpstream):
    """The scripted Responses API upstream (the module's docstring)."""

    Handler = ResponsesHandler

    def __init__(self) -> None:
        super().__init__()
        # The encrypted reasoning handed out, and the id of the item each belongs to.
        self.issued: dict[str, str] = {}
        self._issuing = threading.Lock()

    def start(self) -> FakeResponsesUpstream:
        super().start()
        return self

    def push(self, *turns: Turn) -> None:
        super().push(*turns)

    def encrypt(self, thought: str, item_id: str) -> str:
        """Encrypted reasoning this upstream will take back in a later `input`, in the
        reasoning item `item_id` only."""
        with self._issuing:
            blob = f"gAAAA{base64.b64encode(f'{len(self.issued)}:{thought}'.encode()).decode()}"
            self.issued[blob] = item_id
        return blob

    def fault(self, body: dict[str, Any]) -> Fault | None:
        with self._issuing:
            issued = dict(self.issued)
        return request_error(body, issued)

    def default(self) -> Turn:
        return text("ok")

    def inputs(self, index: int) -> list[Item]:
        """The `input` items of the `index`-th request."""
        found: list[Item] = self.requests[index]["input"]
        return found
