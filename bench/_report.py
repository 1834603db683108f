"""The results: rows of (workload, metric, median, target, met), as a table and JSON."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# `poll` against the trivial endpoint of the same HTTP stack, measured back to back.
POLL_CEILING_TARGET = 0.80


@dataclass(frozen=True, slots=True)
class Row:
    workload: str
    metric: str
    value: float
    unit: str = ""
    target: str = ""  # empty: reported, not a target
    met: bool | None = None


def fmt(value: float, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if unit == "MB":
        text = f"{value:,.1f}"
    elif abs(value) >= 100 or float(value).is_integer():
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:,.1f}"
    else:
        text = f"{value:,.2f}"
    return f"{text} {unit}".rstrip()


def at_least(value: float, bound: float) -> bool | None:
    return None if math.isnan(value) else value >= bound


def below(value: float, bound: float) -> bool | None:
    return None if math.isnan(value) else value < bound


def table(rows: list[Row]) -> str:
    """A Markdown table (renders in the README, readable in a terminal)."""
    header = ("workload", "metric", "median", "target", "met")
    lines = [
        (
            r.workload,
            r.metric,
            fmt(r.value, r.unit),
            r.target or "-",
            "-" if r.met is None else ("met" if r.met else "NOT MET"),
        )
        for r in rows
    ]
    return grid(header, lines)


def grid(header: tuple[str, ...], lines: Sequence[tuple[str, ...]]) -> str:
    """Cells under a header, as a Markdown table with aligned columns."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *lines, strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule, *(line(x) for x in lines)])


def _clean(value: Any) -> Any:
    """NaN is not JSON: write null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def write_json(
    path: Path, meta: dict[str, Any], workloads: dict[str, Any], rows: list[Row]
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"meta": meta, "rows": [asdict(r) for r in rows], "workloads": workloads}
    path.write_text(json.dumps(_clean(document), indent=2, allow_nan=False) + "\n")
