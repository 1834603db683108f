"""Issue 12, item 6: the store vanishing went unnoticed.

The bug: with the database file deleted (or replaced) under a running server, creates
kept answering 200: SQLite went on writing into the deleted file, which nobody opens
again, and everything written was lost at the next start.

The fix: the store remembers its file's identity (st_dev, st_ino) when it opens it and
checks it before every write transaction, at readiness and in each recovery scan. Once
the path names another file or none, writes are refused (503 in the OpenAI envelope,
saying why), /readyz fails with the reason, and the log says so once, at error level,
with where the deleted file can still be copied from. /healthz stays 200: a restart would
open an empty store, and that is for an operator to decide.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

from tests.conftest import StartServer


def vanish(db: Path, how: str) -> None:
    if how == "replaced":
        copy = db.with_name("copy.db")
        shutil.copy(db, copy)
        os.replace(copy, db)
        return
    db.unlink()
    if how == "deleted-with-wal":
        for suffix in ("-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)


@pytest.mark.sqlite_only("the SQLite database file is deleted or replaced under the server")
@pytest.mark.parametrize(
    "how",
    [
        pytest.param("deleted", id="deleted"),
        pytest.param("deleted-with-wal", id="deleted-with-its-wal"),
        pytest.param("replaced", id="replaced"),
    ],
)
def test_a_database_file_deleted_under_the_server_refuses_writes_and_fails_readiness(
    start_server: StartServer, tmp_path: Path, how: str
) -> None:
    db = tmp_path / "data" / "responses.db"
    server = start_server("--scan-interval", "0.2", db=db)
    url = server.url
    body = {"model": "m", "input": "hello", "background": True}
    first = httpx.post(f"{url}/v1/responses", json=body, timeout=30)
    assert first.status_code == 200, first.text

    vanish(db, how)

    refused = httpx.post(f"{url}/v1/responses", json=body, timeout=30)
    assert refused.status_code == 503, refused.text
    error = refused.json()["error"]
    assert error["type"] == "server_error"
    assert "database file was deleted or replaced" in error["message"]
    ready = httpx.get(f"{url}/readyz", timeout=10)
    assert ready.status_code == 503, ready.text
    assert ready.json()["status"] == "store_unavailable"
    what = "replaced by another file" if how == "replaced" else "deleted"
    assert f"was {what} while the server had it open" in ready.json()["reason"]
    assert httpx.get(f"{url}/healthz", timeout=10).status_code == 200
    errors = [line for line in server.log().splitlines() if " ERROR store: " in line]
    assert len(errors) == 1 and "while the server had it open" in errors[0], errors
    if how != "replaced":
        assert "copy it from /proc/" in errors[0]
