"""The patched ``torch.cuda`` surface (and ``torch.accelerator``, ``Tensor.pin_memory``, the
optimizers' foreach device lists, ``torch.compile``, ``torch.profiler.profile``, and the modules
that emulate more of the API: :mod:`.devices`, :mod:`.tensortypes`, :mod:`.memory`,
:mod:`.nvtx`, :mod:`.graphs`) for the duration of an emulated capture; every other public
function and class of ``torch.cuda`` is guarded (:mod:`.unsupported`: a failure names the call);
everything is restored afterwards."""

from __future__ import annotations

import contextlib
import types
import warnings
from typing import Any

import torch

from tracegen.emulation import memory
from tracegen.emulation.devices import default_device_state, device_patches, restore_default_device
from tracegen.emulation.graphs import graph_patches
from tracegen.emulation.nvtx import nvtx_patches
from tracegen.emulation.streams import EmuEvent, EmuStream
from tracegen.emulation.tensors import is_pinned_memory, mark_pinned
from tracegen.emulation.tensortypes import tensor_patches
from tracegen.emulation.timeline import DEFAULT_STREAM, Recorder, activated, active_recorder
from tracegen.emulation.unsupported import guard_namespace

COMPILE_NOTE = ("torch.compile: runs eagerly under emulation (no Inductor/Triton fusion, no CUDA graphs of "
                "mode='reduce-overhead'); the trace holds the eager kernels")


class _Props(types.SimpleNamespace):
    pass


class _ProfilerStub:
    """``torch.profiler.profile`` in emulation: ``step()`` marks step boundaries, nothing is profiled."""

    def __init__(self, *args, **kwargs):
        self.step_num = 0

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        rec = active_recorder()
        rec.saw_explicit_step = True
        rec.explicit_step = self.step_num

    def stop(self):
        active_recorder().explicit_step = -1

    def step(self):
        self.step_num += 1
        active_recorder().explicit_step_boundary()

    def export_chrome_trace(self, path):
        warnings.warn("torch.profiler under tracegen capture --emulate: nothing was profiled; "
                      f"{path} not written", stacklevel=2)

    def key_averages(self, *a, **k):
        return _EmptyAverages()


class _EmptyAverages(list):
    def table(self, *a, **k):
        return "(emulated capture: no profiler data)"


@contextlib.contextmanager
def patched_torch(rec: Recorder):
    """Replace the ``torch.cuda`` surface (and friends) by the emulated GPU for the duration."""
    saved: list[tuple[Any, str, Any]] = []
    spec = rec.spec

    def patch(obj, attr, value):
        saved.append((obj, attr, getattr(obj, attr, _MISSING)))
        setattr(obj, attr, value)

    cuda = torch.cuda
    fraction = memory.MemoryFraction()
    rec.default_stream = EmuStream(_stream_id=DEFAULT_STREAM)
    rec.current_stream = rec.default_stream
    props = _Props(name=spec.gpu_name, total_memory=spec.total_memory_bytes, major=9, minor=0,
                   multi_processor_count=spec.sms, is_integrated=False, is_multi_gpu_board=False,
                   L2_cache_size=50 * 1024 * 1024, gcnArchName="", uuid="emulated", warp_size=32,
                   max_threads_per_multi_processor=2048, regs_per_multiprocessor=65536)

    @contextlib.contextmanager
    def stream_ctx(stream):
        if stream is None:
            yield
            return
        prev = rec.current_stream
        rec.current_stream = stream
        try:
            yield
        finally:
            rec.current_stream = prev

    class _DeviceCtx:
        def __init__(self, device=None):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def set_stream(stream):
        rec.current_stream = stream

    zero = lambda *a, **k: 0  # noqa: E731
    none = lambda *a, **k: None  # noqa: E731
    patches = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "_lazy_init": none,
        "init": none,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": none,
        "device": _DeviceCtx,
        "device_of": _DeviceCtx,
        "get_device_name": lambda *a, **k: spec.gpu_name,
        "get_device_properties": lambda *a, **k: props,
        "get_device_capability": lambda *a, **k: (9, 0),
        "get_arch_list": lambda: ["sm_90"],
        "is_bf16_supported": lambda *a, **k: True,
        "synchronize": lambda device=None: rec.device_sync(),
        "current_stream": lambda device=None: rec.current_stream,
        "default_stream": lambda device=None: rec.default_stream,
        "set_stream": set_stream,
        "stream": stream_ctx,
        "Stream": EmuStream,
        "Event": EmuEvent,
        "manual_seed": none,
        "manual_seed_all": none,
        "seed": none,
        "seed_all": none,
        "initial_seed": zero,
        "get_rng_state": lambda *a, **k: torch.zeros(16, dtype=torch.uint8),
        "get_rng_state_all": lambda *a, **k: [torch.zeros(16, dtype=torch.uint8)],
        "set_rng_state": none,
        "set_rng_state_all": none,
        "empty_cache": none,
        "memory_allocated": zero,
        "max_memory_allocated": zero,
        "memory_reserved": zero,
        "max_memory_reserved": zero,
        "reset_peak_memory_stats": none,
        "reset_max_memory_allocated": none,
        "reset_accumulated_memory_stats": none,
        "memory_stats": lambda *a, **k: memory.memory_stats(),
        "memory_stats_as_nested_dict": lambda *a, **k: memory.memory_stats_nested(),
        "set_per_process_memory_fraction": fraction.set,
        "get_per_process_memory_fraction": fraction.get,
        "max_memory_cached": zero,
        "memory_cached": zero,
        "reset_max_memory_cached": none,
        "memory_summary": lambda *a, **k: "(emulated GPU: no allocations)",
        "mem_get_info": lambda *a, **k: (spec.total_memory_bytes, spec.total_memory_bytes),
        "utilization": zero,
    }
    fmode_ref: list = []
    more = device_patches(fmode_ref) + tensor_patches() + nvtx_patches() + graph_patches()
    own = set(patches) | {attr for obj, attr, _ in more if obj is cuda}
    memory_own = {"memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                  "empty_cache", "reset_peak_memory_stats", "mem_get_info", "memory_stats",
                  "memory_stats_as_nested_dict", "set_per_process_memory_fraction",
                  "get_per_process_memory_fraction"}
    # every other public torch.cuda function/class: still runs, but a failure names the call
    for attr, val in guard_namespace(cuda, "torch.cuda", own).items():
        patch(cuda, attr, val)
    for attr, val in guard_namespace(cuda.memory, "torch.cuda.memory", memory_own).items():
        patch(cuda.memory, attr, val)
    for attr, val in patches.items():
        patch(cuda, attr, _fresh(val))
    for mod_attr in memory_own:
        patch(cuda.memory, mod_attr, _fresh(patches[mod_attr]))
    for obj, attr, val in more:
        patch(obj, attr, val)
    acc = torch.accelerator
    for attr, val in (("is_available", lambda: True), ("current_accelerator", lambda *a, **k: torch.device("cuda")),
                      ("device_count", lambda: 1), ("current_device_index", lambda: 0),
                      ("current_device_idx", lambda: 0), ("set_device_index", none), ("set_device_idx", none),
                      ("synchronize", lambda *a, **k: rec.device_sync()),
                      ("current_stream", lambda *a, **k: rec.current_stream)):
        if hasattr(acc, attr):
            patch(acc, attr, _fresh(val))
    # emulated tensors are 'cuda' to the optimizers and clip_grad_norm_: foreach kernels apply
    import torch.optim.optimizer as topt
    import torch.utils._foreach_utils as fu

    orig_fe, orig_fused = fu._get_foreach_kernels_supported_devices, fu._get_fused_kernels_supported_devices
    for mod in (fu, topt):
        patch(mod, "_get_foreach_kernels_supported_devices", lambda: orig_fe() + ["meta"])
        patch(mod, "_get_fused_kernels_supported_devices", lambda: orig_fused() + ["meta"])
    orig_pin = torch.Tensor.pin_memory

    def pin_memory(self, device=None):
        if self.is_meta:
            return orig_pin(self)
        return mark_pinned(self.clone())

    def is_pinned(self, device=None):
        return is_pinned_memory(self) if not self.is_meta else False

    patch(torch.Tensor, "pin_memory", pin_memory)
    patch(torch.Tensor, "is_pinned", is_pinned)
    orig_clear = torch.clear_autocast_cache

    def clear_autocast_cache():
        orig_clear()
        for m in fmode_ref:
            m.cast_cache.clear()

    patch(torch, "clear_autocast_cache", clear_autocast_cache)

    def compile_(model=None, *a, **k):
        rec.note(COMPILE_NOTE)
        if model is None:
            return lambda m: m
        return model

    patch(torch, "compile", compile_)
    import torch.profiler as tprof

    patch(tprof, "profile", _ProfilerStub)
    patch(torch.autograd.profiler, "profile", _ProfilerStub)
    from torch.optim.optimizer import register_optimizer_step_post_hook

    hook = register_optimizer_step_post_hook(rec.optimizer_step_done)
    default_device, default_dtype = default_device_state(), torch.get_default_dtype()
    try:
        with activated(rec):
            yield fmode_ref
    finally:
        hook.remove()
        restore_default_device(default_device)  # a default the script set must not outlive the capture
        torch.set_default_dtype(default_dtype)
        for obj, attr, old in reversed(saved):
            if old is _MISSING:
                delattr(obj, attr)
            else:
                setattr(obj, attr, old)


_MISSING = object()


def _fresh(val):
    """A distinct function object per patched attribute (torch._dynamo rejects one object
    registered under two names)."""
    if isinstance(val, type) or not callable(val):
        return val

    def f(*a, **k):
        return val(*a, **k)

    return f

