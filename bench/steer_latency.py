"""Steer-to-successor latency over WebSocket (issue 17): how long from a client sending
`response.steer` to its socket receiving the successor's `response.created`, with no
model time in it (the embedded model answers at once; the target is cut mid-answer).

Each sample opens a socket on the official SDK (`client.responses.connect()`), creates
a long, slow background answer on it, waits for its first text delta, then steers it and
reads until the successor's `response.created`: the steer's commit, the target's stop at
its safe point and terminal write, the successor's create transaction and the socket's
switch to its log are all inside. Also reported: send -> `response.steer.accepted`.

    python -m bench.steer_latency [--samples 30] [--store sqlite|postgres]

Samples run one after another against one server started for the run (127.0.0.1, a
free port, a temporary store); the report is the median and the 95th percentile.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from openai import AsyncOpenAI

from bench._procs import Proc, server

LONG = "story [[words 2000]] [[delay 20]]"  # 40 s unless steered: always cut
TARGET_P50 = 0.050  # seconds, the target for send -> successor created


async def one_sample(client: AsyncOpenAI) -> tuple[float, float]:
    """(seconds to `accepted`, seconds to the successor's `response.created`)."""
    async with client.responses.connect() as connection:
        await connection.response.create(model="m", input=LONG, background=True)
        target = ""
        async for event in connection:
            if event.type == "response.created":
                target = event.response.id
            if event.type == "response.output_text.delta":
                break
        sent = time.perf_counter()
        await connection.response.steer(previous_response_id=target, input="shorter, please")
        accepted = 0.0
        async for event in connection:
            if event.type == "response.steer.accepted":
                accepted = time.perf_counter() - sent
            if event.type == "response.created" and event.response.id != target:
                return accepted, time.perf_counter() - sent
            if event.type in ("error", "response.steer.failed"):
                raise RuntimeError(f"steer failed: {event}")
    raise RuntimeError("the socket closed before the successor was created")


async def measure(url: str, samples: int) -> tuple[list[float], list[float]]:
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="bench", max_retries=0)
    accepted, successor = [], []
    await asyncio.wait_for(one_sample(client), 60)  # warm-up, not counted
    for _ in range(samples):
        a, s = await asyncio.wait_for(one_sample(client), 60)
        accepted.append(a)
        successor.append(s)
    return accepted, successor


@contextlib.contextmanager
def started(store: str, workdir: Path) -> Iterator[Proc]:
    """A server on a new store: an SQLite file, or a throwaway PostgreSQL (fsync on)."""
    pg = None
    if store == "postgres":
        from tests.support.postgres import INSTALL_HINT, ThrowawayPostgres, find_bindir

        bindir = find_bindir()
        if bindir is None:
            raise SystemExit(INSTALL_HINT)
        pg = ThrowawayPostgres(bindir, durable=True)
        pg.start()
    try:
        db = pg.url if pg is not None else workdir / "store.db"
        proc = server(db, log=workdir / "server.log").start()
        try:
            yield proc
        finally:
            proc.stop()
    finally:
        if pg is not None:
            pg.stop()


def ms(values: list[float], q: float) -> str:
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="steer-bench-") as tmp,
        started(args.store, Path(tmp)) as proc,
    ):
        accepted, successor = asyncio.run(measure(proc.url, args.samples))
    p50 = statistics.median(successor)
    print(f"steer latency, {args.samples} samples, {args.store}")
    print(f"  send -> accepted:            p50 {ms(accepted, 0.5)}   p95 {ms(accepted, 0.95)}")
    print(f"  send -> successor created:   p50 {ms(successor, 0.5)}   p95 {ms(successor, 0.95)}")
    verdict = "met" if p50 < TARGET_P50 else "NOT met"
    print(f"  target: p50 under {TARGET_P50 * 1000:.0f} ms: {verdict}")


if __name__ == "__main__":
    main()
