"""Issue 12, items 1 and 6, in the store: a write the disk refuses, and a database file
that vanished, are told apart from a failed statement, and readiness can see both.

- A database file deleted or replaced under the open store refuses every write from then
  on (StoreVanished), from the event loop and from the lease keeper's thread alike.
- A full disk (a real one: a small tmpfs) fails writes with StoreUnavailable; the writer
  remembers it, so `check_writable` fails too, and a commit that changed nothing (which a
  full disk lets through) does not clear it; once the disk frees up, the probe write
  `check_writable` makes commits and clears it, with no other write needed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from store import Fence, StoreUnavailable, StoreVanished, open_store
from tests.store.test_sqlite import new_response
from tests.support.disk import small_disk


@pytest.mark.parametrize("how", ["deleted", "replaced"])
async def test_a_vanished_database_file_refuses_every_write(tmp_path: Path, how: str) -> None:
    db = tmp_path / "v.db"
    async with open_store(db) as store:
        await store.create_response(new_response("resp_before"), [], [])
        await store.check_writable()
        if how == "deleted":
            db.unlink()
        else:
            shutil.copy(db, tmp_path / "other.db")
            os.replace(tmp_path / "other.db", db)

        with pytest.raises(StoreVanished, match=f"was {how}"):
            await store.create_response(new_response("resp_after"), [], [])
        with pytest.raises(StoreVanished):
            await asyncio.wrap_future(store.renew_leases([("resp_before", Fence("me", 1))], 5))
        with pytest.raises(StoreVanished):
            store.check_file()
        with pytest.raises(StoreVanished):
            await store.check_writable()


async def test_a_full_disk_fails_writes_and_readiness_until_it_frees_up(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "2m") as disk:
        async with open_store(disk.path / "f.db") as store:
            await store.create_response(new_response("resp_before"), [], [])
            disk.fill()

            with pytest.raises(StoreUnavailable, match="full"):
                await store.create_response(new_response("resp_refused"), [], [])
            with pytest.raises(StoreUnavailable, match="full"):
                await store.check_writable()
            assert not await store.request_cancel("resp_none")  # commits: it changed nothing
            with pytest.raises(StoreUnavailable, match="full"):
                await store.check_writable()

            disk.free()
            await store.check_writable()  # the probe commits
            await store.create_response(new_response("resp_after"), [], [])
            assert await store.get_response("resp_after", "") is not None
