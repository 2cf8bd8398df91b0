"""What-if duration scaling: "what if the GPU were 2x faster, or the host slower", as one flag.

:func:`scale_durations` multiplies the durations of one kind of op in a graph, before any
protocol transform, so the causal graph (:mod:`replay.pipeline.build`) decides what moves: a faster kernel
in a back-to-back queue moves its successors, a slower host call before a launch into a deep
queue does not move the GPU. Kinds:

=========== ==========================================================================
kind        ops whose duration is multiplied
=========== ==========================================================================
kernel      GPU kernels and memsets (work of the SMs)
memcpy      GPU copies (copy engines and the link)
host        host work: CPU ops, CUDA runtime calls, the return of blocking calls
collective  GPU collectives (communication)
=========== ==========================================================================

Lags are not scaled: launch latency, back-to-back gaps and idle CPU time are properties of the
launch path and of the program, not of the work. Durations are rounded to integer ns.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

import numpy as np

from fastrack_core.errors import ConfigError, closest, shown
from fastrack_core.schema import OpKind
from replay.graph import OpGraph

SCALE_KINDS: dict[str, tuple[OpKind, ...]] = {
    "kernel": (OpKind.KERNEL, OpKind.MEMSET),
    "memcpy": (OpKind.MEMCPY,),
    "host": (OpKind.CPU, OpKind.RUNTIME, OpKind.SYNC),
    "collective": (OpKind.COLLECTIVE,),
}
# Largest factor accepted (dimensionless): three orders of magnitude either way is already far
# outside any hardware what-if; larger values are typing mistakes.
MAX_FACTOR = 1000.0


def check_factor(kind: str, factor: float, label: str | None = None) -> float:
    """``factor`` as a float if ``kind`` is known and ``0 < factor <= MAX_FACTOR``, else ConfigError.
    ``label`` names the setting in messages (default ``--scale KIND``)."""
    label = label or (f"--scale {kind}" if kind in SCALE_KINDS else "--scale")
    if kind not in SCALE_KINDS:
        raise ConfigError(f"{label}: unknown kind {shown(kind)}{closest(kind, SCALE_KINDS)} (expected one of "
                          f"{', '.join(SCALE_KINDS)})")
    if isinstance(factor, (bool, np.bool_)):
        raise ConfigError(f"{label}: factor must be a number, got a {type(factor).__name__}")
    try:
        f = float(factor)
    except (TypeError, ValueError):
        raise ConfigError(f"{label}: factor must be a number, got a {type(factor).__name__}") from None
    if not math.isfinite(f) or f <= 0 or f > MAX_FACTOR:
        raise ConfigError(f"{label}={factor}: factor must be finite, > 0 and <= {MAX_FACTOR:g}")
    return f


def parse_scales(items: Iterable[str]) -> dict[str, float]:
    """``["kernel=0.5", "host=2"]`` -> ``{"kernel": 0.5, "host": 2.0}``; ConfigError on bad input."""
    out: dict[str, float] = {}
    for item in items:
        kind, sep, value = str(item).partition("=")
        kind = kind.strip()
        if not sep or not kind:
            raise ConfigError(f"--scale '{item}': expected KIND=FACTOR, e.g. kernel=0.5")
        if kind in out:
            raise ConfigError(f"--scale {kind}: given twice")
        try:
            number = float(value.strip())
        except ValueError:
            raise ConfigError(f"--scale {kind}: factor must be a number, got text of {len(value.strip())} "
                              "characters") from None
        out[kind] = check_factor(kind, number, f"--scale {kind}" if kind in SCALE_KINDS else None)
    return out


def check_scales(scales: Mapping[str, float] | None) -> dict[str, float]:
    """A validated copy of a {kind: factor} mapping (None: no scaling)."""
    return {k: check_factor(k, v) for k, v in (scales or {}).items()}


def scale_durations(graph: OpGraph, scales: Mapping[str, float] | None) -> OpGraph:
    """A graph whose ops of each kind in ``scales`` last ``factor`` times as long (rounded to ns)."""
    scales = check_scales(scales)
    if not scales:
        return graph
    factor = np.ones(graph.n, np.float64)
    for kind, f in scales.items():
        factor[np.isin(graph.kind, [int(k) for k in SCALE_KINDS[kind]])] = f
    dur = np.rint(graph.dur.astype(np.float64) * factor).astype(np.int64)
    return graph.replace(dur=dur)


def describe(scales: Mapping[str, float]) -> str:
    return ", ".join(f"{k} x{v:g}" for k, v in scales.items())
