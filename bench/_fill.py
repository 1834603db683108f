"""Pre-populating a store fast, for the `scale` workload. Clearly a shortcut.

Creating a million responses over HTTP takes far too long, so the large store is made
from a small one whose responses were all created over HTTP: its rows are copied with
SQL, doubling until the target count, each copy under a fresh `resp_` id (the snapshot's
id rewritten to match; child rows such as input items copied with it). The copies are
byte-for-byte the size of real simple responses, which is what poll latency and bytes
on disk depend on. Message ids inside the copies repeat; nothing in `poll` reads them.
The server must not be running on the file.
"""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def _child_tables(conn: sqlite3.Connection) -> list[str]:
    tables = [
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name != 'responses'"
        )
    ]
    return [t for t in tables if "response_id" in _columns(conn, t)]


def _copy_sql(conn: sqlite3.Connection) -> list[str]:
    """INSERT ... SELECT statements copying the rows named in temp table `m(old, new)`."""
    select = {
        "id": "m.new",
        "snapshot": "replace(r.snapshot, r.id, m.new)",
        "lane": "CASE WHEN r.lane = r.id THEN m.new ELSE r.lane END",
    }
    cols = _columns(conn, "responses")
    statements = [
        f"INSERT INTO responses ({', '.join(cols)}) "
        f"SELECT {', '.join(select.get(c, 'r.' + c) for c in cols)} "
        "FROM m JOIN responses r ON r.id = m.old"
    ]
    for table in _child_tables(conn):
        cols = _columns(conn, table)
        values = ", ".join("m.new" if c == "response_id" else "c." + c for c in cols)
        statements.append(
            f"INSERT INTO {table} ({', '.join(cols)}) SELECT {values} "
            f"FROM m JOIN {table} c ON c.response_id = m.old"
        )
    return statements


def count(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM responses").fetchone()[0])


def grow(path: Path, target: int) -> float:
    """Copy the responses in `path` until it holds `target`; seconds taken."""
    began = time.monotonic()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = OFF")  # a bench fixture, rebuilt if it breaks
        statements = _copy_sql(conn)
        for _ in range(64):  # doublings; 2**64 is beyond any target
            have = int(conn.execute("SELECT count(*) FROM responses").fetchone()[0])
            if have >= target:
                break
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("DROP TABLE IF EXISTS temp.m")
            conn.execute(
                "CREATE TEMP TABLE m AS SELECT id AS old, "
                "'resp_' || lower(hex(randomblob(24))) AS new "
                "FROM responses WHERE status = 'completed' LIMIT ?",
                (target - have,),
            )
            for sql in statements:
                conn.execute(sql)
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.monotonic() - began


def disk_bytes(path: Path) -> int:
    """Bytes of the store on disk after a checkpoint (database file plus WAL)."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def sample_ids(path: Path, n: int, seed: int = 7) -> list[str]:
    """`n` ids spread at random over the whole table (by rowid, without a full scan)."""
    with sqlite3.connect(path) as conn:
        top = int(conn.execute("SELECT max(rowid) FROM responses").fetchone()[0])
        rng = random.Random(seed)
        rowids = rng.sample(range(1, top + 1), min(n, top))
        ids: list[str] = []
        for start in range(0, len(rowids), 500):
            chunk = rowids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            ids += [
                row[0]
                for row in conn.execute(
                    f"SELECT id FROM responses WHERE rowid IN ({marks}) AND status = 'completed'",
                    chunk,
                )
            ]
    rng.shuffle(ids)
    return ids


def log_bytes(path: Path, response_id: str) -> int:
    """Bytes of one response's event log (its events' JSON texts), read beside a
    running server."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(length(CAST(data AS BLOB))), 0) FROM events WHERE response_id = ?",
            (response_id,),
        ).fetchone()
        return int(row[0])
