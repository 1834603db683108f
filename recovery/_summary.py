"""A summary of a history, asked of a model: what a compaction item holds (_compaction.py).

A model that summarises by itself says so with a `summarize(request)` method, plain or
async, returning the text (the embedded model's is deterministic, made of the history's
own words); its usage is its input count (_tokens.py) and the summary's words. Any other
model is asked with one more model call: the request's history, then a user message with
`SUMMARY_PROMPT`, with its tools declared but none to call (`tool_choice: "none"`), and no
answer format; the call's text is the summary, its usage the call's.

A failed call is retried as a model step is (G6, `_backoff.py`), and within a turn it is
cut at once by a stop request (`TurnStopped`), as a model stream is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

from ._backoff import retry_delay
from ._errors import ModelError, TurnStopped
from ._history import unpaired_call
from ._items import normalize_item
from ._model import Model, ModelRequest, TextDelta, Usage
from ._observer import Observer
from ._response import add_usage
from ._settings import RuntimeSettings
from ._tokens import count_tokens
from ._turn import Stop

log = logging.getLogger("recovery.summary")

T = TypeVar("T")
Summary = tuple[str, Usage]

SUMMARY_PROMPT = (
    "Summarize the conversation above for your own later use: the summary will replace"
    " everything in it except the user's messages. Keep the facts, decisions and"
    " constraints, each tool called and what it returned, open questions, and what was"
    " about to happen next. Answer with the summary only."
)


async def summarize(
    model: Model,
    request: ModelRequest,
    *,
    observer: Observer,
    settings: RuntimeSettings,
    stop: Stop | None = None,
) -> Summary:
    """The summary of `request`'s history and the usage of making it, retried on
    retryable failures; with a turn's `stop`, cut when the turn is asked to stop."""
    unpaired = unpaired_call(request.input)
    if unpaired is not None:  # checked just before it goes out, as a step's call is (G5)
        raise ModelError(f"The history to summarise has {unpaired}; it was not sent to the model.")
    attempt = 0
    while True:
        try:
            work = _summarize_once(model, request, observer)
            return await (work if stop is None else _unless_stopped(stop, work))
        except ModelError as exc:
            attempt += 1
            delay = retry_delay(settings, exc, attempt)
            if delay is None:
                raise
            log.warning(
                "a summary for compaction failed (%s); retry %d in %.2fs",
                exc.message,
                attempt,
                delay,
            )
            observer.model_retried(model, request)
            await (asyncio.sleep(delay) if stop is None else stop.wait(delay))


def summary_request(request: ModelRequest) -> ModelRequest:
    """The model call that asks for the summary of `request`'s history."""
    prompt = normalize_item({"role": "user", "content": SUMMARY_PROMPT})
    return dataclasses.replace(
        request,
        input=[*request.input, prompt],
        tool_choice="none",
        text_format=None,
        max_output_tokens=None,
        logprobs=False,
        top_logprobs=None,
    )


async def _summarize_once(model: Model, request: ModelRequest, observer: Observer) -> Summary:
    own = getattr(model, "summarize", None)
    if own is not None:
        made = own(request)
        summary = str(await made if inspect.isawaitable(made) else made)
        return summary, Usage(await count_tokens(model, request), len(summary.split()))
    asked = summary_request(request)
    text: list[str] = []
    usage = Usage(0, 0)
    async for event in observer.watch_model(model, asked):
        if isinstance(event, TextDelta):
            text.append(event.text)
        elif isinstance(event, Usage):
            usage = add_usage(usage, event)
    summary = "".join(text).strip()
    if not summary:
        raise ModelError("The model gave no summary of the history.", retryable=True)
    return summary, usage


async def _unless_stopped(stop: Stop, work: Coroutine[Any, Any, T]) -> T:
    """`work`, cut (TurnStopped) as soon as the turn is asked to stop."""

    async def stopped() -> None:
        await stop.cancelled.wait()
        raise TurnStopped(stop.reason or "cancelled")

    try:
        async with asyncio.TaskGroup() as tg:
            watcher = tg.create_task(stopped())
            result = await work
            watcher.cancel()
    except BaseExceptionGroup as group:  # the first failure is the one that counts
        raise group.exceptions[0] from None
    return result
