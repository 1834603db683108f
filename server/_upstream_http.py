"""What the two upstream models share (`_upstream.py`, Chat Completions, and
`_upstream_responses.py`, the Responses API): the HTTP client, one streamed POST per model
call whose failures become `recovery.ModelError`, `truncation: "auto"`, and logprobs in
the Responses shape.

Failures: 429, 408, 5xx, connection errors and timeouts are `retryable` (with the
upstream's `Retry-After`), and the runtime retries them with backoff
(recovery/_runner.py `_model_step`); nothing here retries those by itself, so there is one
retry budget per step (G6). Another 400 is `invalid_prompt`, its message the upstream's
reason. The one retry made here: with `truncation: "auto"`, a request the upstream refuses
for its context window is sent again without its oldest turns.
"""

from __future__ import annotations

import abc
import email.utils
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar

import httpx

from recovery import ModelError, ModelEvent, ModelRequest

Body = dict[str, Any]


class HTTPUpstream(abc.ABC):
    """Streams each model call from one POST to `{base_url}{path}`. `model` pins the
    upstream model name; without it the request's `model` passes through."""

    path: ClassVar[str]  # the endpoint, under the base URL
    history: ClassVar[str]  # the body's field that holds the history (for truncation)

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.name = model or "upstream"
        self._pinned = model
        self.passes_model_through = model is None  # metrics label calls by request model
        # Told each answer's HTTP status, or "timeout" / "connection_error" (metrics).
        self.on_status: Callable[[str], None] = lambda status: None
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            transport=transport,
        )

    @abc.abstractmethod
    def request_body(self, request: ModelRequest) -> Body:
        """The JSON body of one model call."""

    @abc.abstractmethod
    def events(self, response: httpx.Response) -> AsyncIterator[ModelEvent]:
        """The model events of one streamed answer (its status is below 400)."""

    async def aclose(self) -> None:
        await self._client.aclose()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        body = self.request_body(request)
        entries, dropped = body[self.history], 0
        while True:
            try:
                async for event in self._post(body):
                    yield event
                return
            except ContextOverflow:
                if request.truncation != "auto":
                    raise
                dropped = max(1, dropped * 2)  # 1, 2, 4, ... turns: few attempts
                shorter = drop_oldest_turns(entries, dropped)
                if shorter is None or len(shorter) == len(body[self.history]):
                    raise
                body = {**body, self.history: shorter}

    async def _post(self, body: Body) -> AsyncIterator[ModelEvent]:
        try:
            async with self._client.stream("POST", self.path, json=body) as response:
                self.on_status(str(response.status_code))
                if response.status_code >= 400:
                    await response.aread()
                    raise status_error(response)
                async for event in self.events(response):
                    yield event
        except httpx.TimeoutException as exc:
            self.on_status("timeout")
            raise ModelError(
                f"The upstream model timed out ({type(exc).__name__}).", retryable=True
            ) from exc
        except httpx.TransportError as exc:
            self.on_status("connection_error")
            raise ModelError(
                f"The upstream model could not be reached ({type(exc).__name__}: {exc}).",
                retryable=True,
            ) from exc


def drop_oldest_turns(entries: list[dict[str, Any]], turns: int) -> list[dict[str, Any]] | None:
    """Chat messages or Responses input items without their `turns` oldest turns
    (`truncation: "auto"`): a turn is a user message and all that follows it up to the
    next one. A user message sent while a call waited for its output (a client may answer
    a call after saying more) starts no turn: cut there, the output would lose its call.
    The leading system (or developer) messages and the last turn are always kept; None if
    there is no earlier turn to drop."""
    lead = 0
    while lead < len(entries) and entries[lead].get("role") in ("system", "developer"):
        lead += 1
    starts: list[int] = []
    waiting: set[Any] = set()  # the calls made so far that no output has answered yet
    for index in range(lead, len(entries)):
        entry = entries[index]
        if entry.get("role") == "user" and entry.get("type", "message") == "message":
            if not waiting:
                starts.append(index)
        elif entry.get("type") == "function_call":
            waiting.add(entry.get("call_id"))
        elif entry.get("type") == "function_call_output":
            waiting.discard(entry.get("call_id"))
        elif entry.get("role") == "assistant":
            waiting.update(call.get("id") for call in entry.get("tool_calls") or ())
        elif entry.get("role") == "tool":
            waiting.discard(entry.get("tool_call_id"))
    if len(starts) < 2:
        return None
    return entries[:lead] + entries[starts[min(turns, len(starts) - 1)] :]


def text(value: Any) -> str | None:
    """`value` if it is a non-empty string."""
    return value if isinstance(value, str) and value else None


def logprobs(entries: Any) -> tuple[dict[str, Any], ...]:
    """Streamed logprobs (Chat Completions' `logprobs.content`, or a Responses delta's
    `logprobs`) as an `output_text` part carries them, with `bytes` filled in where the
    upstream left them out or null."""
    return tuple(_logprob(entry, top=True) for entry in entries or () if isinstance(entry, dict))


def _logprob(entry: dict[str, Any], *, top: bool) -> dict[str, Any]:
    token = str(entry.get("token", ""))
    found = entry.get("bytes")
    value: dict[str, Any] = {
        "token": token,
        "logprob": float(entry.get("logprob") or 0.0),
        "bytes": found if isinstance(found, list) else list(token.encode()),
    }
    if top:
        alternatives = entry.get("top_logprobs") or ()
        value["top_logprobs"] = [
            _logprob(alt, top=False) for alt in alternatives if isinstance(alt, dict)
        ]
    return value


class ContextOverflow(ModelError):
    """The upstream refused the request for its context window (`truncation` decides)."""


# How OpenAI, vLLM, llama.cpp and LM Studio word a request too long for the context.
_OVERFLOW = (
    "context_length_exceeded",
    "context length",
    "context window",
    "context size",
    "context_size",
    "maximum context",
)


def status_error(response: httpx.Response) -> ModelError:
    """The `ModelError` of an answer with an HTTP error status."""
    status = response.status_code
    detail = response.text[:300]
    message = f"The upstream model returned HTTP {status}: {detail}"
    if status in (400, 413) and any(marker in response.text.lower() for marker in _OVERFLOW):
        return ContextOverflow(message, code="invalid_prompt")
    if status == 429:
        return ModelError(
            message,
            code="rate_limit_exceeded",
            retryable=True,
            retry_after=retry_after(response.headers),
        )
    if status >= 500 or status == 408:
        return ModelError(message, retryable=True, retry_after=retry_after(response.headers))
    return ModelError(message, code="invalid_prompt" if status == 400 else "server_error")


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds from `retry-after-ms` or `Retry-After` (seconds or an HTTP date)."""
    if "retry-after-ms" in headers:
        try:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, parsed.timestamp() - time.time())
