"""The client side of each workload, run inside a load process (`bench._load`).

Every loop is bounded twice: by a count (`MAX_OPS`, the ids given) and by a deadline.
Timed workloads measure a window that starts after a warm-up; an operation counts when
it *finishes* inside the window, and its latency is measured from its first byte sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ._procs import cpu_seconds, rss_bytes, tree_cpu_seconds
from ._slow_readers import slow_readers
from ._stats import summary_ms
from ._wire import Connection, HTTPError

MAX_OPS = 1_000_000  # per worker, per run: far beyond what a window allows
OP_TIMEOUT = 30.0
TERMINAL = {"completed", "failed", "cancelled", "incomplete"}
PROMPT = "durable responses bench answer"  # cycled to the answer length (10 words)

Spec = dict[str, Any]


@dataclass(slots=True)
class Sample:
    latency: float  # seconds from the first byte sent to the end of the operation
    events: int = 0
    ttfd: float | None = None  # seconds to the first output_text.delta


Op = Callable[[Connection, int], Awaitable[Sample]]


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80


async def _windowed(spec: Spec, op: Op) -> dict[str, Any]:
    """Run `op` in `clients` workers for warm-up + duration; summarise the window.
    With `urls`, worker i talks to urls[i % len(urls)] (a round-robin client over
    several server processes); with `server_pids`, the servers' CPU is summed."""
    addresses = [_address(u) for u in spec.get("urls") or [spec["url"]]]
    clients, warmup, duration = spec["clients"], spec["warmup"], spec["duration"]
    start = time.monotonic() + warmup
    end = start + duration
    samples: list[Sample] = []
    errors: list[str] = []
    usage: dict[str, float] = {}

    async def worker(index: int) -> None:
        conn = Connection(*addresses[index % len(addresses)])
        try:
            for n in range(MAX_OPS):
                began = time.monotonic()
                if began >= end:
                    break
                try:
                    sample = await asyncio.wait_for(op(conn, index + n * clients), OP_TIMEOUT)
                except (OSError, HTTPError, TimeoutError, asyncio.IncompleteReadError) as exc:
                    errors.append(repr(exc))
                    await conn.close()
                    continue
                if start <= time.monotonic() <= end:
                    samples.append(sample)
        finally:
            await conn.close()

    async def meter() -> None:
        await asyncio.sleep(max(0.0, start - time.monotonic()))
        pids = spec.get("server_pids") or [p for p in [spec.get("server_pid")] if p]

        def servers_cpu() -> float:
            return sum(cpu_seconds(pid) for pid in pids)

        db_pid = spec.get("db_pid")  # PostgreSQL's postmaster: its backends' CPU too
        server0, client0 = servers_cpu(), time.process_time()
        db0 = tree_cpu_seconds(db_pid) if db_pid else 0.0
        await asyncio.sleep(max(0.0, end - time.monotonic()))
        usage["server_cpu"] = (servers_cpu() - server0) / duration
        usage["client_cpu"] = (time.process_time() - client0) / duration
        usage["db_cpu"] = ((tree_cpu_seconds(db_pid) - db0) / duration) if db_pid else 0.0

    await asyncio.gather(meter(), *(worker(i) for i in range(clients)))
    ttfd = [s.ttfd for s in samples if s.ttfd is not None]
    return {
        "ops": len(samples),
        "ops_per_s": len(samples) / duration,
        "events_per_s": sum(s.events for s in samples) / duration,
        "latency_ms": summary_ms([s.latency for s in samples]),
        "ttfd_ms": summary_ms(ttfd),
        "errors": len(errors),
        "first_errors": errors[:3],
        **usage,
    }


def _create_body(**extra: Any) -> dict[str, Any]:
    return {"model": "bench", "input": PROMPT, "store": True, **extra}


async def _post_json(conn: Connection, path: str, body: Any) -> dict[str, Any]:
    status, data = await conn.request("POST", path, body)
    if status != 200:
        raise HTTPError(f"POST {path}: HTTP {status}: {data[:200]!r}")
    result: dict[str, Any] = json.loads(data)
    return result


async def poll(spec: Spec) -> dict[str, Any]:
    """GET a completed response, round-robin over `ids` (also the ceiling's route)."""
    ids: list[str] = spec["ids"]

    async def op(conn: Connection, n: int) -> Sample:
        began = time.monotonic()
        status, data = await conn.request("GET", f"/v1/responses/{ids[n % len(ids)]}")
        if status != 200 or b'"completed"' not in data:
            raise HTTPError(f"poll: HTTP {status}: {data[:200]!r}")
        return Sample(time.monotonic() - began)

    return await _windowed(spec, op)


async def create(spec: Spec) -> dict[str, Any]:
    """Foreground POST (JSON), store=true, until completed."""

    async def op(conn: Connection, n: int) -> Sample:
        began = time.monotonic()
        body = await _post_json(conn, "/v1/responses", _create_body())
        if body.get("status") != "completed":
            raise HTTPError(f"create: status {body.get('status')}")
        return Sample(time.monotonic() - began)

    return await _windowed(spec, op)


async def stream(spec: Spec) -> dict[str, Any]:
    """POST stream=true (background=true too when `background`: through the event log)
    and read every event to response.completed."""
    extra = {"stream": True, "background": bool(spec.get("background"))}

    async def op(conn: Connection, n: int) -> Sample:
        began = time.monotonic()
        events, ttfd, done = 0, None, False
        try:
            async with contextlib.aclosing(
                conn.events("/v1/responses", _create_body(**extra))
            ) as frames:
                async for kind, _ in frames:
                    events += 1
                    if ttfd is None and kind == "response.output_text.delta":
                        ttfd = time.monotonic() - began
                    if kind == "response.completed":
                        done = True
        except BaseException:
            await conn.close()
            raise
        if not done:
            raise HTTPError("stream ended before response.completed")
        return Sample(time.monotonic() - began, events=events, ttfd=ttfd)

    return await _windowed(spec, op)


async def _until_terminal(
    conn: Connection, response_id: str, interval: float, deadline: float
) -> str:
    status = ""
    for _ in range(MAX_OPS):
        code, data = await conn.request("GET", f"/v1/responses/{response_id}")
        if code != 200:
            raise HTTPError(f"GET {response_id}: HTTP {code}")
        status = json.loads(data)["status"]
        if status in TERMINAL or time.monotonic() >= deadline:
            break
        await asyncio.sleep(interval)
    return status


async def background(spec: Spec) -> dict[str, Any]:
    """Background POST, then GET every `poll_interval` seconds until terminal."""
    interval = spec["poll_interval"]

    async def op(conn: Connection, n: int) -> Sample:
        began = time.monotonic()
        body = await _post_json(conn, "/v1/responses", _create_body(background=True))
        status = await _until_terminal(conn, body["id"], interval, began + OP_TIMEOUT)
        if status != "completed":
            raise HTTPError(f"background: ended {status}")
        return Sample(time.monotonic() - began)

    return await _windowed(spec, op)


async def follow(spec: Spec) -> dict[str, Any]:
    """Cross-process following: each worker POSTs a background stream to `url` (process
    A, which runs the response) and, once A's stream names the response, follows it with
    `GET /v1/responses/{id}?stream=true` on `follower_url` (process B). For every event
    A's stream receives inside the window after B's stream has started, the delay until
    B's stream receives the same `sequence_number` (both read in this one process)."""
    a_address, b_address = _address(spec["url"]), _address(spec["follower_url"])
    body = _create_body(
        input=f"[[words {spec['words']}]] [[delay {spec['delay_ms']}]] {PROMPT}",
        stream=True,
        background=True,
    )
    start = time.monotonic() + spec["warmup"]
    end = start + spec["duration"]
    delays: list[float] = []
    errors: list[str] = []
    missing = 0

    async def one() -> None:
        nonlocal missing
        conn_a, conn_b = Connection(*a_address), Connection(*b_address)
        seen_a: dict[int, float] = {}
        seen_b: dict[int, float] = {}
        joined: list[float] = []
        follower: asyncio.Future[None] | None = None

        async def follow_b(response_id: str) -> None:
            path = f"/v1/responses/{response_id}?stream=true"
            async with contextlib.aclosing(conn_b.events(path, None)) as frames:
                async for kind, data in frames:
                    now = time.monotonic()
                    if not joined:
                        joined.append(now)
                    seen_b[json.loads(data)["sequence_number"]] = now
                    if kind == "response.completed":
                        return

        try:
            async with contextlib.aclosing(conn_a.events("/v1/responses", body)) as frames:
                async for _, data in frames:
                    now = time.monotonic()
                    event = json.loads(data)
                    seen_a[event["sequence_number"]] = now
                    if follower is None:
                        follower = asyncio.ensure_future(follow_b(event["response"]["id"]))
            if follower is None:
                raise HTTPError("follow: A's stream was empty")
            await asyncio.wait_for(follower, OP_TIMEOUT)
        finally:
            if follower is not None and not follower.done():
                follower.cancel()
            await conn_a.close()
            await conn_b.close()
        for seq, seen in seen_a.items():
            if joined and seen > joined[0] and start <= seen <= end:
                if seq in seen_b:
                    delays.append(seen_b[seq] - seen)
                else:
                    missing += 1

    async def worker() -> None:
        for _ in range(MAX_OPS):
            if time.monotonic() >= end:
                break
            try:
                await asyncio.wait_for(one(), OP_TIMEOUT)
            except (OSError, HTTPError, TimeoutError, asyncio.IncompleteReadError) as exc:
                errors.append(repr(exc))

    await asyncio.gather(*(worker() for _ in range(spec["clients"])))
    return {
        "events": len(delays),
        "missing": missing,
        "delay_ms": summary_ms(delays),
        "errors": len(errors),
        "first_errors": errors[:3],
    }


async def _each(
    spec: Spec, count: int, op: Callable[[Connection, int], Awaitable[Any]]
) -> list[Any]:
    """Run `op` for 0..count-1 over `clients` connections; results in order."""
    host, port = _address(spec["url"])
    results: list[Any] = [None] * count
    counter = iter(range(count))

    async def worker() -> None:
        conn = Connection(host, port)
        try:
            for n in counter:
                results[n] = await asyncio.wait_for(op(conn, n), OP_TIMEOUT)
        finally:
            await conn.close()

    await asyncio.wait_for(
        asyncio.gather(*(worker() for _ in range(spec["clients"]))), spec.get("timeout", 600)
    )
    return results


async def fill(spec: Spec) -> dict[str, Any]:
    """Create `count` responses with POST (background and input as given); their ids."""
    extra = {"background": bool(spec.get("background"))}
    if "input" in spec:
        extra["input"] = spec["input"]

    async def op(conn: Connection, n: int) -> str:
        body = await _post_json(conn, "/v1/responses", _create_body(**extra))
        return str(body["id"])

    began = time.monotonic()
    ids = await _each(spec, spec["count"], op)
    return {"ids": ids, "seconds": time.monotonic() - began}


async def await_terminal(spec: Spec) -> dict[str, Any]:
    """Poll `ids` through the API until every one is terminal or `timeout` passes;
    seconds from `t0` (a time.monotonic() of the orchestrator) until all were."""
    host, port = _address(spec["url"])
    pending: set[str] = set(spec["ids"])
    statuses: dict[str, str] = {}
    completed_at: dict[str, int | None] = {}
    deadline = time.monotonic() + spec["timeout"]
    done_at = None
    for _ in range(MAX_OPS):
        if not pending or time.monotonic() >= deadline:
            break
        queue = iter(sorted(pending))

        async def worker(queue: Iterator[str]) -> None:
            conn = Connection(host, port)
            try:
                for response_id in queue:
                    with contextlib.suppress(OSError, HTTPError, asyncio.IncompleteReadError):
                        code, data = await conn.request("GET", f"/v1/responses/{response_id}")
                        body = json.loads(data) if code == 200 else {}
                        statuses[response_id] = body.get("status", f"http_{code}")
                        completed_at[response_id] = body.get("completed_at")
            finally:
                await conn.close()

        await asyncio.gather(*(worker(queue) for _ in range(spec["clients"])))
        pending = {i for i in pending if statuses.get(i) not in TERMINAL}
        if not pending:
            done_at = time.monotonic()
        else:
            await asyncio.sleep(spec.get("interval", 0.05))
    counts: dict[str, int] = {}
    for response_id in spec["ids"]:
        status = statuses.get(response_id, "unknown")
        counts[status] = counts.get(status, 0) + 1
    # In flight at the kill: ended after it. A recovered response ends a lease TTL or more
    # after the kill, so a second's margin (completed_at is in whole seconds) is enough.
    killed = spec.get("killed_at_epoch")
    in_flight = None
    if killed is not None:
        ended = [completed_at.get(i) for i in spec["ids"]]
        in_flight = sum(1 for at in ended if at is None or at > killed + 1)
    return {
        "seconds": (done_at - spec["t0"]) if done_at is not None else None,
        "statuses": counts,
        "lost": len(pending),
        "in_flight_at_kill": in_flight,
    }


async def _sample_rss(pid: int) -> int:
    peak = 0
    for _ in range(5):
        peak = max(peak, rss_bytes(pid))
        await asyncio.sleep(0.1)
    return peak


async def hold_streams(spec: Spec) -> dict[str, Any]:
    """Open `count` SSE streams of slow responses, hold them all open, read the server's
    VmRSS, then close them."""
    host, port = _address(spec["url"])
    pid, count = spec["server_pid"], spec["count"]
    body = _create_body(
        input=f"[[words 2]] [[delay {spec['delay_ms']}]] {PROMPT}",
        stream=True,
        background=bool(spec.get("background")),
    )
    rss_before = rss_bytes(pid)
    connecting = asyncio.Semaphore(32)  # Hypercorn's listen backlog is 100
    opened = 0
    all_open, release = asyncio.Event(), asyncio.Event()

    async def one() -> None:
        nonlocal opened
        conn = Connection(host, port)
        try:
            async with connecting:
                frames = conn.events("/v1/responses", body)
                async for kind, _ in frames:
                    if kind == "response.in_progress":
                        break
                else:
                    return
            opened += 1
            if opened == count:
                all_open.set()
            await release.wait()
            await frames.aclose()
        finally:
            await conn.close()

    tasks = [asyncio.ensure_future(one()) for _ in range(count)]
    began = time.monotonic()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(all_open.wait(), spec["timeout"])
    open_seconds = time.monotonic() - began
    rss_open = await _sample_rss(pid)
    release.set()
    _, late = await asyncio.wait(tasks, timeout=10)
    for task in late:
        task.cancel()
    failures = [t for t in tasks if t.done() and not t.cancelled() and t.exception()]
    return {
        "opened": opened,
        "open_seconds": open_seconds,
        "rss_before": rss_before,
        "rss_open": rss_open,
        "errors": len(failures),
        "first_errors": [repr(t.exception()) for t in failures[:3]],
    }


async def hold_queue(spec: Spec) -> dict[str, Any]:
    """Queue `count` background responses behind one long turn on one conversation,
    then read the server's VmRSS."""
    host, port = _address(spec["url"])
    pid, count = spec["server_pid"], spec["count"]
    rss_before = rss_bytes(pid)
    conn = Connection(host, port)
    try:
        conversation = (await _post_json(conn, "/v1/conversations", {}))["id"]
        head = _create_body(
            input="[[words 1]] [[delay 600000]] hold", background=True, conversation=conversation
        )
        await _post_json(conn, "/v1/responses", head)
    finally:
        await conn.close()
    queued = _create_body(background=True, conversation=conversation)

    async def op(c: Connection, n: int) -> str:
        return str((await _post_json(c, "/v1/responses", queued))["status"])

    began = time.monotonic()
    statuses = await _each(spec, count, op)
    seconds = time.monotonic() - began
    return {
        "queued": sum(1 for s in statuses if s == "queued"),
        "queue_seconds": seconds,
        "rss_before": rss_before,
        "rss_queued": await _sample_rss(pid),
    }


WORKLOADS: dict[str, Callable[[Spec], Coroutine[Any, Any, dict[str, Any]]]] = {
    "poll": poll,
    "create": create,
    "stream": stream,
    "background": background,
    "follow": follow,
    "fill": fill,
    "await_terminal": await_terminal,
    "hold_streams": hold_streams,
    "hold_queue": hold_queue,
    "slow_readers": slow_readers,
}
