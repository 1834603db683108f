"""How big each run is: `--size smoke|small|full`."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Size:
    name: str
    runs: int  # every figure is the median of this many runs
    heavy_runs: int  # runs of the slow workloads (recovery, memory, slow-readers): steadier
    warmup: float  # seconds before each measured window
    duration: float  # seconds of each measured window
    clients: int  # concurrent clients of the throughput workloads (the reference used 16)
    poll_ids: int  # completed responses the poll workload cycles through
    recovery: int  # in-flight background responses killed and recovered
    lease_ttl: float  # --lease-ttl of the recovery servers
    streams: int  # open SSE streams for the memory workload
    queued: int  # queued background responses for the memory workload
    scale_small: int  # stored responses, the small store (created over HTTP)
    scale_large: int  # stored responses, the large store (SQL copies of the small one)
    scale_clients: int  # concurrent clients measuring poll latency in `scale`
    slow_readers: int  # stalled replays of one large log in `slow-readers`
    slow_log_words: int  # words of that log's answer, 40 letters each (12,000: about 5 MB)

    def with_runs(self, runs: int | None) -> Size:
        return self if runs is None else replace(self, runs=runs, heavy_runs=runs)


SIZES: dict[str, Size] = {
    "smoke": Size(
        name="smoke",
        runs=2,
        heavy_runs=2,
        warmup=0.1,
        duration=0.4,
        clients=4,
        poll_ids=20,
        recovery=10,
        lease_ttl=1.0,
        streams=20,
        queued=30,
        scale_small=20,
        scale_large=200,
        scale_clients=2,
        slow_readers=20,
        slow_log_words=3_000,
    ),
    "small": Size(
        name="small",
        runs=3,
        heavy_runs=2,
        warmup=0.5,
        duration=3.0,
        clients=16,
        poll_ids=1000,
        recovery=1000,
        lease_ttl=5.0,
        streams=1000,
        queued=2_000,
        scale_small=1000,
        scale_large=100_000,
        scale_clients=4,
        slow_readers=300,
        slow_log_words=12_000,
    ),
    "full": Size(
        name="full",
        runs=5,
        heavy_runs=3,
        warmup=1.0,
        duration=5.0,
        clients=16,
        poll_ids=1000,
        recovery=1000,
        lease_ttl=10.0,
        streams=1000,
        queued=10_000,
        scale_small=1000,
        scale_large=1_000_000,
        scale_clients=4,
        slow_readers=300,
        slow_log_words=12_000,
    ),
}
