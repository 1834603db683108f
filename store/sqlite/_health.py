"""Whether the store can still be written: the database file's identity, watched.

SQLite keeps writing into the file it opened even after that file was deleted or replaced
(`rm`, a restore copied over it, a volume remounted): every commit then succeeds into an
inode that nobody will ever open again, and is lost at the next start. `FileWatch`
remembers the file's identity (st_dev, st_ino) when the store opens it; the writer checks
it before each transaction, and readiness and the recovery scan check it too. Once the
path names another file, or none, the store is *vanished* for good: writes are refused
(StoreVanished). (Reads of a deleted file fail by themselves: SQLite sees it moved.)
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from .._errors import StoreVanished

log = logging.getLogger("store")


class FileWatch:
    def __init__(self, path: Path) -> None:
        self.path = path
        st = os.stat(path)
        self._identity = (st.st_dev, st.st_ino)
        self._vanished: str | None = None  # why, once it has happened
        self._lock = threading.Lock()  # the writer thread and the event loop both check

    @property
    def vanished(self) -> str | None:
        return self._vanished

    def check(self) -> None:
        """Raise StoreVanished if the path no longer names the file the store opened."""
        if self._vanished is None:
            self._look()
        if self._vanished is not None:
            raise StoreVanished(self._vanished)

    def _look(self) -> None:
        try:
            st = os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            what = "deleted"
        except OSError:
            return  # cannot tell (a permission, say): writes will say if it matters
        else:
            if (st.st_dev, st.st_ino) == self._identity:
                return
            what = "replaced by another file"
        with self._lock:
            if self._vanished is not None:
                return
            self._vanished = (
                f"the database file {self.path} was {what} while the server had it open; "
                "no more writes are accepted (they would be lost at the next start)"
            )
        log.error(
            "%s. Readiness fails from now on. What was committed is still readable by this "
            "process until it exits%s; restore the file, then restart the server.",
            self._vanished,
            _open_copy(self.path),
        )


def _open_copy(path: Path) -> str:
    """Where the deleted file can still be copied from (Linux), for the log line."""
    folder = Path("/proc/self/fd")
    try:
        for fd in folder.iterdir():
            target = os.readlink(fd)
            if target == f"{path.resolve()} (deleted)":
                return f" (copy it from /proc/{os.getpid()}/fd/{fd.name})"
    except OSError:
        pass
    return ""
