"""A CPU-time sampler inside the server's process, for bench/cpu_budget.py.

    python -m bench._cpu_sampler CONTROL_DIR -- SERVER_ARGS...

runs `python -m server SERVER_ARGS` in this process, beside one control thread. While
armed, every thread of the process has a timer on its own CPU clock (timer_create(2) on
the clock of pthread_getcpuclockid, delivered with SIGEV_THREAD_ID): each time that thread
has used another `interval` of CPU time, a real-time signal interrupts that very thread,
and faulthandler writes the thread's Python stack to a file of its own. Samples therefore
fall where threads burn CPU and never where they wait, however loaded the machine is. A
wall-clock sampler such as py-spy counts a thread that is runnable but waiting for a CPU
as running, which on a contended machine is most of its time, and piles samples up where
the thread was preempted (right after it woke another: a socket send, a lock release).

The cyclic garbage collector's runs are marked in the same files (`gc.callbacks`: "GC
start 2", "GC stop 2"), so the samples taken inside a collection, and the collections of
each generation, are known. The control protocol is a file:
CONTROL_DIR/command holds `start OUT_DIR INTERVAL_NS` or `stop`, and the control thread
writes the command it carried out to CONTROL_DIR/done.

This module deliberately diverges from the rest of the bench: it is the one piece that
runs inside the server's process (the server's code is not changed; only started by it).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import faulthandler
import gc
import os
import runpy
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

SIGEV_THREAD_ID = 4  # linux/signal.h: deliver to the thread named in the event
POLL = 0.05  # seconds between the control thread's looks at the command file


class _SigEvent(ctypes.Structure):
    _fields_ = [
        ("value", ctypes.c_void_p),
        ("signo", ctypes.c_int),
        ("notify", ctypes.c_int),
        ("tid", ctypes.c_int),
        ("pad", ctypes.c_int * 11),
    ]


class _TimeSpec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("interval", _TimeSpec), ("value", _TimeSpec)]


def _libc() -> Any:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if not hasattr(libc, "timer_create"):  # glibc before 2.34
        libc = ctypes.CDLL(ctypes.util.find_library("rt"), use_errno=True)
    libc.timer_create.argtypes = [
        ctypes.c_int,
        ctypes.POINTER(_SigEvent),
        ctypes.POINTER(ctypes.c_void_p),
    ]
    libc.timer_settime.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.POINTER(_ITimerSpec),
        ctypes.c_void_p,
    ]
    libc.timer_delete.argtypes = [ctypes.c_void_p]
    return libc


@dataclass
class _Armed:
    signo: int
    file: IO[bytes]
    timer: ctypes.c_void_p


class Sampler:
    """Per-thread CPU-clock timers, each dumping its thread's stack to its own file."""

    def __init__(self) -> None:
        self._libc = _libc()
        self._armed: dict[int, _Armed] = {}  # by native thread id
        self._out: Path | None = None
        self._interval_ns = 0
        self._free = list(range(signal.SIGRTMIN + 1, signal.SIGRTMAX))
        gc.callbacks.append(self._on_gc)

    def start(self, out: Path, interval_ns: int) -> None:
        self._out, self._interval_ns = out, interval_ns
        out.mkdir(parents=True, exist_ok=True)
        self.arm_new()

    def arm_new(self) -> None:
        """Arm every thread not armed yet (threads start while a run goes on)."""
        if self._out is None:
            return
        me = threading.get_ident()
        for thread in threading.enumerate():
            tid = thread.native_id
            if thread.ident in (None, me) or tid is None or tid in self._armed:
                continue
            if self._free:
                with contextlib.suppress(OSError, ValueError):
                    self._arm(thread, tid)

    def _arm(self, thread: threading.Thread, tid: int) -> None:
        assert self._out is not None and thread.ident is not None
        clock = time.pthread_getcpuclockid(thread.ident)
        name = "".join(c if c.isalnum() or c in "-_" else "_" for c in thread.name)
        file = (self._out / f"{tid}-{name}.txt").open("ab", buffering=0)
        signo = self._free.pop()
        faulthandler.register(signo, file=file, all_threads=False)
        event = _SigEvent(None, signo, SIGEV_THREAD_ID, tid)
        timer = ctypes.c_void_p()
        if self._libc.timer_create(clock, ctypes.byref(event), ctypes.byref(timer)) != 0:
            faulthandler.unregister(signo)
            file.close()
            self._free.append(signo)
            raise OSError(ctypes.get_errno(), "timer_create")
        self._armed[tid] = _Armed(signo, file, timer)
        seconds, nanos = divmod(self._interval_ns, 1_000_000_000)
        every = _TimeSpec(seconds, nanos)
        self._libc.timer_settime(timer, 0, ctypes.byref(_ITimerSpec(every, every)), None)

    def stop(self) -> None:
        self._out = None
        for armed in self._armed.values():
            self._libc.timer_delete(armed.timer)
            faulthandler.unregister(armed.signo)
            armed.file.close()
            self._free.append(armed.signo)
        self._armed.clear()

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        armed = self._armed.get(threading.get_native_id())
        if armed is not None and not armed.file.closed:
            with contextlib.suppress(OSError, ValueError):
                os.write(armed.file.fileno(), f"GC {phase} {info['generation']}\n".encode())


def control(sampler: Sampler, directory: Path) -> None:
    """The control thread: carry out each new command of CONTROL_DIR/command."""
    done = ""
    while True:
        time.sleep(POLL)
        try:
            command = (directory / "command").read_text().strip()
        except OSError:
            command = done
        if command != done:
            done = command
            try:
                _carry_out(sampler, command.split())
            except Exception as exc:  # reported, never fatal: the control thread must live on
                print(f"cpu sampler: {command!r} failed: {exc!r}", file=sys.stderr)
            (directory / "done").write_text(command)
        sampler.arm_new()


def _carry_out(sampler: Sampler, words: list[str]) -> None:
    if words[:1] == ["start"]:
        sampler.start(Path(words[1]), int(words[2]))
    elif words[:1] == ["stop"]:
        sampler.stop()


def main() -> None:
    directory, dash, *server_args = sys.argv[1:]
    if dash != "--":
        raise SystemExit("usage: python -m bench._cpu_sampler CONTROL_DIR -- SERVER_ARGS...")
    sampler = Sampler()
    threading.Thread(
        target=control, args=(sampler, Path(directory)), name="cpu-sampler", daemon=True
    ).start()
    sys.argv = ["server", *server_args]
    runpy.run_module("server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
