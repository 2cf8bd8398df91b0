"""What-if speed factors of an emulated capture (``tracegen capture --gpu-speed/--copy-speed/
--host-speed``): ground truth for ``replay --scale``. A factor F divides durations by F
(F = 2: twice as fast).

* ``gpu``: every kernel and memset the cost model prices (the GPU's compute and memory);
* ``copy``: every memcpy (host<->device over the link model, and device-to-device), separately,
  so that the what-if kinds ``kernel`` and ``memcpy`` each have their own ground truth;
* ``host``: every modelled host duration (:func:`tracegen.emulation.hosttime.host_scaled_spec`:
  CUDA runtime call costs, framework time per ATen operator, Python per module call and per
  optimizer step, the return of a blocking call) and, with ``--host-time measured``, the
  measured script time.

Not scaled by any of them: ``launch_latency_ns`` (end of a launch call to the earliest GPU start,
neither host nor GPU work) and the time a blocking call spends waiting (it follows from the
GPU work it waits for).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fastrack_core.errors import CaptureError
from fastrack_core.schema import OpKind

MIN_SPEED = 0.01
"""Smallest accepted speed factor (100x slower); an assumption: beyond it the emulation's
integer-ns durations and the what-if stop being meaningful."""
MAX_SPEED = 100.0
"""Largest accepted speed factor (100x faster); kernels would shrink to tens of ns."""


@dataclass(frozen=True)
class SpeedFactors:
    gpu: float = 1.0
    copy: float = 1.0
    host: float = 1.0

    def gpu_dur(self, kind: OpKind, dur_ns: float) -> int:
        """The duration (ns, at least 1) of a GPU op of ``kind`` priced at ``dur_ns`` at speed 1."""
        f = self.copy if kind == OpKind.MEMCPY else self.gpu
        return max(1, int(round(dur_ns / f)))

    def as_metadata(self) -> dict[str, float]:
        return {"gpu_speed": self.gpu, "copy_speed": self.copy, "host_speed": self.host}

    def describe(self) -> str:
        """``"; --gpu-speed 2 --host-speed 0.5"`` (the factors other than 1, as capture options),
        or ``""``: appended to the trace's ``capture_tool`` metadata so that it says how it was made."""
        opts = [f"--{k.replace('_', '-')} {v:g}" for k, v in self.as_metadata().items() if v != 1.0]
        return "; " + " ".join(opts) if opts else ""


def check_speed(value, option: str) -> float:
    """``value`` as a speed factor; :class:`CaptureError` naming ``option`` when it is not a finite
    number in [MIN_SPEED, MAX_SPEED]."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise CaptureError(f"{option} must be a number (a speed factor)") from None
    if not math.isfinite(f) or not MIN_SPEED <= f <= MAX_SPEED:
        raise CaptureError(f"{option} must be a finite factor between {MIN_SPEED:g} and {MAX_SPEED:g}")
    return f


def speed_factors(gpu: float = 1.0, copy: float = 1.0, host: float = 1.0) -> SpeedFactors:
    return SpeedFactors(check_speed(gpu, "--gpu-speed"), check_speed(copy, "--copy-speed"),
                        check_speed(host, "--host-speed"))
