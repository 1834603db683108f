"""Server-side tools: plain functions whose JSON schema comes from their type hints.

    @tool
    async def lookup(city: str) -> dict: ...

    @tool(reconcile=find_sent_email, timeout=30)
    async def send_email(ctx: ToolContext, to: str, body: str) -> str: ...

Safety is declared where the tool is defined (docs/guarantees.md G3, G4): `idempotent=True`
lets the runtime run a call again with the same idempotency key when it cannot tell
whether the first attempt took effect; `reconcile=` names a function asked, in that
case, whether the effect happened (return the tool's result if it did, None if not);
with neither, such a call is never run again.

`timeout=` bounds how long the turn waits for a body. An async body is cancelled at its
timeout and the call fails "timed out". A plain (`def`) body runs in a thread that
cannot be stopped: at its timeout it may still take effect, so its outcome is unknown and
is settled like an interrupted call (recovery/_tool_phase.py), never recorded as a failure.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from ._errors import ToolArgumentsError, ToolTimedOut

Reconcile = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class ToolContext:
    """What a tool may know about the call it serves."""

    response_id: str
    call_id: str
    tool_name: str
    idempotency_key: str  # the same for one logical call across retries and processes
    attempt: int  # 1 for the first run, more when an idempotent call runs again
    cancelled: asyncio.Event = field(default_factory=asyncio.Event, compare=False)


class Tool:
    """A server tool. Build one with the `tool` decorator."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        idempotent: bool = False,
        reconcile: Reconcile | None = None,
        timeout: float | None = None,
    ) -> None:
        if idempotent and reconcile is not None:
            raise ValueError("a tool is either idempotent or reconcilable, not both")
        self.fn = fn
        self.name = name or fn.__name__
        self.idempotent = idempotent
        self.reconcile = reconcile
        self.timeout = timeout
        summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
        self.description = description if description is not None else summary
        self.takes_context, self._arguments = _arguments_model(fn, self.name, arg_docs)

    @property
    def parameters(self) -> dict[str, Any]:
        schema = self._arguments.model_json_schema()
        schema.pop("title", None)
        return schema

    def definition(self) -> dict[str, Any]:
        """The function tool the model is told about."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "strict": False,
        }

    def parse_arguments(self, arguments: str) -> dict[str, Any]:
        try:
            value = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            raise ToolArgumentsError(f"arguments are not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ToolArgumentsError("arguments must be a JSON object")
        try:
            model = self._arguments.model_validate(value)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or '(arguments)'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            )
            raise ToolArgumentsError(problems) from None
        return {name: getattr(model, name) for name in type(model).model_fields}

    @property
    def in_thread(self) -> bool:
        """A plain (`def`) tool runs in a thread, which nothing can stop: neither its
        timeout nor the turn's cancellation ends it, they only stop the waiting."""
        return not inspect.iscoroutinefunction(self.fn)

    def start(self, ctx: ToolContext, arguments: dict[str, Any]) -> asyncio.Future[Any]:
        """Start the body on its own, so that nothing done to the waiting turn reaches
        it: an async body runs in a task of its own, under its timeout (which cancels
        it); a plain body runs in a thread. Whoever starts it must wait for its end
        (_calls.py: a body that may still act is never abandoned)."""
        if self.in_thread:
            args = (ctx,) if self.takes_context else ()
            call = functools.partial(contextvars.copy_context().run, self.fn, *args, **arguments)
            return asyncio.get_running_loop().run_in_executor(None, call)
        return asyncio.ensure_future(self._timed(ctx, arguments))

    async def _timed(self, ctx: ToolContext, arguments: dict[str, Any]) -> Any:
        scope = asyncio.timeout(self.timeout)
        try:
            async with scope:
                return await _call(self.fn, self.takes_context, ctx, arguments)
        except TimeoutError:
            if scope.expired():  # ours, not a TimeoutError the body raised itself
                raise ToolTimedOut(f"tool '{self.name}' timed out after {self.timeout}s") from None
            raise

    async def reconciled(self, ctx: ToolContext, arguments: dict[str, Any]) -> Any:
        """Ask the reconcile hook whether the call took effect (None: it did not)."""
        assert self.reconcile is not None
        takes_context = _first_is_context(self.reconcile)
        return await _call(self.reconcile, takes_context, ctx, arguments)

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


async def _call(
    fn: Callable[..., Any], takes_context: bool, ctx: ToolContext, arguments: dict[str, Any]
) -> Any:
    args = (ctx,) if takes_context else ()
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **arguments)
    return await asyncio.to_thread(fn, *args, **arguments)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    reconcile: Reconcile | None = None,
    timeout: float | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    reconcile: Reconcile | None = None,
    timeout: float | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a server tool of an async (or sync) function; see the module docstring."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(
            f,
            name=name,
            description=description,
            idempotent=idempotent,
            reconcile=reconcile,
            timeout=timeout,
        )

    return wrap(fn) if fn is not None else wrap


def tool_output(result: Any) -> str:
    """A tool's result as the `output` string the model sees."""
    if isinstance(result, str):
        return result
    if isinstance(result, BaseModel):
        return result.model_dump_json()
    return json.dumps(result, default=str, ensure_ascii=False)


def _first_is_context(fn: Callable[..., Any]) -> bool:
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        return False
    hints = get_type_hints(fn)
    return hints.get(params[0].name) is ToolContext or params[0].name == "ctx"


def _arguments_model(
    fn: Callable[..., Any], name: str, docs: dict[str, str]
) -> tuple[bool, type[BaseModel]]:
    signature = inspect.signature(fn)
    hints = get_type_hints(fn)
    params = list(signature.parameters.values())
    takes_context = bool(params) and (
        hints.get(params[0].name) is ToolContext or params[0].name == "ctx"
    )
    fields: dict[str, Any] = {}
    for param in params[1 if takes_context else 0 :]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {name}: *args and **kwargs cannot be described to a model")
        annotation = hints.get(param.name, Any)
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, Field(default, description=docs.get(param.name)))
    model = create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    return takes_context, model


_ARG_LINE = re.compile(r"^\s+(\w+)(?:\s*\([^)]*\))?\s*:\s*(.+)$")


def _parse_docstring(doc: str) -> tuple[str | None, dict[str, str]]:
    """The summary (text before an `Args:` section) and per-argument descriptions."""
    if not doc:
        return None, {}
    head, _, rest = doc.partition("\nArgs:")
    args: dict[str, str] = {}
    for line in rest.splitlines():
        if line.strip() and not line.startswith((" ", "\t")):
            break  # the next section
        match = _ARG_LINE.match(line)
        if match:
            args[match.group(1)] = match.group(2).strip()
    return head.strip() or None, args
