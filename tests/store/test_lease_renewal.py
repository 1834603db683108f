"""Leases in the store (issue 21): a renewal extends only the leases given to it, under
their fences, and is committed and answered by the writer thread without the event loop;
every recovery of a turn that did not end is counted, one's own too, but a released
lease (a graceful hand-over) is not."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from urllib.parse import urlparse

import asyncpg
import pytest

from store import Fence, SQLiteStore, StoreUnavailable, open_store
from store.postgres._leases import LeaseConnection
from tests.store.test_sqlite import new_response
from tests.support.tcp_proxy import TcpProxy


async def claimed(store: SQLiteStore, response_id: str, owner: str, ttl: float) -> Fence:
    _, _, record = await store.create_response(
        new_response(response_id), [], [], None, (owner, ttl)
    )
    assert record is not None
    return Fence(owner, record.epoch)


async def expiry(store: SQLiteStore, response_id: str) -> float:
    record = await store.get_response(response_id, "")
    assert record is not None and record.lease_expires_at is not None
    return record.lease_expires_at


async def test_a_renewal_extends_only_the_leases_it_is_given_under_their_fences(
    tmp_path: Path,
) -> None:
    async with open_store(tmp_path / "r.db") as store:
        driven = await claimed(store, "resp_driven", "me", 5)
        await claimed(store, "resp_orphan", "me", 5)  # held by this owner, driven by no one
        stale = await claimed(store, "resp_stale", "me", 5)
        before = {r: await expiry(store, r) for r in ("resp_orphan", "resp_stale")}

        renewed = await asyncio.wrap_future(
            store.renew_leases(
                [("resp_driven", driven), ("resp_stale", Fence("me", stale.epoch + 1))], 60
            )
        )

        assert renewed == ["resp_driven"]
        assert await expiry(store, "resp_driven") > time.time() + 50
        assert {r: await expiry(store, r) for r in before} == before


async def test_a_renewal_is_answered_while_the_event_loop_is_blocked(tmp_path: Path) -> None:
    async with open_store(tmp_path / "b.db") as store:
        fence = await claimed(store, "resp_a", "me", 5)

        # Waiting on the loop's own thread: only the writer thread can answer this.
        renewed = store.renew_leases([("resp_a", fence)], 60).result(timeout=10)

        assert renewed == ["resp_a"]


async def test_every_recovery_of_an_unfinished_turn_counts_but_a_hand_over_does_not(
    tmp_path: Path,
) -> None:
    async with open_store(tmp_path / "c.db") as store:
        await claimed(store, "resp_a", "me", -1)  # already expired

        own = await store.recover("resp_a", "me", -1)  # this process's own turn
        other = await store.recover("resp_a", "other", 5)  # another process's
        assert other is not None
        handing = [("resp_a", Fence("other", other.epoch))]
        await store.release_leases(handing)  # a graceful shutdown hands it over
        handed = await store.recover("resp_a", "me", 5)

        assert own is not None and other is not None and handed is not None
        assert (own.recoveries, other.recoveries, handed.recoveries) == (1, 2, 2)
        assert (own.epoch, other.epoch, handed.epoch) == (2, 3, 4)


async def test_a_postgresql_renewal_on_a_stalled_connection_fails_while_the_leases_hold(
    postgres_url: str,
) -> None:
    """The lease connection goes half-open (it stays open and nothing more comes back):
    the renewal fails within a third of the lease TTL and drops the connection, so the
    keeper's next try, on a new connection, renews before the leases run out. Before, a
    renewal could wait longer than the default TTL, and a live peer take the leases."""
    async with open_store(postgres_url) as store:
        response_id = "resp_stalled"
        _, _, record = await store.create_response(
            new_response(response_id), [], [], None, ("me", 30)
        )
        assert record is not None
        fence = Fence("me", record.epoch)
        target = urlparse(postgres_url)
        proxy = TcpProxy(target.hostname or "127.0.0.1", target.port or 5432)
        await proxy.start()
        through = postgres_url.replace(f":{target.port}/", f":{proxy.port}/")
        leases = LeaseConnection(lambda: asyncpg.connect(through, timeout=60))
        try:
            assert await asyncio.wrap_future(leases.renew([(response_id, fence)], 3)) == [
                response_id
            ]
            proxy.stall()
            began = time.monotonic()
            with pytest.raises(StoreUnavailable):
                await asyncio.wrap_future(leases.renew([(response_id, fence)], 3))
            assert time.monotonic() - began < 3, "the renewal outlived the lease it renews"

            renewed = await asyncio.wrap_future(leases.renew([(response_id, fence)], 3))

            assert renewed == [response_id], "the next try, on a new connection, renews"
        finally:
            await asyncio.to_thread(leases.close)
            await proxy.close()
