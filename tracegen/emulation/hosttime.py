"""How the virtual host time of an emulated capture advances (``--host-time``).

* ``script`` (the default): the script's own Python between the emulator's handlers runs for
  real and is measured as **thread CPU time** (``time.thread_time_ns``), less the time inside the
  handlers and a calibrated cost per interception (:func:`calibrate`), and scaled to the target
  host (:mod:`tracegen.emulation.scripttime`: this machine's speed from a calibration loop at
  capture start, the target's ``GpuSpec.host_cpu_speed``). Torch operators keep their modelled
  costs (``aten_op_host_ns``, ``aten_view_host_ns``, the runtime calls, as in ``modelled``); the
  Python around them (the loop, ``nn.Module.__call__``, the optimizer's Python, a scheduler) is
  measured instead of being priced per module call or optimizer step. ATen operators on CPU
  tensors (the script's own CPU work) count with their measured CPU time. The script time is
  written as host work on the thread that ran it (a ``cpu`` op before the next operator's own
  host op, :meth:`tracegen.emulation.timeline.Recorder.host`).
* ``modelled``: host time is the sum of named per-operation costs of a GPU server
  (``GpuSpec`` fields, calibrated from real H100 traces; ``docs/emulation.md``): the CUDA runtime
  calls (``launch_kernel_ns``, ``memcpy_call_ns``, ...), framework dispatch per ATen operator
  (``aten_op_host_ns``, ``aten_view_host_ns``; charged by the dispatch layer), Python per
  ``nn.Module`` call (``module_call_host_ns``) and per optimizer step and parameter
  (``optimizer_step_host_ns``, ``optimizer_param_host_ns``), and per ATen operator on a CPU
  tensor (``aten_op_host_ns``: dispatch only, the data work is not modelled). Nothing measured on
  this machine enters the trace, so captures are deterministic.
* ``measured``: the script's wall time on this machine (``perf_counter_ns`` between the
  emulator's handlers) minus a calibrated interception cost, plus the modeled ATen and runtime
  costs; it reflects this machine's CPU, its load and the emulator's overhead (an upper bound).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Callable

import torch

from tracegen.emulation.clock import REAL_PERF_COUNTER_NS
from tracegen.emulation.scripttime import ScriptTime, calibrate_cpu

if TYPE_CHECKING:
    from tracegen.emulation.timeline import Recorder

MODES = ("script", "modelled", "measured")
DEFAULT_MODE = "script"
META = torch.device("meta")

HOST_COST_FIELDS = ("launch_kernel_ns", "memcpy_call_ns", "memset_call_ns", "sync_return_ns", "event_call_ns",
                    "aten_op_host_ns", "aten_view_host_ns", "module_call_host_ns", "optimizer_step_host_ns",
                    "optimizer_param_host_ns")
"""The ``GpuSpec`` fields that are host durations (the modelled host time); ``--host-speed``
divides each of them (:func:`host_scaled_spec`)."""


def host_scaled_spec(spec, speed: float):
    """``spec`` with every host cost (:data:`HOST_COST_FIELDS`) divided by ``speed`` (rounded to ns)."""
    if speed == 1.0:
        return spec
    return spec.with_overrides(**{f: int(round(getattr(spec, f) / speed)) for f in HOST_COST_FIELDS})


class HostClock:
    """Advances ``rec.now`` between the emulator's handlers, for one host thread (each thread
    the capture started has its own clock, :mod:`tracegen.emulation.threads`).

    ``enter()``/``leave()`` bracket the emulator's own bookkeeping (nested calls count once);
    in ``measured`` mode the wall time outside them is the script's host time, in ``script`` mode
    its thread's CPU time outside them (scaled to the target host). Once the script has started
    a thread, the outermost ``enter()`` takes ``rec.lock`` and the matching ``leave()`` releases it."""

    def __init__(self, rec: "Recorder", mode: str = "modelled", stats: ScriptTime | None = None):
        """``stats``: script mode, a calibration already made (no calibration loop is run)."""
        if mode not in MODES:
            raise ValueError(f"host time mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.rec = rec
        self.mode = mode
        self.measured = mode == "measured"
        self.script = mode == "script"
        self.timed = mode != "modelled"
        self._read = time.thread_time_ns if self.script else REAL_PERF_COUNTER_NS  # never the script's clock
        self._ident = threading.get_ident()
        self.stats: ScriptTime | None = None
        self._intercept_ns = 0
        self._scale = 1.0 / rec.speed.host
        if self.script:
            spec = rec.spec
            self.stats = stats or ScriptTime(calibration_loop_ns=calibrate_cpu(), reference_loop_ns=spec.host_reference_loop_ns,
                                    target_cpu_speed=spec.host_cpu_speed, host_speed=rec.speed.host)
            self._scale = self.stats.scale
        self._resume = self._read()
        self._entered = self._resume
        self._depth = 0
        self._locked = False  # holds rec.lock (threaded scripts: one thread in the handlers at a time)
        self._owed = 0  # script mode: measured ns not yet on the timeline (negative: overhead overshoot)

    @property
    def intercept_ns(self) -> int:
        """Calibrated cost (ns) of getting into and out of a handler (:func:`calibrate`)."""
        return self._intercept_ns

    @intercept_ns.setter
    def intercept_ns(self, ns: int) -> None:
        self._intercept_ns = int(ns)
        if self.stats is not None:
            self.stats.intercept_ns = int(ns)

    def restart(self) -> None:
        """The script starts now (measured and script modes: nothing before counts)."""
        self._resume = self._read()
        self._owed = 0

    def enter(self) -> None:
        """Start of emulator bookkeeping: in measured/script mode, the time since the last leave()
        was the script's, less the calibrated cost of getting into the handler."""
        if self._depth == 0 and self.timed:
            if self.script:
                if threading.get_ident() != self._ident:
                    return  # another thread: its time is not the main thread's (nothing counted)
                t = self._read()
                self._script_time(t - self._resume - self._intercept_ns)
                self._entered = t
            else:
                t = self._read()
                self.rec.now += int(max(0, t - self._resume - self._intercept_ns) / self.rec.speed.host)
        if self._depth == 0 and self.rec.threaded and threading.get_ident() == self._ident:
            self.rec.lock.acquire()  # after the reading: waiting for another thread is not script time
            self._locked = True
        self._depth += 1

    def leave(self) -> None:
        if self.script and self._depth == 1 and threading.get_ident() != self._ident:
            return  # the matching enter() on another thread counted nothing
        self._depth -= 1
        if self._depth == 0 and self.timed:
            self._resume = self._read()
            if self.script:
                self.stats.emulator_cpu_ns += self._resume - self._entered
        if self._depth == 0 and self._locked:
            self._locked = False
            self.rec.lock.release()

    def _script_time(self, dt: int, interception: bool = True) -> None:
        """``dt`` measured CPU ns of the script (may be slightly negative: the calibrated
        interception cost is an average). The balance carries over, bounded below by a few
        interceptions, so per-call noise neither adds up nor swallows real script time."""
        st = self.stats
        st.interceptions += interception
        owed = self._owed + dt
        if owed > 0:
            ns = int(owed * self._scale)
            st.script_cpu_ns += owed
            st.script_ns += ns
            self.rec.now += ns
            self.rec.script_pending += ns
            owed = 0
        self._owed = max(owed, -4 * self._intercept_ns)

    def counted(self, fn: Callable, *a, **kw):
        """Run ``fn`` (PyTorch's or the script's own host code, called from a handler): measured
        mode counts its wall time as host time; modelled and script modes charge nothing for it
        (the ATen operators it dispatches are charged one by one)."""
        if not self.measured or self._depth != 1 or threading.get_ident() != self._ident:
            return fn(*a, **kw)
        self.leave()
        try:
            return fn(*a, **kw)
        finally:
            self.enter()

    def cpu_op(self, fn: Callable, *a, **kw):
        """An ATen operator on CPU tensors only (the script's own CPU work, data loading):
        modelled mode charges ``aten_op_host_ns``, measured mode its wall time, script mode its
        thread CPU time (scaled, as the script's)."""
        if self.script and self._depth == 1 and threading.get_ident() == self._ident:
            t0 = self._read()
            try:
                return fn(*a, **kw)
            finally:
                dt = self._read() - t0
                self._entered += dt  # not the emulator's time
                self._script_time(dt, interception=False)
        out = self.counted(fn, *a, **kw)
        if not self.timed:
            self.rec.now += self.rec.spec.aten_op_host_ns
        return out

    # -- modelled Python costs -------------------------------------------------------------
    def _module_call(self, module, args):
        if self.rec.known_thread():
            self.rec.now += self.rec.spec.module_call_host_ns

    def _optimizer_step(self, opt, args, kwargs):
        if not self.rec.known_thread():
            return
        spec = self.rec.spec
        n = sum(1 for g in opt.param_groups for p in g["params"] if p.grad is not None)
        self.rec.now += spec.optimizer_step_host_ns + n * spec.optimizer_param_host_ns

    def install_hooks(self) -> Callable[[], None]:
        """Global ``nn.Module`` forward pre-hook and optimizer step pre-hook charging the modelled
        Python costs (modelled mode only: the other modes measure that Python); returns the
        function that removes them."""
        if self.timed:
            return lambda: None
        from torch.nn.modules.module import register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        handles = [register_module_forward_pre_hook(self._module_call),
                   register_optimizer_step_pre_hook(self._optimizer_step)]
        return lambda: [h.remove() for h in handles]


def calibrate(rec: "Recorder", fmode, dmode, n: int = 300) -> int:
    """Measured and script modes: the time one interception costs (Python mode entry/exit around
    the handlers, which the handlers cannot time themselves), in ns. Nothing is recorded (the
    recorder's state is restored)."""
    if rec.clock.script:
        return _calibrate_script(rec, fmode, dmode, n)
    clock = rec.clock
    t = torch.empty(8, device=META)
    for _ in range(20):
        t.view(-1)
    t0 = time.perf_counter_ns()
    for _ in range(n):
        t.view(-1)
    plain = (time.perf_counter_ns() - t0) / n
    saved = (rec.now, clock._resume, rec.host_end)
    with fmode, dmode:
        clock.restart()
        start = rec.now
        for _ in range(n):
            t.view(-1)
        clock.enter()
        clock.leave()
        adv = (rec.now - start) / n
    rec.now, clock._resume, rec.host_end = saved
    # one view = 2 interceptions (function + dispatch) + the modeled view cost + the plain call
    # (the virtual time is the measured time divided by --host-speed: undo that first)
    return max(0, int(((adv - rec.spec.aten_view_host_ns) * rec.speed.host - plain) / 2))


def _calibrate_script(rec: "Recorder", fmode, dmode, n: int = 150, repeats: int = 2) -> int:
    """Script mode: thread CPU ns outside the handlers per ``torch.empty(8, device="cuda")`` (one
    interception: the dispatch handler runs inside the function handler; a result with a shadow
    value, freed when the next one replaces it, as most operator results are), less what the
    same loop costs around a plain built-in call (the script's own share). That remainder
    (getting into and out of the Python modes, the clock reads, freeing the emulated result and
    its shadow) is the emulator's; the operator itself is priced by the cost model. An
    allocation, not a kernel: ATen's meta kernels of compute ops run Python decompositions
    (~350 us per ``relu`` here), which would make the calibration cost more than the 10% the
    whole measurement may add to a capture. Run on a scratch recorder with its own modes
    (nothing reaches ``rec``); fastest of ``repeats``; about 12 ms."""
    from tracegen.emulation.timeline import Recorder

    scratch = Recorder(rec.spec, "modelled")
    scratch.clock = HostClock(scratch, "script", stats=ScriptTime(calibration_loop_ns=1, reference_loop_ns=1))
    st = scratch.clock.stats
    fm, dm = type(fmode)(scratch), type(dmode)(scratch)
    read = time.thread_time_ns
    empty = torch.empty
    best = None
    with fm, dm:
        for _ in range(10):
            y = empty(8, device="cuda")
    for _ in range(repeats):
        t0 = read()
        for _ in range(n):
            y = len(())
        base = read() - t0
        inside0 = st.emulator_cpu_ns
        with fm, dm:
            t0 = read()
            for _ in range(n):
                y = empty(8, device="cuda")
            total = read() - t0
        per_call = (total - (st.emulator_cpu_ns - inside0) - base) / n
        best = per_call if best is None else min(best, per_call)
    del y
    return max(0, int(best))
