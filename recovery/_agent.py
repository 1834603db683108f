"""The agent a server hosts: a model, its instructions, and (later) its server tools."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._model import Model


@dataclass
class Agent:
    """What runs a turn.

    `model` streams each step; `instructions` are prepended when a request gives none;
    `tools` are server-side tools; `max_steps` and `max_tool_calls` bound one turn.
    A server started without `--agent` hosts `Agent()` with its built-in model.
    """

    model: Model | None = None
    instructions: str | None = None
    tools: list[Any] = field(default_factory=list)
    max_steps: int = 16
    max_tool_calls: int = 64
