"""Which asyncio PostgreSQL driver: asyncpg or psycopg 3 (with psycopg-pool)?

Both drivers run the transactions the store runs for the bench's two write-heavy
workloads, against one throwaway PostgreSQL (fsync on), in alternating rounds within one
run, and the report gives each workload's median ratio:

- create: one transaction that inserts a response, its input item, its two opening
  events and its idempotency key;
- background: claim the oldest queued response (`FOR UPDATE SKIP LOCKED`), append its
  deltas in one transaction, then write the terminal status and last events in another.

    python -m bench.pg_drivers [--seconds 3] [--rounds 3] [--concurrency 32]

asyncpg sends a transaction's statements one round trip each (or one `executemany`);
psycopg sends them in one pipeline. The numbers and the choice are in ARCHITECTURE.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import psycopg_pool

from tests.support.postgres import INSTALL_HINT, ThrowawayPostgres, find_bindir

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY, tenant TEXT NOT NULL, status TEXT NOT NULL,
    snapshot TEXT NOT NULL, params TEXT NOT NULL, owner TEXT, epoch BIGINT NOT NULL DEFAULT 0,
    lease_expires_at TIMESTAMPTZ, created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp());
CREATE INDEX IF NOT EXISTS responses_queued ON responses (created_at) WHERE status = 'queued';
CREATE TABLE IF NOT EXISTS response_items (
    response_id TEXT NOT NULL, position INT NOT NULL, item TEXT NOT NULL,
    PRIMARY KEY (response_id, position));
CREATE TABLE IF NOT EXISTS events (
    response_id TEXT NOT NULL, seq INT NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (response_id, seq));
CREATE TABLE IF NOT EXISTS idempotency_keys (
    tenant TEXT NOT NULL, key TEXT NOT NULL, response_id TEXT NOT NULL,
    PRIMARY KEY (tenant, key));
"""

INSERT_RESPONSE = (
    "INSERT INTO responses (id, tenant, status, snapshot, params) VALUES ($1, '', 'queued', $2, $3)"
)
INSERT_ITEM = "INSERT INTO response_items (response_id, position, item) VALUES ($1, 0, $2)"
INSERT_EVENT = "INSERT INTO events (response_id, seq, data) VALUES ($1, $2, $3)"
INSERT_KEY = "INSERT INTO idempotency_keys (tenant, key, response_id) VALUES ('', $1, $2)"
CLAIM = """
UPDATE responses SET status = 'in_progress', owner = $1, epoch = epoch + 1,
    lease_expires_at = now() + interval '30 seconds', updated_at = clock_timestamp()
WHERE id = (SELECT id FROM responses WHERE status = 'queued'
            ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, epoch
"""
FINISH = """
UPDATE responses SET status = 'completed', snapshot = $1, owner = NULL,
    lease_expires_at = NULL, updated_at = clock_timestamp()
WHERE id = $2 AND epoch = $3 AND owner = $4
"""

SNAPSHOT = json.dumps({"object": "response", "status": "queued", "output": [], "pad": "x" * 600})
PARAMS = json.dumps({"model": "m", "input": "hello", "background": True})
ITEM = json.dumps(
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}
)
DELTA = json.dumps({"type": "response.output_text.delta", "delta": "word "})


def _psycopg(sql: str) -> str:
    """asyncpg's `$n` placeholders as psycopg's `%s` (the statements here number them in
    the order they appear)."""
    for n in range(9, 0, -1):
        sql = sql.replace(f"${n}", "%s")
    return sql


class Driver:
    name = ""

    async def open(self, url: str, size: int) -> None: ...
    async def close(self) -> None: ...
    async def create(self, rid: str) -> None: ...
    async def background(self, owner: str) -> bool:
        raise NotImplementedError


class AsyncpgDriver(Driver):
    name = "asyncpg"

    async def open(self, url: str, size: int) -> None:
        self.pool = await asyncpg.create_pool(url, min_size=size, max_size=size)

    async def close(self) -> None:
        await self.pool.close()

    async def create(self, rid: str) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(INSERT_RESPONSE, rid, SNAPSHOT, PARAMS)
            await conn.execute(INSERT_ITEM, rid, ITEM)
            await conn.executemany(INSERT_EVENT, [(rid, 0, SNAPSHOT), (rid, 1, SNAPSHOT)])
            await conn.execute(INSERT_KEY, rid, rid)

    async def background(self, owner: str) -> bool:
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(CLAIM, owner)
            if row is None:
                return False
            rid, epoch = row["id"], row["epoch"]
            async with conn.transaction():
                await conn.executemany(INSERT_EVENT, [(rid, 2 + n, DELTA) for n in range(10)])
            async with conn.transaction():
                await conn.execute(FINISH, SNAPSHOT, rid, epoch, owner)
                await conn.executemany(INSERT_EVENT, [(rid, 12, SNAPSHOT), (rid, 13, SNAPSHOT)])
            return True


class PsycopgDriver(Driver):
    name = "psycopg"

    async def open(self, url: str, size: int) -> None:
        self.pool = psycopg_pool.AsyncConnectionPool(url, min_size=size, max_size=size, open=False)
        await self.pool.open(wait=True)

    async def close(self) -> None:
        await self.pool.close()

    async def create(self, rid: str) -> None:
        async with self.pool.connection() as conn, conn.pipeline(), conn.transaction():
            await conn.execute(_psycopg(INSERT_RESPONSE), (rid, SNAPSHOT, PARAMS))
            await conn.execute(_psycopg(INSERT_ITEM), (rid, ITEM))
            async with conn.cursor() as cur:
                await cur.executemany(
                    _psycopg(INSERT_EVENT), [(rid, 0, SNAPSHOT), (rid, 1, SNAPSHOT)]
                )
            await conn.execute(_psycopg(INSERT_KEY), (rid, rid))

    async def background(self, owner: str) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(_psycopg(CLAIM), (owner,))
            row = await cur.fetchone()
            await conn.commit()
            if row is None:
                return False
            rid, epoch = row
            async with conn.pipeline(), conn.transaction(), conn.cursor() as cur:
                await cur.executemany(
                    _psycopg(INSERT_EVENT), [(rid, 2 + n, DELTA) for n in range(10)]
                )
            async with conn.pipeline(), conn.transaction():
                await conn.execute(_psycopg(FINISH), (SNAPSHOT, rid, epoch, owner))
                async with conn.cursor() as cur:
                    await cur.executemany(
                        _psycopg(INSERT_EVENT), [(rid, 12, SNAPSHOT), (rid, 13, SNAPSHOT)]
                    )
            return True


async def _saturate(seconds: float, concurrency: int, op: Callable[[], Awaitable[bool]]) -> float:
    """Operations per second with `concurrency` workers for `seconds`."""
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            if await op():
                done += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done / (time.perf_counter() - start)


async def _round(driver: Driver, url: str, args: argparse.Namespace) -> dict[str, float]:
    await driver.open(url, args.pool)
    try:

        async def create() -> bool:
            await driver.create(uuid.uuid4().hex)
            return True

        create_rate = await _saturate(args.seconds, args.concurrency, create)
        owner = uuid.uuid4().hex
        background_rate = await _saturate(
            args.seconds, args.concurrency, lambda: driver.background(owner)
        )
        return {"create": create_rate, "background": background_rate}
    finally:
        await driver.close()


async def _prepare(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(SCHEMA)
        # Enough queued responses that the background workload never runs dry.
        await conn.execute("TRUNCATE responses, response_items, events, idempotency_keys")
    finally:
        await conn.close()


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    bindir = find_bindir()
    if bindir is None:
        raise SystemExit(INSTALL_HINT)
    pg = ThrowawayPostgres(bindir, durable=True)
    pg.start()
    try:
        url = pg.create_database("drivers")
        results: dict[str, dict[str, list[float]]] = {}
        for _ in range(args.rounds):
            for driver in (AsyncpgDriver(), PsycopgDriver()):
                await _prepare(url)
                # Creates fill the queue that the background workload then drains.
                rates = await _round(driver, url, args)
                for workload, rate in rates.items():
                    results.setdefault(workload, {}).setdefault(driver.name, []).append(rate)
        return results
    finally:
        pg.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--pool", type=int, default=10)
    args = parser.parse_args()
    results = asyncio.run(main_async(args))
    print(f"{'workload':<12}{'asyncpg/s':>12}{'psycopg/s':>12}{'asyncpg/psycopg':>18}")
    for workload, by_driver in results.items():
        a = statistics.median(by_driver["asyncpg"])
        p = statistics.median(by_driver["psycopg"])
        ratios = [x / y for x, y in zip(by_driver["asyncpg"], by_driver["psycopg"], strict=True)]
        print(f"{workload:<12}{a:>12.0f}{p:>12.0f}{statistics.median(ratios):>18.2f}")


if __name__ == "__main__":
    main()
