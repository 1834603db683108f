"""A fake OpenAI-compatible upstream: a real HTTP server on a loopback port that speaks
Chat Completions streaming and plays scripted turns and faults, in order.

    upstream.push(text("hello"), fault(503), tool_calls(("call_1", "lookup", '{"city":"Paris"}')))

Every request body it received is kept in `requests` (its headers in `headers`, its
arrival time, by `time.monotonic()`, in `arrivals`), so tests can check what history the
server sent and when. A turn may name the `model` (and `service_tier`) its chunks report;
asked for `logprobs`, each word chunk carries made-up ones (log probability -0.5, its
`top_logprobs` alternatives the word and `alt`). With the script empty it asks `respond`
(a function of the request body, for tests that script by content, e.g. many concurrent
turns), else answers "ok".

It is as strict about tool pairing as OpenAI's Chat Completions (docs/guarantees.md, "G5 at the
wire"): a history where an assistant message's `tool_calls` are not each answered by a
`tool` message right after it, or a `tool` message that answers no pending call (none, or
one already answered), gets HTTP 400 in OpenAI's error envelope with OpenAI's message,
consumes no scripted turn, and is listed in `refusals` (index into `requests`, message).
`pairing_error` is the same rule as a function. It refuses as strictly, the same way,
what `tests/support/chat_rules.py` lists: malformed image and file parts, a malformed or
non-strict `response_format`, `json_object` without the word "json", malformed `tools`
(a field Chat Completions' functions do not have; `strict` with a schema strict mode cannot
take) and `tool_choice` (`allowed_tools` in its Chat Completions shape only). Under a JSON
`response_format` a scripted answer must be valid JSON for it (a real model's always is),
and a scripted tool call must be one the request's `tools` and `tool_choice` allow (no
call where they require one): a turn that breaks either gets HTTP 500 naming the test's
mistake, listed in `mistakes`.

A turn may stream reasoning first (`reasoning=`, as `reasoning_content` deltas, or as
`reasoning` deltas with `reasoning_field="reasoning"`, as Ollama sends them), and
`refusal(...)` streams `refusal` deltas instead of content.

`ScriptedUpstream` and `ScriptedHandler` are the parts every scripted upstream shares (the
server, the script, the records, refusals and faults);
`tests/support/fake_responses_upstream.py` is the Responses API one.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from tests.support.chat_rules import allowed_calls, answer_error, calls_error, request_error


@dataclass(frozen=True)
class Turn:
    kind: str  # text | refusal | tool_calls | fault | reset | reset_mid | stall | malformed
    text: str = ""
    calls: tuple[tuple[str, str, str], ...] = ()
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    usage: tuple[int, int] = (7, 3)
    finish_reason: str = "stop"
    cached_tokens: int = 0  # sent as usage.prompt_tokens_details when not 0
    reasoning_tokens: int = 0  # sent as usage.completion_tokens_details when not 0
    pace: float = 0.0  # seconds between two streamed chunks
    model: str | None = None  # the `model` its chunks report (none when None)
    service_tier: str | None = None  # the `service_tier` its chunks report
    body: dict[str, Any] | None = None  # a fault's JSON body (default: a scripted fault)
    reasoning: str = ""  # streamed word by word before the answer
    reasoning_field: str = "reasoning_content"  # the delta field it streams in


def text(
    value: str,
    *,
    finish_reason: str = "stop",
    usage: tuple[int, int] = (7, 3),
    cached_tokens: int = 0,
    reasoning_tokens: int = 0,
    pace: float = 0.0,
    model: str | None = None,
    service_tier: str | None = None,
    reasoning: str = "",
    reasoning_field: str = "reasoning_content",
) -> Turn:
    """Stream `value` word by word (after `reasoning`, if any); `usage` is
    (prompt_tokens, completion_tokens)."""
    return Turn(
        "text",
        text=value,
        finish_reason=finish_reason,
        usage=usage,
        cached_tokens=cached_tokens,
        reasoning_tokens=reasoning_tokens,
        pace=pace,
        model=model,
        service_tier=service_tier,
        reasoning=reasoning,
        reasoning_field=reasoning_field,
    )


def refusal(value: str, *, reasoning: str = "") -> Turn:
    """Decline: stream `value` word by word as `refusal` deltas."""
    return Turn("refusal", text=value, reasoning=reasoning)


def tool_calls(
    *calls: tuple[str, str, str], pace: float = 0.0, preface: str = "", reasoning: str = ""
) -> Turn:
    """Stream these (call id, name, arguments) calls, the arguments in two pieces each,
    after the text `preface` word by word (a model that says what it is about to do)."""
    return Turn(
        "tool_calls",
        text=preface,
        calls=calls,
        finish_reason="tool_calls",
        pace=pace,
        reasoning=reasoning,
    )


def fault(
    status: int, headers: dict[str, str] | None = None, body: dict[str, Any] | None = None
) -> Turn:
    return Turn("fault", status=status, headers=headers or {}, body=body)


def reset() -> Turn:
    """Close the connection without answering."""
    return Turn("reset")


def reset_mid(value: str, *, reasoning: str = "") -> Turn:
    """Stream the first word of `value` (or, given `reasoning`, all of that and no
    answer), then drop the connection."""
    return Turn("reset_mid", text=value, reasoning=reasoning)


def stall(seconds: float) -> Turn:
    """Send the headers, then nothing for `seconds` (longer than the client's timeout)."""
    return Turn("stall", seconds=seconds)


def malformed() -> Turn:
    return Turn("malformed")


_UNANSWERED = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to"
    " each 'tool_call_id'. The following tool_call_ids did not have response messages: {}"
)
_ORPHAN = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message"
    " with 'tool_calls'."
)


def pairing_error(messages: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(message, param) of OpenAI's 400 for the first tool-pairing fault, or None.

    The `tool` messages answering an assistant message's `tool_calls` must come right
    after it, one per call id; anything else (another role, the end of the history)
    while a call is unanswered is a fault, and so is a `tool` message outside such a run
    or for a call id it does not list or that was already answered.
    """
    opened = -1  # index of the assistant message whose answers may follow, or -1
    pending: list[str] = []
    for index, message in enumerate(messages):
        if message.get("role") == "tool":
            if opened < 0 or message.get("tool_call_id") not in pending:
                return _ORPHAN, f"messages.[{index}].role"
            pending.remove(message["tool_call_id"])
            continue
        if pending:
            return _UNANSWERED.format(", ".join(pending)), f"messages.[{opened}].role"
        opened, pending = -1, []
        if message.get("role") == "assistant" and message.get("tool_calls"):
            opened, pending = index, [call.get("id") for call in message["tool_calls"]]
    if pending:
        return _UNANSWERED.format(", ".join(pending)), f"messages.[{opened}].role"
    return None


def _made_up_logprob(token: str) -> dict[str, Any]:
    """A Chat Completions logprob entry (`bytes` null, as some servers send it)."""
    return {
        "token": token,
        "logprob": -0.5,
        "bytes": None,
        "top_logprobs": [
            {"token": token, "logprob": -0.5, "bytes": list(token.encode())},
            {"token": "alt", "logprob": -1.5, "bytes": list(b"alt")},
        ],
    }


@dataclass(frozen=True)
class Refusal:
    request: int  # index into ScriptedUpstream.requests
    message: str
    param: str | None
    status: int = 400
    code: str | None = None


Fault = tuple[str, str | None] | Refusal  # (message, param) of a 400, or a whole refusal
Responder = Callable[[dict[str, Any]], Any]


class ScriptedUpstream:
    """A real HTTP server on a loopback port that answers each POST with the next scripted
    turn, and records every request. A subclass says what a request may not be (`fault`,
    answered with OpenAI's error and consuming no turn), what answers an empty script
    (`default`), and how a turn is played (its `Handler`)."""

    Handler: ClassVar[type[ScriptedHandler]]

    def __init__(self, respond: Responder | None = None) -> None:
        self.script: deque[Any] = deque()
        self.respond = respond
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []  # lower-cased names, per request
        self.arrivals: list[float] = []  # time.monotonic() per request
        self.refusals: list[Refusal] = []  # requests refused (what the upstream would refuse)
        self.mistakes: list[str] = []  # scripted turns no real model could have played
        self._lock = threading.Lock()
        handler = type("Handler", (self.Handler,), {"upstream": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> Any:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def push(self, *turns: Any) -> None:
        with self._lock:
            self.script.extend(turns)

    def fault(self, body: dict[str, Any]) -> Fault | None:
        """What the real upstream would refuse in `body`, or None."""
        return None

    def default(self) -> Any:
        """The turn that answers when the script is empty and nothing `respond`s."""
        raise NotImplementedError

    def _next(self, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
        fault_found = self.fault(body)
        with self._lock:
            self.arrivals.append(time.monotonic())
            self.requests.append(body)
            self.headers.append(headers or {})
            if fault_found is not None:
                index = len(self.requests) - 1
                if isinstance(fault_found, Refusal):
                    refusal = Refusal(
                        index,
                        fault_found.message,
                        fault_found.param,
                        fault_found.status,
                        fault_found.code,
                    )
                else:
                    refusal = Refusal(index, *fault_found)
                self.refusals.append(refusal)
                return refusal
            if self.script:
                return self.script.popleft()
        return self.respond(body) if self.respond is not None else self.default()


class ScriptedHandler(BaseHTTPRequestHandler):
    """Reads a POST's JSON body and plays the turn its upstream picks (`play`)."""

    protocol_version = "HTTP/1.0"
    upstream: ClassVar[ScriptedUpstream]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        raw = self.rfile.read(length)
        if len(raw) < length:
            return  # the client died while sending: nothing was asked
        body = json.loads(raw or b"{}")
        headers = {key.lower(): value for key, value in self.headers.items()}
        self.prepare(body)
        turn = self.upstream._next(body, headers)
        with contextlib.suppress(ConnectionError):  # the server hung up, or died
            if isinstance(turn, Refusal):
                self.refuse(turn)
            else:
                self.play(turn)

    def prepare(self, body: dict[str, Any]) -> None:
        """Note what the request asks of the answer, before the turn is picked."""

    def play(self, turn: Any) -> None:
        raise NotImplementedError

    def refuse(self, refusal: Refusal) -> None:
        """OpenAI's error envelope for a request it refuses."""
        error = {
            "message": refusal.message,
            "type": "invalid_request_error",
            "param": refusal.param,
            "code": refusal.code,
        }
        self.answer_json(refusal.status, {"error": error})

    def answer_json(
        self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body).encode())

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()

    def send(self, data: str) -> None:
        self.wfile.write(data.encode())
        self.wfile.flush()

    def drop(self) -> None:
        """Close the connection at once (a reset, or a stream cut off)."""
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
        self.connection.close()


class ChatHandler(ScriptedHandler):
    """Plays turns as a Chat Completions stream of chunks."""

    pace = 0.0
    logprobs = False  # the request asked for logprobs
    turn = Turn("text")
    request: dict[str, Any]

    def prepare(self, body: dict[str, Any]) -> None:
        self.logprobs = bool(body.get("logprobs"))
        self.request = body

    def _mistake(self, turn: Turn) -> str | None:
        """Why no real model could play `turn` for the request (it passed `fault`)."""
        if turn.kind not in ("text", "tool_calls"):
            return None
        called = [name for _, name, _ in turn.calls]
        if turn.kind == "text":
            mistake = answer_error(self.request.get("response_format"), turn.text)
            if mistake is not None:
                return mistake
        return calls_error(allowed_calls(self.request), called)

    def play(self, turn: Turn) -> None:
        if turn.kind == "reset":
            self.drop()
            return
        mistake = self._mistake(turn)
        if mistake is not None:
            self.upstream.mistakes.append(mistake)
            turn = fault(500, body={"error": {"message": f"fake upstream: {mistake}"}})
        if turn.kind == "fault":
            error = turn.body or {"error": {"message": "scripted fault"}}
            self.answer_json(turn.status, error, turn.headers)
            return
        self.start_stream()
        self.pace = turn.pace
        self.turn = turn
        if turn.kind == "stall":
            time.sleep(turn.seconds)
            return
        if turn.kind == "malformed":
            self.send("data: {this is not json\n\n")
            return
        if turn.kind == "reset_mid":
            if turn.reasoning:
                self._words(turn.reasoning, turn.reasoning_field)
            else:
                self._chunk({"content": turn.text.split()[0]})
            self.drop()
            return
        self._words(turn.reasoning, turn.reasoning_field)
        if turn.kind in ("text", "refusal"):
            self._words(turn.text, "content" if turn.kind == "text" else "refusal")
        else:
            self._calls(turn)
        self._chunk({}, finish_reason=turn.finish_reason)
        prompt, completion = turn.usage
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        if turn.cached_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": turn.cached_tokens}
        if turn.reasoning_tokens:
            usage["completion_tokens_details"] = {"reasoning_tokens": turn.reasoning_tokens}
        final = {"choices": [], "usage": usage, **self._reported()}
        self.send("data: " + json.dumps(final) + "\n\n")
        self.send("data: [DONE]\n\n")

    def _calls(self, turn: Turn) -> None:
        if turn.text:
            words = turn.text.split(" ")
            for i, word in enumerate(words):
                self._chunk({"content": word if i == 0 else " " + word})
        for index, (call_id, name, arguments) in enumerate(turn.calls):
            self._chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call_id,
                            "type": "function",
                            "function": {"name": name, "arguments": ""},
                        }
                    ]
                }
            )
            half = len(arguments) // 2
            for piece in (arguments[:half], arguments[half:]):
                self._chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})

    def _words(self, value: str, field: str) -> None:
        if value:
            words = value.split(" ")
            for i, word in enumerate(words):
                self._chunk({field: word if i == 0 else " " + word})

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> None:
        if self.pace:
            time.sleep(self.pace)
        choice: dict[str, Any] = {
            "index": 0,
            "delta": delta,
            "finish_reason": finish_reason,
        }
        if self.logprobs and delta.get("content"):
            choice["logprobs"] = {"content": [_made_up_logprob(delta["content"])]}
        payload = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            **self._reported(),
            "choices": [choice],
        }
        self.send(f"data: {json.dumps(payload)}\n\n")

    def _reported(self) -> dict[str, str]:
        reported = {"model": self.turn.model, "service_tier": self.turn.service_tier}
        return {key: value for key, value in reported.items() if value is not None}


class FakeUpstream(ScriptedUpstream):
    """The scripted Chat Completions upstream (the module's docstring)."""

    Handler = ChatHandler

    def start(self) -> FakeUpstream:
        super().start()
        return self

    def push(self, *turns: Turn) -> None:
        super().push(*turns)

    def fault(self, body: dict[str, Any]) -> Fault | None:
        return pairing_error(body.get("messages") or []) or request_error(body)

    def default(self) -> Turn:
        return text("ok")
