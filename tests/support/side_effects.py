"""Reading the side-effect files that tests/agents/tool_agent.py writes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def effects(folder: Path, tool: str) -> list[tuple[str, str]]:
    """(idempotency key, detail) per line of `<tool>.log`, in order."""
    path = folder / f"{tool}.log"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [(key, detail) for key, _, detail in (line.partition(" ") for line in lines)]


def runs_per_key(folder: Path, tool: str) -> Counter[str]:
    return Counter(key for key, _ in effects(folder, tool))
