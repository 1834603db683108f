"""The side-effect files of the tests' agents: the agents (in the server process) write
one line `<idempotency key> <detail>` per effect to `<name>.log` in SIDE_EFFECTS_DIR, and
the tests read them from outside."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path


def _log(name: str) -> Path:
    folder = Path(os.environ["SIDE_EFFECTS_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{name}.log"


def record_effect(name: str, key: str, detail: str) -> None:
    """In an agent: append one effect to `<name>.log`."""
    with _log(name).open("a") as out:
        out.write(f"{key} {detail}\n")


def find_effect(name: str, key: str) -> str | None:
    """In an agent: the detail of the effect recorded under `key`, or None."""
    path = _log(name)
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        found_key, _, detail = line.partition(" ")
        if found_key == key:
            return detail
    return None


def effects(folder: Path, tool: str) -> list[tuple[str, str]]:
    """(idempotency key, detail) per line of `<tool>.log`, in order."""
    path = folder / f"{tool}.log"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [(key, detail) for key, _, detail in (line.partition(" ") for line in lines)]


def runs_per_key(folder: Path, tool: str) -> Counter[str]:
    return Counter(key for key, _ in effects(folder, tool))
