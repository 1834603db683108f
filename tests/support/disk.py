"""A small disk of its own, for tests of a store whose disk fills up: a tmpfs mounted on a
temporary folder, which a ballast file fills (the store then gets real ENOSPC errors,
SQLite's "database or disk is full") and frees again. Mounting needs root (or
CAP_SYS_ADMIN); without it the test is skipped."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

CHUNK = 64 * 1024


class SmallDisk:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.ballast = path / "ballast"

    def available(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int = 0) -> None:
        """Grow the ballast until only `leave` bytes are free (0: until ENOSPC)."""
        fd = os.open(self.ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            while (free := self.available()) > leave:
                os.write(fd, b"\0" * min(CHUNK, max(free - leave, 1)))
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        finally:
            os.close(fd)

    def free(self) -> None:
        self.ballast.unlink(missing_ok=True)


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[SmallDisk]:
    """A tmpfs of `size` (as mount takes it: "16m") on `path`, unmounted afterwards (stop
    the processes using it first)."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {mounted.stderr.strip()}")
    try:
        yield SmallDisk(path)
    finally:
        if subprocess.run(["umount", str(path)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=False)  # detach it at least
