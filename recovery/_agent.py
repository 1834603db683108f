"""The agent a server hosts: a model, its instructions, its server tools and budgets."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._model import Model
from ._tools import Tool


@dataclass
class Agent:
    """What runs a turn.

    `model` streams each step; `instructions` are prepended when a request gives none;
    `tools` are server-side tools; `max_steps` and `max_tool_calls` bound one turn.
    A server started without `--agent` hosts `Agent()` with its built-in model.
    """

    model: Model | None = None
    instructions: str | None = None
    tools: list[Tool] = field(default_factory=list)
    max_steps: int = 16
    max_tool_calls: int = 64

    def __post_init__(self) -> None:
        names = [t.name for t in self.tools]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"two server tools share a name: {', '.join(duplicates)}")
