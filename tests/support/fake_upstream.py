"""A fake OpenAI-compatible upstream: a real HTTP server on a loopback port that speaks
Chat Completions streaming and plays scripted turns and faults, in order.

    upstream.push(text("hello"), fault(503), tool_calls(("call_1", "lookup", '{"city":"Paris"}')))

Every request body it received is kept in `requests` (its headers in `headers`, its
arrival time, by `time.monotonic()`, in `arrivals`), so tests can check what history the
server sent and when. With the script empty it answers "ok".
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Turn:
    kind: str  # text | tool_calls | fault | reset | reset_mid | stall | malformed
    text: str = ""
    calls: tuple[tuple[str, str, str], ...] = ()
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    usage: tuple[int, int] = (7, 3)
    finish_reason: str = "stop"
    cached_tokens: int = 0  # sent as usage.prompt_tokens_details when not 0
    reasoning_tokens: int = 0  # sent as usage.completion_tokens_details when not 0


def text(
    value: str,
    *,
    finish_reason: str = "stop",
    usage: tuple[int, int] = (7, 3),
    cached_tokens: int = 0,
    reasoning_tokens: int = 0,
) -> Turn:
    """Stream `value` word by word; `usage` is (prompt_tokens, completion_tokens)."""
    return Turn(
        "text",
        text=value,
        finish_reason=finish_reason,
        usage=usage,
        cached_tokens=cached_tokens,
        reasoning_tokens=reasoning_tokens,
    )


def tool_calls(*calls: tuple[str, str, str]) -> Turn:
    return Turn("tool_calls", calls=calls, finish_reason="tool_calls")


def fault(status: int, headers: dict[str, str] | None = None) -> Turn:
    return Turn("fault", status=status, headers=headers or {})


def reset() -> Turn:
    """Close the connection without answering."""
    return Turn("reset")


def reset_mid(value: str) -> Turn:
    """Stream the first word of `value`, then drop the connection."""
    return Turn("reset_mid", text=value)


def stall(seconds: float) -> Turn:
    """Send the headers, then nothing for `seconds` (longer than the client's timeout)."""
    return Turn("stall", seconds=seconds)


def malformed() -> Turn:
    return Turn("malformed")


class FakeUpstream:
    def __init__(self) -> None:
        self.script: deque[Turn] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []  # lower-cased names, per request
        self.arrivals: list[float] = []  # time.monotonic() per request
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> FakeUpstream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def push(self, *turns: Turn) -> None:
        with self._lock:
            self.script.extend(turns)

    def _next(self, body: dict[str, Any], headers: dict[str, str] | None = None) -> Turn:
        with self._lock:
            self.arrivals.append(time.monotonic())
            self.requests.append(body)
            self.headers.append(headers or {})
            return self.script.popleft() if self.script else text("ok")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                headers = {key.lower(): value for key, value in self.headers.items()}
                turn = upstream._next(body, headers)
                if turn.kind == "reset":
                    self._drop()
                    return
                if turn.kind == "fault":
                    self.send_response(turn.status)
                    for key, value in turn.headers.items():
                        self.send_header(key, value)
                    self.send_header("content-type", "application/json")
                    self.end_headers()
                    self.wfile.write(json.dumps({"error": {"message": "scripted fault"}}).encode())
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                if turn.kind == "stall":
                    time.sleep(turn.seconds)
                    return
                if turn.kind == "malformed":
                    self._send("data: {this is not json\n\n")
                    return
                if turn.kind == "reset_mid":
                    self._chunk({"content": turn.text.split()[0]})
                    self._drop()
                    return
                if turn.kind == "text":
                    words = turn.text.split(" ")
                    for i, word in enumerate(words):
                        self._chunk({"content": word if i == 0 else " " + word})
                else:
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
                            self._chunk(
                                {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                            )
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
                self._send("data: " + json.dumps({"choices": [], "usage": usage}) + "\n\n")
                self._send("data: [DONE]\n\n")

            def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> None:
                payload = {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
                }
                self._send(f"data: {json.dumps(payload)}\n\n")

            def _send(self, data: str) -> None:
                self.wfile.write(data.encode())
                self.wfile.flush()

            def _drop(self) -> None:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.connection.close()

        return Handler
