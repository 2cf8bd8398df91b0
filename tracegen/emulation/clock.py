"""Time as the script sees it: under emulation ``time.time()``, ``time.perf_counter()``,
``time.monotonic()`` (and their ``_ns`` variants) read the **emulated** host clock (the
recorder's virtual ``now``), and ``time.sleep(s)`` advances it by ``s`` instead of waiting, so a
script that prints its own ms/iter prints the emulated H100's time and a serving loop that waits
for arrivals or times out sees the modelled timeline. ``--real-clock`` (``real=True``) leaves the
``time`` module alone. ``torch.cuda.Event.elapsed_time`` follows the same choice
(:mod:`tracegen.emulation.streams`). Every patch is undone when the capture ends.

Which callers see which clock:

* the main thread's code (the script and its libraries): the emulated clock. A read first brings
  the virtual time up to date (``Recorder.enter``: in ``script``/``measured`` host-time modes the
  script's Python since the last handler counts, as for any interception); in ``modelled`` mode,
  where the script's Python is free, a read costs :data:`CLOCK_READ_NS`, so a loop that polls the
  clock until a deadline still ends;
* other threads (also those the script starts, which are otherwise emulated, :mod:`.threads`:
  a thread that polls with ``time.sleep`` until the main thread has work for it would spin
  without waiting and write one ``time.sleep`` op per turn, a number set by real timing), and
  the Python standard library's own waits and timeouts (``queue``,
  ``threading``, ``asyncio``, ``selectors``, ``subprocess``, ``multiprocessing``, ...: any caller
  whose code lives in the standard library folder): the real clock. Those block for real, and a
  real wait measured on a clock that does not move would never end.

The emulated clocks keep their real origins: each starts from this machine's own reading at the
start of the script and then advances with the virtual time, so ``time.time()`` is still a
plausible epoch time. ``time.sleep(s)`` on the main thread is written as a ``cpu`` host op named
:data:`SLEEP_OP_NAME` of ``s`` (what a profiler shows for a sleeping host thread: a gap between
host ops, docs/conventions.md rule 1); it does not wait, but lets other threads run
(``sleep(0)``)."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Iterator

from fastrack_core.schema import OpKind

if TYPE_CHECKING:
    from tracegen.emulation.timeline import Recorder

CLOCK_READ_NS = 50
"""Modelled host cost of one clock read (``--host-time modelled`` only; the other modes measure
it): CPython's ``time.perf_counter()`` through the vDSO takes about 40-60 ns on a current server
core. Assumption, not calibrated on an H100 host."""
SLEEP_OP_NAME = "time.sleep"

REAL_TIME_NS = time.time_ns
REAL_PERF_COUNTER_NS = time.perf_counter_ns
REAL_MONOTONIC_NS = time.monotonic_ns
REAL_SLEEP = time.sleep
_CLOCKS = {"time": REAL_TIME_NS, "perf_counter": REAL_PERF_COUNTER_NS, "monotonic": REAL_MONOTONIC_NS}


def _stdlib_dirs() -> tuple[str, ...]:
    import sysconfig

    dirs = {os.path.dirname(os.__file__), sysconfig.get_paths().get("stdlib") or ""}
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs if d)


_STDLIB = _stdlib_dirs()


def _stdlib_caller(depth: int = 2) -> bool:
    """The caller ``depth`` frames up is the standard library's own code (not a site package)."""
    try:
        f = sys._getframe(depth).f_code.co_filename
    except ValueError:
        return False
    return f.startswith(_STDLIB) and "-packages" not in f


class ScriptClock:
    """The emulated clocks of one capture (:func:`script_clock` installs them)."""

    def __init__(self, rec: "Recorder"):
        self.rec = rec
        self.origin = rec.now
        self.bases = {name: read() for name, read in _CLOCKS.items()}

    def _virtual_ns(self) -> int:
        """Virtual ns since the script started (the host time up to this read)."""
        rec = self.rec
        rec.enter()
        try:
            if rec.clock.mode == "modelled":
                rec.now += CLOCK_READ_NS
            return rec.now - self.origin
        finally:
            rec.leave()

    def _emulated(self) -> bool:
        return threading.get_ident() == self.rec.main_ident and not _stdlib_caller(3)

    def reader_ns(self, name: str):
        real, base = _CLOCKS[name], self.bases[name]

        def read_ns() -> int:
            if not self._emulated():
                return real()
            return base + self._virtual_ns()

        def read() -> float:
            if not self._emulated():
                return real() / 1e9
            return (base + self._virtual_ns()) / 1e9

        read_ns.__name__, read.__name__ = f"{name}_ns", name
        read_ns.__doc__ = read.__doc__ = f"time.{name} on the emulated host clock (tracegen.emulation.clock)"
        return read, read_ns

    def sleep(self, seconds) -> None:
        if not self._emulated() or not seconds or seconds < 0:
            REAL_SLEEP(seconds)  # other threads, stdlib waits; 0 yields; negative raises as usual
            return
        ns = int(round(float(seconds) * 1e9))
        rec = self.rec
        rec.enter()
        try:
            rec.host(OpKind.CPU, SLEEP_OP_NAME, ns)
        finally:
            rec.leave()
        REAL_SLEEP(0)  # let other threads run, as a real sleep would


@contextlib.contextmanager
def script_clock(rec: "Recorder", real: bool = False) -> Iterator[ScriptClock | None]:
    """The ``time`` module on the emulated clock for the duration (nothing when ``real``)."""
    rec.real_clock = bool(real)
    if real:
        yield None
        return
    clock = ScriptClock(rec)
    saved = {}
    patches = {"sleep": clock.sleep}
    for name in _CLOCKS:
        patches[name], patches[f"{name}_ns"] = clock.reader_ns(name)
    for attr, fn in patches.items():
        saved[attr] = getattr(time, attr)
        setattr(time, attr, fn)
    try:
        yield clock
    finally:
        for attr, fn in saved.items():
            setattr(time, attr, fn)
