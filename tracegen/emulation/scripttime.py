"""The script's own host time (``--host-time script``, the default): how fast this machine runs
Python compared with the target host, and what a capture measured.

Between the emulator's handlers the script's Python runs for real on this machine. Its **thread
CPU time** (``time.thread_time_ns``: not wall time, so a loaded machine or a sleeping script does
not inflate it) is measured by :class:`tracegen.emulation.hosttime.HostClock`; the time inside the
handlers (the emulator's own work) is left out, and so is a calibrated cost per interception
(:func:`tracegen.emulation.hosttime.calibrate`). What remains is scaled to the target host:

    target_ns = measured_cpu_ns * capture_cpu_speed / (host_cpu_speed * host_speed)

* ``capture_cpu_speed`` = ``host_reference_loop_ns / calibration_loop_ns``: this machine's Python
  speed relative to the reference host, measured at capture start by :func:`calibrate_cpu` (the
  loop :func:`calibration_loop`, thread CPU time, best of ``CALIBRATION_REPEATS`` runs);
* ``host_cpu_speed`` (``GpuSpec``, host section): the target host's Python speed relative to the
  same reference;
* ``host_speed``: the what-if ``--host-speed`` factor (1 unless given).

This module does not import torch. ``docs/capture.md`` ("Host time as the script spends it")
documents the loop, the reference and the metadata keys (:meth:`ScriptTime.as_metadata`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

CALIBRATION_ITERS = 4_000
"""Iterations of :func:`calibration_loop` per timed run (about 0.55 ms of CPU on the reference)."""
CALIBRATION_REPEATS = 15
"""Timed runs (after one untimed warm-up; about 9 ms in all, a budget set by the 10% that
measuring host time may add to a small capture); the fastest counts: interference (another
process on the core or its caches, an interrupt) only ever makes a run slower, and 15 short runs
rarely all meet it."""
SCRIPT_OP_MIN_NS = 2_000
"""Script time (after scaling) between two host ops from which it is written as its own ``cpu``
op before the framework part of the next operator; shorter script time stays in that operator's
gap op (docs/conventions.md rule 1: the time between host ops is a ``cpu`` op). An assumption
that keeps module-call Python from doubling the number of host ops."""


def _unit(i: int, table: dict, items: list) -> int:
    k = i & 255
    table[k] = table.get(k, 0) + i
    items.append(k)
    if len(items) > 64:
        items.clear()
    return (k * 3 + 1) ^ (i >> 3)


def calibration_loop(n: int = CALIBRATION_ITERS) -> int:
    """A fixed amount of plain CPython work of the kind a training loop or a serving scheduler
    does between framework calls: per iteration one Python function call, a dict read and
    write, a list append (cleared every 65), integer arithmetic and a comparison."""
    table: dict = {}
    items: list = []
    acc = 0
    for i in range(n):
        acc += _unit(i, table, items)
    return acc


def calibrate_cpu(repeats: int = CALIBRATION_REPEATS, iters: int = CALIBRATION_ITERS) -> int:
    """Thread CPU ns of one :func:`calibration_loop` run on this machine (fastest of ``repeats``
    after a warm-up), for ``iters`` = :data:`CALIBRATION_ITERS` iterations."""
    calibration_loop(iters)
    best = None
    for _ in range(repeats):
        t0 = time.thread_time_ns()
        calibration_loop(iters)
        dt = time.thread_time_ns() - t0
        best = dt if best is None else min(best, dt)
    return max(1, int(best))


@dataclass
class ScriptTime:
    """What a ``script``-mode capture measured (the trace metadata's ``host_time``)."""

    calibration_loop_ns: int = 0
    reference_loop_ns: int = 0
    target_cpu_speed: float = 1.0
    host_speed: float = 1.0
    intercept_ns: int = 0
    interceptions: int = 0
    script_cpu_ns: int = 0  # measured, after the per-interception cost, before scaling
    script_ns: int = 0  # what entered the trace (scaled)
    emulator_cpu_ns: int = 0  # thread CPU time inside the handlers (left out)

    @property
    def capture_cpu_speed(self) -> float:
        return self.reference_loop_ns / self.calibration_loop_ns if self.calibration_loop_ns else 1.0

    @property
    def scale(self) -> float:
        """Factor from measured CPU ns on this machine to ns on the target host."""
        return self.capture_cpu_speed / (self.target_cpu_speed * self.host_speed)

    def as_metadata(self) -> dict:
        return {
            "mode": "script",
            "clock": "thread_time_ns",
            "calibration_loop_iters": CALIBRATION_ITERS,
            "calibration_loop_ns": int(self.calibration_loop_ns),
            "reference_loop_ns": int(self.reference_loop_ns),
            "capture_cpu_speed": round(self.capture_cpu_speed, 4),
            "target_cpu_speed": float(self.target_cpu_speed),
            "host_speed": float(self.host_speed),
            "scale": round(self.scale, 4),
            "intercept_ns": int(self.intercept_ns),
            "interceptions": int(self.interceptions),
            "script_cpu_ns": int(self.script_cpu_ns),
            "script_ns": int(self.script_ns),
            "emulator_cpu_ns": int(self.emulator_cpu_ns),
        }
