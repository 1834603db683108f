"""Durable workflow handlers: non-LLM turns whose steps are journaled once each.

    @workflow
    async def onboard(ctx: WorkflowContext) -> str:
        user = await ctx.step("create_user", create_user, ctx.text)
        await ctx.say(f"Created {user['id']}.")
        await ctx.step("send_welcome", send_welcome, user["id"], idempotent=True)
        return "Done."

A handler may be re-executed from the top after a crash: every step that already
completed returns its recorded result without running again, so the handler resumes at
its first unfinished step. A step is known by its name and how many times the run has
called that name (its call id is `step-{k}-{name}` for the k-th call of `name`), not by
its place among all the steps: steps of concurrent branches (`asyncio.gather`) may
interleave differently on every run. (A run journaled by a server before this one,
which named the n-th step of any name `step_{n}_{name}`, keeps those ids, found as that
server found them: a deploy while a workflow runs neither loses nor re-runs its steps.)
So a handler calls the steps of one name in the same order, with the same arguments, on
every run. A step whose id the journal holds with other arguments (two branches that
call one name in an order their timing decides, or an argument that differs between
runs) is neither run nor given the recorded result: the turn fails closed
(ToolOutcomeUnknown), as for an ambiguous step, since which call the entry belongs to
is unknown. (Arguments are compared only where every process writes them alike:
`_arguments`.) Steps run at most once unless marked
`idempotent=True`: they are journaled by the protocol of server tool calls (_calls.py,
G3/G4), and a step found `claimed` that is not idempotent fails the turn closed, even if
the handler catches the error (every later step raises it again, and so does the end).
A step function may be async or plain; a plain one runs in a thread, like a plain tool,
so that it cannot block the event loop. The turn ends, pauses or is handed over only once
no step is under way, a concurrent branch's included: when the handler returns or fails,
an async step still under way in another branch is cancelled and recorded failed (its
outcome unknown), a step in a thread is waited for; at a stop or a drain every step is
waited for, however long it runs (server/_cli.py sets Hypercorn no shutdown limit when a
workflow is served); no step or `say` starts after the handler has ended. A step's
thread that nothing waits for any more (its waiting task cancelled by the event loop's
closing) keeps the turn from being handed over: its lease is left to expire (`Bodies`,
_turn.py). Each step appears in the response as a `function_call` (the step) and a
`function_call_output` (its JSON result); `say` adds an assistant message, known, like
a step, by its text and how often the run has said that text (a message said before a
crash is not said again on the replay, whatever order its branches say things in; a run
begun by a server before this one keeps the ids that server numbered its messages by);
a returned value (if not None) becomes the final message.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import inspect
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from store import StoreError

from ._calls import DONE, Calls, cut_from_outside, idempotency_key, outlast
from ._errors import StepFailed, ToolOutcomeUnknown
from ._items import text_of
from ._tools import tool_output
from ._turn import Bodies, Turn

T = TypeVar("T")

Item = dict[str, Any]
Handler = Callable[["WorkflowContext"], Awaitable[Any]]

_current_key: contextvars.ContextVar[str] = contextvars.ContextVar("step_idempotency_key")


class AddItems(Protocol):
    """Adds finished items to the turn's output (with `checkpoint`, commits a checkpoint
    covering them); items already in the output, as after a replay, are kept as they are."""

    def __call__(self, items: list[Item], *, checkpoint: bool = False) -> Awaitable[None]: ...


class Workflow:
    """A durable handler, hosted like an Agent (`--agent module:attribute`)."""

    def __init__(self, fn: Handler, *, name: str | None = None) -> None:
        self.fn = fn
        self.name = name or fn.__name__


def workflow(fn: Handler) -> Workflow:
    """Make a durable workflow handler of an async function taking a WorkflowContext."""
    return Workflow(fn)


def _stable_id(prefix: str, response_id: str, key: str) -> str:
    return f"{prefix}_{hashlib.sha256(f'{response_id}/{key}'.encode()).hexdigest()[:40]}"


class WorkflowContext:
    """What a handler sees: the turn's input, durable steps, and messages."""

    def __init__(
        self,
        turn: Turn,
        add_items: AddItems,
        input_items: list[Item],
        text: str,
        output: list[Item] | None = None,
    ) -> None:
        self._turn = turn
        self._add_items = add_items
        self._output = output if output is not None else []  # the response's, live
        self._calls = Calls(turn)
        self.response_id = turn.response_id
        self.input = input_items
        self.text = text
        self._calls_of: dict[str, int] = {}  # step name -> how often it was called
        self._ordinal = 0  # steps called so far, for the ids of runs journaled before
        self._said = 0  # messages said so far, for the ids of runs begun before
        self._says_of: dict[str, int] = {}  # text -> how often it was said
        self._journal: dict[str, Any] = {}
        # A step found ambiguous (G4), or whose journal or output the store failed to
        # write, fails the turn even when the handler catches the error: an ordinary retry
        # would otherwise claim the same effect again under a new call id (G3).
        self._sticky: ToolOutcomeUnknown | StoreError | None = None
        # Steps under way, a sibling branch's too (asyncio.gather does not cancel the
        # other branches when one raises): the turn ends only once none is (G3, G8).
        self._running = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._closing = False  # the handler has exited: no step starts any more
        self._cutting = False  # ... and the turn ends now: no body starts either
        self._bodies: set[asyncio.Future[Any]] = set()  # async bodies under way
        self._orphaned: set[asyncio.Future[Any]] = set()  # ... that the handler's end cut

    @property
    def idempotency_key(self) -> str:
        """The key of the step running now (stable across retries and recoveries)."""
        return _current_key.get()

    async def _load(self) -> None:
        self._journal = await self._calls.entries()

    async def step(
        self,
        name: str,
        fn: Callable[..., Awaitable[T] | T],
        *args: Any,
        idempotent: bool = False,
        **kwargs: Any,
    ) -> T:
        """Run `fn(*args, **kwargs)` once as the step `name`, or return its recorded result."""
        if self._closing:
            raise RuntimeError(f"step '{name}' was called after its workflow ended")
        self._turn.stop.check()
        if self._sticky is not None:
            raise self._sticky
        self._running += 1
        self._idle.clear()
        try:
            return await self._step(name, fn, args, kwargs, idempotent)
        except (ToolOutcomeUnknown, StoreError) as exc:
            self._sticky = self._sticky or exc
            raise
        finally:
            self._running -= 1
            if not self._running:
                self._idle.set()

    async def _step(
        self,
        name: str,
        fn: Callable[..., Awaitable[T] | T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        idempotent: bool,
    ) -> T:
        occurrence = self._calls_of[name] = self._calls_of.get(name, 0) + 1
        self._ordinal += 1
        call_id = _call_id(name, occurrence)
        arguments, comparable = _arguments(args, kwargs)
        entry = self._journal.get(call_id)
        legacy_id = f"step_{self._ordinal}_{name}"[:64]
        legacy = self._journal.get(legacy_id) if entry is None else None
        if legacy is not None and legacy.tool == name:
            # A run that a server before per-name ids journaled (a deploy while it ran):
            # its steps keep the ids they had, found as that server found them.
            call_id, entry = legacy_id, legacy
        key = idempotency_key(self.response_id, call_id)
        if entry is not None and legacy is None and comparable and entry.arguments != arguments:
            # Another call of this name took this id in the run that recorded it: concurrent
            # branches called the step in another order. Which of them the entry belongs to
            # is unknown, so neither runs nor gets the other's result (G3, G4).
            raise ToolOutcomeUnknown(name, call_id, key, [], why=_reordered(name, occurrence))
        await self._add_items(
            [
                {
                    "type": "function_call",
                    "id": _stable_id("fc", self.response_id, call_id),
                    "call_id": call_id,
                    "name": name,
                    "arguments": arguments,
                    "status": "completed",
                }
            ]
        )
        if entry is not None and entry.state in DONE:
            await self._record_output(call_id, entry.output)
            if entry.state == "errored":
                raise StepFailed(entry.output)
            result: T = json.loads(entry.output)
            return result
        interrupted = None
        if entry is None:
            interrupted = await self._calls.claim(call_id, name, arguments, key)
        elif idempotent:
            await self._calls.reclaim(call_id)
        else:
            raise ToolOutcomeUnknown(name, call_id, key, [])
        if self._cutting:  # the handler ended while this was claimed: certain, not unknown
            output = f"Error: step '{name}' was not run: its workflow ended before it started."
            await self._calls.finish(call_id, "errored", output)
            await self._record_output(call_id, output)
            raise StepFailed(output)
        token = _current_key.set(key)
        try:
            body = _start_step(self._turn.bodies, fn, args, kwargs)
        finally:
            _current_key.reset(token)
        if inspect.iscoroutinefunction(fn):
            self._bodies.add(body)  # a thread cannot be cut: the handler's end waits for it
        # Like a tool body: once started, a step is waited for even if the turn is
        # cancelled (a shutdown), and its outcome recorded before the cancellation goes
        # on, so no other process runs it while it may still act (G3, G8).
        try:
            _, cancelled = await outlast(body, None)
        finally:
            self._bodies.discard(body)
        interrupted = interrupted or cancelled
        value = None
        if body in self._orphaned and body.cancelled():
            state, output = (
                "errored",
                (
                    f"Error: step '{name}' was cancelled: its workflow ended while it ran, so "
                    "whether its effect happened is unknown."
                ),
            )
        elif cut_from_outside(body):
            # Cut by the loop closing: left `claimed` for G4. A thread step's thread may
            # still run: the turn is then not handed over (`Bodies`, _turn.py).
            raise interrupted or asyncio.CancelledError()
        else:
            try:
                value = await body
                state, output = "completed", json.dumps(value, default=str)
            except (Exception, asyncio.CancelledError) as exc:  # cancelled itself: failed
                state = "errored"
                output = f"Error: step '{name}' failed: {type(exc).__name__}: {exc}"
        await self._calls.finish(call_id, state, output)
        if interrupted is not None:
            raise interrupted
        await self._record_output(call_id, output)
        if state == "errored":
            raise StepFailed(output)
        return value  # type: ignore[return-value]

    async def say(self, text: str) -> None:
        """Add an assistant message to the response (once, even across replays)."""
        if self._closing:
            raise RuntimeError("say() was called after its workflow ended")
        await self._say(text)

    async def _say(self, text: str) -> None:
        self._said += 1
        occurrence = self._says_of[text] = self._says_of.get(text, 0) + 1
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        item_id = _stable_id("msg", self.response_id, f"say-{occurrence}-{digest}")
        legacy_id = _stable_id("msg", self.response_id, f"say_{self._said}")
        if any(item.get("id") == legacy_id and text_of(item) == text for item in self._output):
            item_id = legacy_id  # said by a server that numbered every message in order
        await self._add_items(
            [
                {
                    "type": "message",
                    "id": item_id,
                    "role": "assistant",
                    "status": "completed",
                    "content": [
                        {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
                    ],
                }
            ]
        )

    async def _settle(self, *, cut_orphans: bool) -> None:
        """Refuse any new step, then wait until no step is under way, its outcome
        recorded: a body is never abandoned while it may act (G3, G8). The wait is not
        cut by a cancellation, which is raised once it is over. With `cut_orphans` (the
        handler returned or failed: the turn ends now), async bodies still under way,
        whose results no one will read (and which may wait on a branch that failed), are
        cancelled and recorded failed with their outcome unknown, never to run again."""
        self._closing = True
        self._cutting = cut_orphans
        if cut_orphans:
            for body in self._bodies:
                if body.cancel():  # one that has ended keeps its outcome
                    self._orphaned.add(body)
        interrupted: asyncio.CancelledError | None = None
        while self._running:
            _, cancelled = await outlast(asyncio.ensure_future(self._idle.wait()), None)
            interrupted = interrupted or cancelled
        if interrupted is not None:
            raise interrupted

    def _raise_sticky(self) -> None:
        if self._sticky is not None:
            raise self._sticky

    async def _record_output(self, call_id: str, output: str) -> None:
        await self._add_items(
            [
                {
                    "type": "function_call_output",
                    "id": _stable_id("fco", self.response_id, call_id),
                    "call_id": call_id,
                    "output": output,
                    "status": "completed",
                }
            ],
            checkpoint=True,
        )


def _call_id(name: str, occurrence: int) -> str:
    """The call id of the `occurrence`-th call of step `name` in a run: unlike a count
    of every step, it does not depend on how concurrent branches interleave. At most 64
    characters: a longer one keeps a digest of the name, so that two long names that
    start alike do not share an id."""
    call_id = f"step-{occurrence}-{name}"
    if len(call_id) <= 64:
        return call_id
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"step-{occurrence}-{digest}-{name}"[:64]


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, bool]:
    """A step's arguments as JSON, and whether that text is the same in every process
    for the same values, so that a replay may compare it with the recorded one. What JSON
    cannot hold is written as its `str()` less any memory address, which can differ
    between processes (a set inside an object prints in its process's hash order, a
    counter, an id): such arguments are recorded but not compared. The WorkflowContext a
    step is often passed, and sets of plain values (sorted), compare."""
    plain = True

    def jsonable(value: Any) -> Any:
        nonlocal plain
        if isinstance(value, WorkflowContext):
            return "<workflow context>"
        if isinstance(value, set | frozenset):
            return sorted(value, key=lambda v: json.dumps(v, default=jsonable))
        plain = False
        return _ADDRESS.sub("", str(value))

    return json.dumps({"args": args, "kwargs": kwargs}, default=jsonable), plain


def _reordered(name: str, occurrence: int) -> str:
    return (
        "the workflow called its steps in a different order on replay: the journal holds "
        f"call {occurrence} of step '{name}' with other arguments (concurrent branches "
        "called that step in another order), so this call was neither run nor given the "
        "recorded call's result."
    )


def _start_step(
    bodies: Bodies,
    fn: Callable[..., Awaitable[T] | T],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> asyncio.Future[T]:
    """Start a step on its own: an async step in a task of its own, a plain one in a
    thread, as plain tools are, so that its blocking calls do not stall the event loop.
    Either takes a copy of the context, with the step's idempotency key in it. The
    turn's `bodies` count the task, or the thread itself (not the task that waits for
    it, which the loop's closing can cancel while the thread runs on), until it ends."""
    if inspect.iscoroutinefunction(fn):
        task = asyncio.ensure_future(fn(*args, **kwargs))
        bodies.add(task)
        return task
    run = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    thread = asyncio.get_running_loop().run_in_executor(None, run)
    bodies.add(thread)
    return asyncio.ensure_future(_awaited(thread))


async def _awaited(thread: asyncio.Future[Any]) -> Any:
    # Shielded: cancelling this task would cancel the thread's future, which would then
    # say the thread ended while it runs on (`Bodies`).
    value = await asyncio.shield(thread)
    if inspect.isawaitable(value):  # a plain callable that returned a coroutine
        value = await value
    return value


async def run_workflow(handler: Workflow, ctx: WorkflowContext) -> None:
    await ctx._load()
    try:
        result = await handler.fn(ctx)
    except Exception:
        await ctx._settle(cut_orphans=True)
        ctx._raise_sticky()
        raise
    except BaseException:  # a stop, a drain or a cancellation: the steps under way end first
        await ctx._settle(cut_orphans=False)
        raise
    await ctx._settle(cut_orphans=True)
    ctx._raise_sticky()
    if result is not None:
        await ctx._say(tool_output(result))
