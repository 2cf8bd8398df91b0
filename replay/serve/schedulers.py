"""Engine schedulers for the serving simulator, as plug-ins: a registry (:func:`register`,
:func:`scheduler`, :func:`names`), never a hand list.

A scheduler decides three things the simulator's loop (:mod:`replay.serve.sim`) asks of it:

* ``admits(state)``: whether waiting requests may enter the batch now (continuous batching:
  whenever a KV slot is free; a static batch: only when the batch is empty);
* every plug-in here batches prefill chunks and decodes into one step (chunked prefill within
  the token budget, decodes first; SGLang with ``--enable-mixed-chunk``);
* its **host time per step** the capture does not hold and whether it overlaps the GPU:
  ``period(price, extra)``. The captured step graphs hold the modelled ATen and CUDA host time of
  the example's loop; an engine's own Python (scheduling, input preparation, output processing)
  is ``extra`` ns per step (:func:`host_extra_ns`, 0 with ``--host-time capture``). A synchronous
  engine adds it to the step; an overlap scheduler runs it while the GPU works, so it costs only
  where the host is the longer side, and a CC cost that blocks the host (a host-synchronous
  readback in ``price.host_ns``) stalls it. The overlap scheduler learns that a request finished
  one step late (it reads a step's tokens after launching the next), so a finished request's KV
  slot is freed one step later (``finish_lag`` = 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fastrack_core.errors import ConfigError
from replay.serve.steps import StepPrice

# vLLM v0.6.0 performance update (blog.vllm.ai, 2024-09-05) [S41], profile of vLLM v0.5.3,
# Llama-3-8B on one H100: of the total execution time, the HTTP API server took 33%, scheduling
# (gathering the last step's results, scheduling, preparing inputs) 29%, GPU execution 38%.
API_SERVER_SHARE = 0.33
SCHEDULING_SHARE = 0.29
GPU_SHARE = 0.38
HOST_TIME_MODES = ("capture", "vllm-profile")


def host_extra_ns(mode: str, gpu_ns: int) -> int:
    """The engine's own host time per step that the capture does not hold: 0 (``capture``: the
    host time is what the step graphs price) or (``vllm-profile``) the profile's scheduling share
    scaled to this step's GPU time, 29/38 of it (the API server's 33% runs in its own process and
    is left out: it delays responses, not steps)."""
    if mode == "capture":
        return 0
    if mode == "vllm-profile":
        return int(round(gpu_ns * SCHEDULING_SHARE / GPU_SHARE))
    raise ConfigError(f"--host-time must be one of {', '.join(HOST_TIME_MODES)}")


@dataclass(frozen=True)
class Scheduler:
    name: str
    doc: str
    continuous: bool  # admit whenever a slot is free (False: only into an empty batch)
    overlap: bool  # host time of the next step runs while this one is on the GPU
    finish_lag: int  # steps between a request's last sample and its slot being freed

    def period(self, price: StepPrice, extra_ns: int) -> int:
        if self.overlap:
            return max(price.host_ns + extra_ns, price.gpu_ns)
        return max(price.host_ns, price.gpu_ns) + extra_ns


_REGISTRY: dict[str, Callable[[], Scheduler]] = {}


def register(name: str, factory: Callable[[], Scheduler]) -> None:
    if name in _REGISTRY:
        raise ValueError(f"scheduler {name!r} is registered twice")
    _REGISTRY[name] = factory


def names() -> list[str]:
    return sorted(_REGISTRY)


def scheduler(name: str) -> Scheduler:
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise ConfigError(f"--scheduler: unknown scheduler; one of {', '.join(names())}") from None


register("vllm", lambda: Scheduler(
    "vllm", "continuous batching with chunked prefill, synchronous step (vLLM v0 without async output)",
    continuous=True, overlap=False, finish_lag=0))
register("sglang", lambda: Scheduler(
    "sglang", "continuous batching with chunked prefill (mixed chunks), overlap scheduler one step ahead",
    continuous=True, overlap=True, finish_lag=1))
register("static", lambda: Scheduler(
    "static", "a static batch: admitted into an empty batch, run to completion, synchronous step",
    continuous=False, overlap=False, finish_lag=0))
