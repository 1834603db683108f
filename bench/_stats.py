"""Medians and percentiles, without numpy."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation; nan when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/max of durations given in seconds, in milliseconds."""
    ms = [s * 1000 for s in seconds]
    return {
        "p50": percentile(ms, 50),
        "p90": percentile(ms, 90),
        "p99": percentile(ms, 99),
        "max": max(ms) if ms else math.nan,
        "n": float(len(ms)),
    }


def median(values: Sequence[float]) -> float:
    present = [v for v in values if not math.isnan(v)]
    return statistics.median(present) if present else math.nan
