"""How the virtual host time of an emulated capture advances (``--host-time``).

* ``modelled`` (the default): host time is the sum of named per-operation costs of a GPU server
  (``GpuSpec`` fields, calibrated from real H100 traces; ``docs/capture.md``): the CUDA runtime
  calls (``launch_kernel_ns``, ``memcpy_call_ns``, ...), framework dispatch per ATen operator
  (``aten_op_host_ns``, ``aten_view_host_ns``; charged by the dispatch layer), Python per
  ``nn.Module`` call (``module_call_host_ns``) and per optimizer step and parameter
  (``optimizer_step_host_ns``, ``optimizer_param_host_ns``), and per ATen operator on a CPU
  tensor (``aten_op_host_ns``: dispatch only, the data work is not modelled). Nothing measured on
  this machine enters the trace, so captures are deterministic.
* ``measured``: the script's wall time on this machine (``perf_counter_ns`` between the
  emulator's handlers) minus a calibrated interception cost, plus the modeled ATen and runtime
  costs; it reflects this machine's CPU and the emulator's overhead (an upper bound).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Callable

import torch

if TYPE_CHECKING:
    from tracegen.emulation.timeline import Recorder

MODES = ("modelled", "measured")
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
    """Advances ``rec.now`` between the emulator's handlers.

    ``enter()``/``leave()`` bracket the emulator's own bookkeeping (nested calls count once);
    in ``measured`` mode the wall time outside them is the script's host time."""

    def __init__(self, rec: "Recorder", mode: str = "modelled"):
        if mode not in MODES:
            raise ValueError(f"host time mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.rec = rec
        self.mode = mode
        self.measured = mode == "measured"
        self.intercept_ns = 0  # measured mode: calibrated cost of entering a handler (calibrate())
        self._resume = time.perf_counter_ns()
        self._depth = 0

    def restart(self) -> None:
        """The script starts now (measured mode: nothing before counts)."""
        self._resume = time.perf_counter_ns()

    def enter(self) -> None:
        """Start of emulator bookkeeping: in measured mode, the time since the last leave() was
        the script's, less the calibrated cost of getting into the handler."""
        if self._depth == 0 and self.measured:
            t = time.perf_counter_ns()
            self.rec.now += int(max(0, t - self._resume - self.intercept_ns) / self.rec.speed.host)
        self._depth += 1

    def leave(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._resume = time.perf_counter_ns()

    def counted(self, fn: Callable, *a, **kw):
        """Run ``fn`` (PyTorch's or the script's own host code, called from a handler): measured
        mode counts its wall time as host time; modelled mode charges nothing for it (the ATen
        operators it dispatches are charged one by one)."""
        if not self.measured or self._depth != 1 or threading.get_ident() != self.rec.main_ident:
            return fn(*a, **kw)
        self.leave()
        try:
            return fn(*a, **kw)
        finally:
            self.enter()

    def cpu_op(self, fn: Callable, *a, **kw):
        """An ATen operator on CPU tensors only (the script's own CPU work, data loading)."""
        out = self.counted(fn, *a, **kw)
        if not self.measured:
            self.rec.now += self.rec.spec.aten_op_host_ns
        return out

    # -- modelled Python costs -------------------------------------------------------------
    def _module_call(self, module, args):
        if threading.get_ident() == self.rec.main_ident:
            self.rec.now += self.rec.spec.module_call_host_ns

    def _optimizer_step(self, opt, args, kwargs):
        if threading.get_ident() != self.rec.main_ident:
            return
        spec = self.rec.spec
        n = sum(1 for g in opt.param_groups for p in g["params"] if p.grad is not None)
        self.rec.now += spec.optimizer_step_host_ns + n * spec.optimizer_param_host_ns

    def install_hooks(self) -> Callable[[], None]:
        """Global ``nn.Module`` forward pre-hook and optimizer step pre-hook charging the modelled
        Python costs (modelled mode only); returns the function that removes them."""
        if self.measured:
            return lambda: None
        from torch.nn.modules.module import register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        handles = [register_module_forward_pre_hook(self._module_call),
                   register_optimizer_step_pre_hook(self._optimizer_step)]
        return lambda: [h.remove() for h in handles]


def calibrate(rec: "Recorder", fmode, dmode, n: int = 300) -> int:
    """Measured mode: the time one interception costs (Python mode entry/exit around the
    handlers, which the handlers cannot time themselves), in ns: ``t.view(-1)`` on a meta tensor
    timed with and without the modes; the virtual time it advances beyond the plain call is
    overhead. Nothing is recorded (the recorder's state is restored)."""
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
