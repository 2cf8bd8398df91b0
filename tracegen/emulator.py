"""Run an unchanged CUDA PyTorch script without a GPU and record what the GPU would have done.

Tensors the script puts on ``cuda`` become ``meta`` tensors (shapes and dtypes only, nothing
allocated), so models far larger than this machine's memory can be captured. Three layers do it:

* :class:`_FunctionMode` (a ``TorchFunctionMode``) rewrites ``device="cuda"`` arguments to
  ``meta``, makes emulated tensors report ``device == cuda:0`` / ``is_cuda``, implements
  ``pin_memory`` and ``autocast("cuda")`` (ATen's autocast does not act on meta tensors);
* :class:`_DispatchMode` (a ``TorchDispatchMode``, below autograd, so it also sees the backward
  pass) turns every ATen operator on an emulated tensor into GPU kernels priced by
  :mod:`tracegen.costmodel`, host<->device copies into memcpy ops, and reads of GPU values
  (``.item()``, ``.cpu()``, ``.tolist()``) into D2H copies plus host synchronisations;
* :func:`patched_torch` replaces ``torch.cuda.*`` (availability, device queries, streams, events,
  synchronisation, RNG seeding, memory statistics), ``torch.accelerator.*``,
  ``Tensor.pin_memory``, ``torch.compile`` and ``torch.profiler.profile``.

:class:`Recorder` keeps a virtual timeline: host time is the script's measured time on this
machine (``perf_counter_ns``) minus the emulator's own bookkeeping; CUDA runtime calls get
modeled durations; GPU ops are placed on in-order streams. ``docs/capture.md`` explains the
choices (what reads return, how steps are found, limits).
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
import time
import types
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from fastrack.schema import CopyDir, DepKind, HostMem, OpKind
from tracegen import costmodel
from tracegen.costmodel import GpuSpec, TensorInfo

aten = torch.ops.aten
META = torch.device("meta")
DEFAULT_STREAM = 7  # the id CUPTI gives the default stream in Kineto traces
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")

# What a read of emulated GPU memory returns (see docs/capture.md).
READ_FLOAT = 0.0
READ_INT = 0
READ_BOOL = False
READ_ALL = True  # the result of torch.all / Tensor.all


@dataclass
class _Op:
    kind: OpKind
    name: str
    start: int
    dur: int
    thread: int = -1
    stream: int = -1
    bytes: int = 0
    copy_dir: CopyDir = CopyDir.NONE
    host_mem: HostMem = HostMem.NONE
    correlation: int = -1
    opt_step: int = 0
    explicit_step: int = -1
    deps: list = field(default_factory=list)  # [(index, DepKind)]

    @property
    def end(self) -> int:
        return self.start + self.dur


class EmuEvent:
    """Stand-in for ``torch.cuda.Event``."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, **_kw):
        self.op: int | None = None  # index of the last GPU op before the record
        self.time: int | None = None  # GPU time (ns) at which the event completes
        self.enable_timing = enable_timing

    def record(self, stream=None):
        _active().event_record(self, stream)

    def wait(self, stream=None):
        _active().stream_wait_event(stream, self)

    def synchronize(self):
        _active().event_sync(self)

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: "EmuEvent") -> float:
        """Milliseconds between two recorded events on the emulated GPU timeline."""
        if self.time is None or end.time is None:
            raise RuntimeError("elapsed_time: both events must have been recorded")
        return (end.time - self.time) / 1e6


class EmuStream:
    """Stand-in for ``torch.cuda.Stream``."""

    def __init__(self, device=None, priority: int = 0, *, _stream_id: int | None = None, **_kw):
        self.stream_id = _stream_id if _stream_id is not None else _active().new_stream_id()
        self.priority = priority
        self.device = torch.device("cuda", 0)
        self.device_index = 0
        self.device_type = 1

    @property
    def cuda_stream(self) -> int:
        return self.stream_id

    def wait_stream(self, other: "EmuStream"):
        ev = EmuEvent()
        ev.record(other)
        ev.wait(self)

    def wait_event(self, event: EmuEvent):
        event.wait(self)

    def record_event(self, event: EmuEvent | None = None) -> EmuEvent:
        event = event or EmuEvent()
        event.record(self)
        return event

    def synchronize(self):
        _active().stream_sync(self.stream_id)

    def query(self) -> bool:
        return True

    def is_capturing(self) -> bool:
        return False

    def __eq__(self, other):
        return isinstance(other, EmuStream) and other.stream_id == self.stream_id

    def __hash__(self):
        return hash(("emu-stream", self.stream_id))

    def __repr__(self):
        return f"<torch.cuda.Stream device=cuda:0 cuda_stream={self.stream_id} (emulated)>"

    def __enter__(self):
        rec = _active()
        self._prev = rec.current_stream
        rec.current_stream = self
        return self

    def __exit__(self, *exc):
        _active().current_stream = self._prev
        return False


_ACTIVE: list["Recorder"] = []


def _active() -> "Recorder":
    if not _ACTIVE:
        raise RuntimeError("no emulated GPU is active")
    return _ACTIVE[-1]


class Recorder:
    """The virtual timeline of one emulated capture."""

    def __init__(self, spec: GpuSpec):
        self.spec = spec
        self.ops: list[_Op] = []
        self.thread = threading.get_native_id()
        self.main_ident = threading.get_ident()
        self.now = 0  # virtual host time, ns
        self.host_end = 0  # end of the last host op written
        self.last_host: int | None = None  # index of the last host op
        self._resume = time.perf_counter_ns()
        self._depth = 0
        self.stream_free: dict[int, int] = {}
        self.stream_last: dict[int, int] = {}
        self.stream_pending_events: dict[int, list[int]] = {}
        self.stream_ready: dict[int, int] = {}
        self._next_stream = DEFAULT_STREAM + 6
        self.default_stream = None  # created lazily (needs _ACTIVE)
        self.current_stream = None
        self.correlation = 0
        self.opt_steps = 0
        self.explicit_step = -1
        self.saw_explicit_step = False
        self.step_stack: list[tuple[Any, int]] = []
        self.gpu_ops = 0
        self.cpu_op_name = "cpu"

    # -- host time accounting -------------------------------------------------------------
    intercept_ns = 0  # calibrated cost of entering a mode handler, not the script's (calibrate())

    def enter(self):
        """Start of emulator bookkeeping: the time since the last leave() was the script's,
        less the calibrated cost of getting into the handler."""
        if self._depth == 0:
            t = time.perf_counter_ns()
            self.now += max(0, t - self._resume - self.intercept_ns)
        self._depth += 1

    def leave(self):
        self._depth -= 1
        if self._depth == 0:
            self._resume = time.perf_counter_ns()

    def counted(self, fn: Callable, *a, **kw):
        """Run ``fn`` with its time counted as host (framework) time."""
        if self._depth != 1 or threading.get_ident() != self.main_ident:
            return fn(*a, **kw)
        self.leave()
        try:
            return fn(*a, **kw)
        finally:
            self.enter()

    def modeled(self, host_ns: int, fn: Callable, *a, **kw):
        """Run ``fn`` (an operator on meta tensors) outside the measured time and charge the
        modeled host cost of that operator on a real GPU instead."""
        out = fn(*a, **kw)
        self.now += host_ns
        return out

    # -- op emission ----------------------------------------------------------------------
    def _add(self, op: _Op) -> int:
        op.opt_step = self.opt_steps
        op.explicit_step = self.explicit_step
        self.ops.append(op)
        return len(self.ops) - 1

    def host(self, kind: OpKind, name: str, dur: int, gap_name: str | None = None) -> int:
        """A host op at the current virtual time (after an explicit cpu op for any gap)."""
        if self.now > self.host_end:
            self._host_raw(OpKind.CPU, gap_name or self.cpu_op_name, self.host_end, self.now - self.host_end)
        idx = self._host_raw(kind, name, self.now, dur)
        self.now = self.host_end = self.now + dur
        return idx

    def _host_raw(self, kind, name, start, dur) -> int:
        op = _Op(kind, name, start, max(0, int(dur)), thread=self.thread)
        if self.last_host is not None:
            op.deps.append((self.last_host, DepKind.PROGRAM))
        idx = self._add(op)
        self.last_host = idx
        self.host_end = start + op.dur
        return idx

    def stream_id(self, stream=None) -> int:
        if stream is None:
            stream = self.current_stream
        if stream is None:
            return DEFAULT_STREAM
        return getattr(stream, "stream_id", DEFAULT_STREAM)

    def new_stream_id(self) -> int:
        self._next_stream += 1
        return self._next_stream

    def gpu(self, kind: OpKind, name: str, dur: int, launch: int, *, stream: int | None = None,
            nbytes: int = 0, copy_dir: CopyDir = CopyDir.NONE, host_mem: HostMem = HostMem.NONE) -> int:
        s = self.stream_id() if stream is None else stream
        lop = self.ops[launch]
        start = max(lop.end + self.spec.launch_latency_ns, self.stream_free.get(s, 0), self.stream_ready.pop(s, 0))
        op = _Op(kind, name, start, max(1, int(dur)), stream=s, bytes=int(nbytes), copy_dir=copy_dir,
                 host_mem=host_mem, correlation=lop.correlation)
        op.deps.append((launch, DepKind.LAUNCH))
        if s in self.stream_last:
            op.deps.append((self.stream_last[s], DepKind.STREAM))
        for ev_op in self.stream_pending_events.pop(s, []):
            op.deps.append((ev_op, DepKind.EVENT))
        idx = self._add(op)
        self.stream_free[s] = op.end
        self.stream_last[s] = idx
        self.gpu_ops += 1
        return idx

    def runtime(self, name: str, dur: int, gap_name: str | None = None) -> int:
        idx = self.host(OpKind.RUNTIME, name, dur, gap_name)
        self.correlation += 1
        self.ops[idx].correlation = self.correlation
        return idx

    def sync(self, name: str, waits: list[int]) -> int:
        """A host op that blocks until the GPU ops ``waits`` have finished."""
        waits = [w for w in waits if w is not None]
        end = max([self.ops[w].end for w in waits], default=0)
        dur = max(self.spec.sync_call_ns, end - self.now)
        idx = self.host(OpKind.SYNC, name, dur)
        self.ops[idx].deps.extend((w, DepKind.SYNC) for w in waits)
        return idx

    # -- composite actions ----------------------------------------------------------------
    def launch_kernels(self, op_name: str, kernels: list[costmodel.KernelCost], label: str) -> None:
        for kc in kernels:
            rt = self.runtime("cudaLaunchKernel", self.spec.launch_kernel_ns, gap_name=op_name)
            self.gpu(OpKind.KERNEL, label, kc.dur_ns, rt)

    def memcpy(self, direction: CopyDir, nbytes: int, pinned: bool, non_blocking: bool, op_name: str) -> int:
        """cudaMemcpyAsync (+ the synchronisation PyTorch adds when it is blocking)."""
        spec = self.spec
        if direction == CopyDir.D2D:
            dur = costmodel.d2d_ns(nbytes, spec)
            mem = HostMem.NONE
            label = "Memcpy DtoD (Device -> Device)"
        else:
            dur = costmodel.h2d_d2h_ns(nbytes, pinned, spec)
            mem = HostMem.PINNED if pinned else HostMem.PAGEABLE
            kind = "Pinned" if pinned else "Pageable"
            label = ("Memcpy HtoD (%s -> Device)" if direction == CopyDir.H2D else "Memcpy DtoH (Device -> %s)") % kind
        rt = self.runtime("cudaMemcpyAsync", spec.memcpy_call_ns, gap_name=op_name)
        g = self.gpu(OpKind.MEMCPY, label, dur, rt, nbytes=nbytes, copy_dir=direction, host_mem=mem)
        if direction == CopyDir.D2D:
            return g
        if not pinned and (direction == CopyDir.D2H or non_blocking):
            # the driver stages pageable memory: the call itself returns only when the copy is done
            self.sync("cudaMemcpyAsync", [g])
        elif not non_blocking:
            self.sync("cudaStreamSynchronize", [g])
        return g

    def memset(self, nbytes: int, op_name: str) -> int:
        rt = self.runtime("cudaMemsetAsync", self.spec.memset_call_ns, gap_name=op_name)
        return self.gpu(OpKind.MEMSET, "Memset (Device)", costmodel.memset_ns(nbytes, self.spec), rt, nbytes=nbytes)

    def stream_sync(self, stream_id: int | None = None):
        self.enter()
        try:
            s = self.stream_id() if stream_id is None else stream_id
            self.sync("cudaStreamSynchronize", [self.stream_last.get(s)])
        finally:
            self.leave()

    def device_sync(self):
        self.enter()
        try:
            self.sync("cudaDeviceSynchronize", list(self.stream_last.values()))
        finally:
            self.leave()

    def event_record(self, ev: EmuEvent, stream=None):
        self.enter()
        try:
            s = self.stream_id(stream)
            self.runtime("cudaEventRecord", self.spec.event_call_ns)
            ev.op = self.stream_last.get(s)
            ev.time = max(self.stream_free.get(s, 0), self.now)
        finally:
            self.leave()

    def stream_wait_event(self, stream, ev: EmuEvent):
        self.enter()
        try:
            s = self.stream_id(stream)
            self.runtime("cudaStreamWaitEvent", self.spec.event_call_ns)
            if ev.op is not None:
                self.stream_pending_events.setdefault(s, []).append(ev.op)
            if ev.time is not None:
                self.stream_ready[s] = max(self.stream_ready.get(s, 0), ev.time)
        finally:
            self.leave()

    def event_sync(self, ev: EmuEvent):
        self.enter()
        try:
            self.sync("cudaEventSynchronize", [ev.op])
        finally:
            self.leave()

    def optimizer_step_done(self, *_a, **_kw):
        self.opt_steps += 1

    def explicit_step_boundary(self):
        """``torch.profiler.profile.step()`` in the script: a new ProfilerStep begins."""
        self.saw_explicit_step = True
        self.explicit_step = self.explicit_step + 1 if self.explicit_step >= 0 else 0


# ----------------------------------------------------------------------------- helpers

def _is_cuda_device(d) -> bool:
    if isinstance(d, torch.device):
        return d.type == "cuda"
    if isinstance(d, str):
        return d == "cuda" or d.startswith("cuda:")
    return False


def _map_device(d):
    return META if _is_cuda_device(d) else d


def _info(t: torch.Tensor) -> TensorInfo:
    return TensorInfo(tuple(t.shape), str(t.dtype).replace("torch.", ""), bool(t.is_contiguous()))


def _is_emu(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_meta


def _pinned(t: torch.Tensor) -> bool:
    while t is not None:
        if getattr(t, "_fastrack_pinned", False):
            return True
        t = t._base
    return False


def _mark_pinned(t):
    if isinstance(t, torch.Tensor):
        t._fastrack_pinned = True
    return t


def _default_read(dtype: torch.dtype, produced_by_all: bool = False):
    if dtype == torch.bool:
        return READ_ALL if produced_by_all else READ_BOOL
    if dtype.is_floating_point or dtype.is_complex:
        return READ_FLOAT
    return READ_INT


# ----------------------------------------------------------------------------- torch-function layer

_DEVICE_GET = torch._C.TensorBase.device.__get__
_IS_CUDA_GET = torch._C.TensorBase.is_cuda.__get__
_DATA_FACTORIES = {torch.tensor, torch.as_tensor, torch.asarray}
_CUDA_DEV = torch.device("cuda", 0)

# autocast("cuda") lists (subset of ATen's autocast_mode.cpp, at the functional level)
_AUTOCAST_LOW = {
    torch.nn.functional.linear, torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.__rmatmul__,
    torch.mm, torch.Tensor.mm, torch.bmm, torch.Tensor.bmm, torch.addmm, torch.Tensor.addmm, torch.baddbmm,
    torch.Tensor.baddbmm, torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d,
    torch.nn.functional.scaled_dot_product_attention, torch.einsum,
}
_AUTOCAST_FP32 = {
    torch.nn.functional.softmax, torch.softmax, torch.Tensor.softmax, torch.nn.functional.log_softmax,
    torch.log_softmax, torch.Tensor.log_softmax, torch.nn.functional.cross_entropy, torch.nn.functional.nll_loss,
    torch.nn.functional.layer_norm, torch.layer_norm, torch.nn.functional.group_norm, torch.nn.functional.mse_loss,
    torch.nn.functional.binary_cross_entropy_with_logits, torch.exp, torch.Tensor.exp, torch.log, torch.Tensor.log,
    torch.pow, torch.Tensor.pow, torch.rsqrt, torch.Tensor.rsqrt, torch.sum, torch.Tensor.sum, torch.cumsum,
    torch.Tensor.cumsum, torch.nn.functional.softplus, torch.nn.functional.l1_loss, torch.logsumexp,
    torch.nn.functional.kl_div, torch.nn.functional.smooth_l1_loss, torch.norm, torch.Tensor.norm,
}


_SDPA = torch.nn.functional.scaled_dot_product_attention
_SDP_FLASH, _SDP_EFFICIENT, _SDP_MATH = 1, 2, 0


def _sdp_choice(q, k, mask) -> int:
    """The SDPA backend PyTorch picks on an H100 (flash for fp16/bf16 without a mask, else
    memory-efficient), honouring torch.backends.cuda.*_sdp_enabled()."""
    b = torch.backends.cuda
    half = q.dtype in (torch.float16, torch.bfloat16)
    same_heads = q.shape[1] == k.shape[1]
    hd = q.shape[-1]
    if b.flash_sdp_enabled() and half and mask is None and hd % 8 == 0 and hd <= 256 and same_heads:
        return _SDP_FLASH
    if b.mem_efficient_sdp_enabled() and same_heads and hd % 8 == 0:
        return _SDP_EFFICIENT
    return _SDP_MATH


class _FunctionMode(TorchFunctionMode):
    def __init__(self, rec: Recorder):
        super().__init__()
        self.rec = rec
        self.cast_cache: dict[int, tuple[weakref.ref, torch.Tensor]] = {}

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        rec = self.rec
        if func is _DEVICE_GET or func == _DEVICE_GET:
            t = args[0]
            return _CUDA_DEV if t.is_meta else func(*args)
        if func is _IS_CUDA_GET or func == _IS_CUDA_GET:
            return True if args[0].is_meta else func(*args)
        rec.enter()
        try:
            return self._handle(func, args, kwargs)
        finally:
            rec.leave()

    def _handle(self, func, args, kwargs):
        rec = self.rec
        if func is torch.Tensor.record_stream:
            return None
        if func is torch.Tensor.cuda:
            nb = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
            return rec.counted(args[0].to, META, non_blocking=nb)
        if func is torch.Tensor.to:
            args = tuple(_map_device(a) if i > 0 else a for i, a in enumerate(args))
            if len(args) > 1 and isinstance(args[1], int) and not isinstance(args[1], bool):
                args = (args[0], META) + args[2:]
        pin = kwargs.get("pin_memory")
        if "device" in kwargs:
            dev = kwargs["device"]
            if isinstance(dev, int) and not isinstance(dev, bool):
                dev = "cuda"
            if _is_cuda_device(dev):
                if func in _DATA_FACTORIES:
                    kw = dict(kwargs)
                    kw.pop("device")
                    cpu = rec.counted(func, *args, **kw)
                    return rec.counted(cpu.to, META)
                kwargs = dict(kwargs, device=META)
        if pin:
            kwargs = dict(kwargs)
            kwargs.pop("pin_memory")
            return _mark_pinned(rec.counted(func, *args, **kwargs))
        if (func in _AUTOCAST_LOW or func in _AUTOCAST_FP32) and torch.is_autocast_enabled("cuda"):
            args, kwargs = self._autocast(func, args, kwargs)
            with _autocast_off():
                if func is _SDPA:
                    return self._sdpa(args, kwargs)
                return rec.counted(func, *args, **kwargs)
        if func is _SDPA:
            return self._sdpa(args, kwargs)
        return rec.counted(func, *args, **kwargs)

    def _sdpa(self, args, kwargs):
        """scaled_dot_product_attention on emulated tensors: pick the fused kernel CUDA would pick
        (the meta device always takes the math path) and call it directly."""
        names = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]
        d = dict(zip(names, args))
        d.update(kwargs)
        q, k, v = d["query"], d["key"], d["value"]
        mask = d.get("attn_mask")
        if not (isinstance(q, torch.Tensor) and q.is_meta and q.dim() == 4 and k.dim() == 4):
            return self.rec.counted(_SDPA, *args, **kwargs)
        choice = _sdp_choice(q, k, mask)
        dropout, causal, scale = float(d.get("dropout_p") or 0.0), bool(d.get("is_causal") or False), d.get("scale")
        if choice == _SDP_FLASH:
            out = self.rec.counted(aten._scaled_dot_product_flash_attention, q, k, v, dropout, causal, False,
                                   scale=scale)
            return out[0]
        if choice == _SDP_EFFICIENT:
            if mask is not None and mask.dtype == torch.bool:
                mask = torch.zeros(mask.shape, dtype=q.dtype, device=META)
            need_lse = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
            out = self.rec.counted(aten._scaled_dot_product_efficient_attention, q, k, v, mask, need_lse, dropout,
                                   causal, scale=scale)
            return out[0]
        return self.rec.counted(_SDPA, *args, **kwargs)

    def _autocast(self, func, args, kwargs):
        low = func in _AUTOCAST_LOW
        target = torch.get_autocast_dtype("cuda") if low else torch.float32

        def cast(t):
            if not (isinstance(t, torch.Tensor) and t.is_meta and t.is_floating_point()):
                return t
            if t.dtype == target or t.dtype == torch.float64:
                return t
            if low and t.is_leaf and t.requires_grad:  # autocast caches casts of weights
                hit = self.cast_cache.get(id(t))
                if hit is not None and hit[0]() is t:
                    return hit[1]
                out = t.to(target)
                self.cast_cache[id(t)] = (weakref.ref(t), out)
                return out
            return t.to(target)

        if func is torch.nn.functional.cross_entropy or func is torch.nn.functional.nll_loss:
            return (cast(args[0]),) + tuple(args[1:]), kwargs
        return tree_map(cast, args), tree_map(cast, kwargs)


@contextlib.contextmanager
def _autocast_off():
    prev = torch.is_autocast_enabled("cuda")
    torch.set_autocast_enabled("cuda", False)
    try:
        yield
    finally:
        torch.set_autocast_enabled("cuda", prev)


# ----------------------------------------------------------------------------- dispatch layer

_NO_KERNEL = {
    aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default, aten.new_empty.default,
    aten.new_empty_strided.default, aten.resize_.default, aten.set_.source_Storage_storage_offset,
    aten.lift_fresh.default, aten.record_stream.default, aten.is_pinned.default, aten.is_same_size.default,
    aten._has_compatible_shallow_copy_type.default, aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default,
    aten.sym_storage_offset.default, aten.set_.source_Tensor, aten.set_.default,
}
_DATA_DEPENDENT = {aten.nonzero.default, aten.masked_select.default}


class _DispatchMode(TorchDispatchMode):
    def __init__(self, rec: Recorder):
        super().__init__()
        self.rec = rec
        self.all_results: dict[int, weakref.ref] = {}
        self._views: dict[Any, bool] = {}
        self._argnames: dict[Any, list[str]] = {}

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        if threading.get_ident() != self.rec.main_ident:
            return func(*args, **kwargs)
        self.rec.enter()
        try:
            return self._handle(func, args, kwargs)
        finally:
            self.rec.leave()

    # ------------------------------------------------------------------------------------
    def _handle(self, func, args, kwargs):
        rec = self.rec
        ns = func.namespace
        if ns == "profiler":
            return self._profiler_op(func, args, kwargs)
        flat, _ = tree_flatten((args, kwargs))
        emu = [a for a in flat if _is_emu(a)]
        dev = kwargs.get("device")
        on_gpu = bool(emu) or (dev is not None and torch.device(dev).type == "meta")
        if not on_gpu:  # the script's own CPU tensor work: measured
            return rec.counted(func, *args, **kwargs)
        if func is aten._local_scalar_dense.default or func is aten.item.default:
            return self._read_scalar(args[0])
        if func is aten.is_nonzero.default:
            return bool(self._read_scalar(args[0]))
        if func is aten._to_copy.default:
            return self._to_copy(func, args, kwargs)
        if func is aten.copy_.default:
            return self._copy_(func, args, kwargs)
        # CPU tensors used by a GPU op: 0-d ones are scalars; others are copied to the device first
        if any(isinstance(a, torch.Tensor) and not a.is_meta and a.dim() > 0 for a in flat):
            args, kwargs = self._upload_cpu_tensors(args, kwargs, func)
        if func in _NO_KERNEL:
            return rec.modeled(rec.spec.aten_view_host_ns, func, *args, **kwargs)
        if self._is_view(func):
            # 'may alias' ops (view, reshape, contiguous, to): a kernel only when they copied
            out = func(*args, **kwargs)
            if _aliases_input(out, flat):
                rec.now += rec.spec.aten_view_host_ns
            else:
                rec.now += rec.spec.aten_op_host_ns
                self._price(func, args, kwargs, out)
            return out
        if func in _DATA_DEPENDENT:
            return self._data_dependent(func, args, kwargs)
        try:
            out = rec.modeled(rec.spec.aten_op_host_ns, func, *args, **kwargs)
        except (RuntimeError, NotImplementedError) as exc:
            out = self._fallback(func, args, kwargs, exc)
        self._price(func, args, kwargs, out)
        if func.overloadpacket in (aten.all,) and isinstance(out, torch.Tensor):
            self.all_results[id(out)] = weakref.ref(out)
        return out

    def _is_view(self, func) -> bool:
        v = self._views.get(func)
        if v is None:
            rets = func._schema.returns
            v = bool(rets) and all(r.alias_info is not None and not r.alias_info.is_write for r in rets)
            v = v or func.is_view
            self._views[func] = v
        return v

    def _named_args(self, func, args, kwargs) -> dict:
        names = self._argnames.get(func)
        if names is None:
            names = [a.name for a in func._schema.arguments]
            self._argnames[func] = names
        d = dict(zip(names, args))
        d.update(kwargs)
        return d

    def _price(self, func, args, kwargs, out):
        rec = self.rec
        name = func._schema.name
        flat_in, _ = tree_flatten((args, kwargs))
        ins = [_info(a) for a in flat_in if isinstance(a, torch.Tensor)]
        flat_out, _ = tree_flatten(out)
        outs = [_info(o) for o in flat_out if isinstance(o, torch.Tensor)]
        named = self._named_args(func, args, kwargs)
        extra = {k: named[k] for k in ("is_causal", "groups", "output_mask") if k in named}
        if name.startswith("aten::_foreach_") or name.startswith("aten::_fused_"):
            extra["tensor_lists"] = [[_info(t) for t in a] for a in args
                                     if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)]
        # positional ins for gemm ops: keep optional None slots so bias/a/b positions line up
        pos_ins = [(_info(a) if isinstance(a, torch.Tensor) else None) for a in args if isinstance(a, torch.Tensor) or a is None]
        tf32 = torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest"
        kernels = costmodel.price_op(name, pos_ins if costmodel.op_family(name) == "gemm" else ins, outs, rec.spec,
                                     args=extra, tf32=tf32, cudnn_tf32=torch.backends.cudnn.allow_tf32)
        label = _label(name, ins)
        rec.launch_kernels(name, kernels, label)

    # -- transfers and reads ----------------------------------------------------------------
    def _to_copy(self, func, args, kwargs):
        rec = self.rec
        src = args[0]
        dev = kwargs.get("device")
        dst_meta = dev is not None and torch.device(dev).type == "meta"
        if not src.is_meta and dst_meta:  # H2D
            out = rec.modeled(rec.spec.aten_op_host_ns, func, *args, **kwargs)
            nb = bool(kwargs.get("non_blocking", False))
            rec.memcpy(CopyDir.H2D, src.numel() * src.element_size(), _pinned(src), nb, "aten::_to_copy")
            return out
        if src.is_meta and dev is not None and torch.device(dev).type == "cpu":  # D2H
            dtype = kwargs.get("dtype") or src.dtype
            nb = bool(kwargs.get("non_blocking", False))
            pinned = bool(kwargs.get("pin_memory", False))
            rec.memcpy(CopyDir.D2H, src.numel() * src.element_size(), pinned, nb, "aten::_to_copy")
            out = torch.full(tuple(src.shape), self._read_value(src, dtype), dtype=dtype)
            return _mark_pinned(out) if pinned else out
        out = rec.modeled(rec.spec.aten_op_host_ns, func, *args, **kwargs)
        if src.is_meta and isinstance(out, torch.Tensor) and out.is_meta and out.dtype != src.dtype:
            self._price(func, args, kwargs, out)
        elif src.is_meta and isinstance(out, torch.Tensor) and out is not src:
            rec.memcpy(CopyDir.D2D, src.numel() * src.element_size(), False, True, "aten::_to_copy")
        return out

    def _copy_(self, func, args, kwargs):
        rec = self.rec
        dst, src = args[0], args[1]
        nb = bool(args[2] if len(args) > 2 else kwargs.get("non_blocking", False))
        if dst.is_meta and not src.is_meta:
            rec.memcpy(CopyDir.H2D, src.numel() * src.element_size(), _pinned(src), nb, "aten::copy_")
            return dst
        if not dst.is_meta and src.is_meta:
            rec.memcpy(CopyDir.D2H, src.numel() * src.element_size(), _pinned(dst), nb, "aten::copy_")
            dst.fill_(self._read_value(src, dst.dtype))
            return dst
        out = rec.modeled(rec.spec.aten_op_host_ns, func, *args, **kwargs)
        if (dst.dtype == src.dtype and dst.is_contiguous() and src.is_contiguous()
                and tuple(dst.shape) == tuple(src.shape)):
            rec.memcpy(CopyDir.D2D, src.numel() * src.element_size(), False, True, "aten::copy_")
        else:
            self._price(func, args, kwargs, out)
        return out

    def _read_value(self, t: torch.Tensor, dtype: torch.dtype):
        ref = self.all_results.get(id(t))
        return _default_read(dtype, produced_by_all=ref is not None and ref() is t)

    def _read_scalar(self, t: torch.Tensor):
        # PyTorch copies a scalar read into a pinned staging buffer, then synchronises the stream
        self.rec.memcpy(CopyDir.D2H, t.element_size(), True, False, "aten::_local_scalar_dense")
        v = self._read_value(t, t.dtype)
        if t.dtype == torch.bool:
            return bool(v)
        if t.dtype.is_floating_point:
            return float(v)
        return int(v)

    def _upload_cpu_tensors(self, args, kwargs, func):
        rec = self.rec

        def up(a):
            if isinstance(a, torch.Tensor) and not a.is_meta and a.dim() > 0:
                rec.memcpy(CopyDir.H2D, a.numel() * a.element_size(), _pinned(a), True, func._schema.name)
                return a.to(META)
            return a

        return tree_map(up, args), tree_map(up, kwargs)

    # -- special operators ----------------------------------------------------------------
    def _profiler_op(self, func, args, kwargs):
        rec = self.rec
        name = func._schema.name
        if "record_function_enter" in name:
            handle = func(*args, **kwargs)
            m = _STEP_RE.match(str(args[0]) if args else "")
            if m:
                rec.saw_explicit_step = True
                rec.step_stack.append((handle, rec.explicit_step))
                rec.explicit_step = int(m.group(1))
            return handle
        if "record_function_exit" in name:
            if rec.step_stack and args and rec.step_stack[-1][0] is args[0]:
                rec.explicit_step = rec.step_stack.pop()[1]
            return func(*args, **kwargs)
        return func(*args, **kwargs)

    def _data_dependent(self, func, args, kwargs):
        """Data-dependent output sizes: assume every element is selected (see docs/capture.md)."""
        rec = self.rec
        x = args[0]
        if func is aten.nonzero.default:
            out = torch.empty((x.numel(), x.dim()), dtype=torch.long, device=META)
        else:  # masked_select
            shape = torch.broadcast_shapes(tuple(x.shape), tuple(args[1].shape))
            out = torch.empty((math.prod(shape),), dtype=x.dtype, device=META)
        self._price(func, args, kwargs, out)
        rec.memcpy(CopyDir.D2H, 8, False, False, func._schema.name)  # the size read back
        return out

    def _fallback(self, func, args, kwargs, exc):
        """Boolean-mask indexing on meta tensors: treat every mask element as selected."""
        if func is aten.index.Tensor:
            idx = []
            for i in args[1]:
                if isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8):
                    n = i.numel()
                    idx.extend(torch.empty((n,), dtype=torch.long, device=META) for _ in range(i.dim()))
                else:
                    idx.append(i)
            self.rec.memcpy(CopyDir.D2H, 8, False, False, "aten::nonzero")
            return func(args[0], idx)
        raise exc


def _aliases_input(out, flat_inputs) -> bool:
    storages = {a.untyped_storage()._cdata for a in flat_inputs if isinstance(a, torch.Tensor)}
    outs, _ = tree_flatten(out)
    return all(o.untyped_storage()._cdata in storages for o in outs if isinstance(o, torch.Tensor))


def _label(name: str, ins: list[TensorInfo]) -> str:
    shapes = ", ".join("x".join(str(d) for d in t.shape) or "scalar" for t in ins[:3])
    dtype = ins[0].dtype if ins else ""
    return f"{name} [{shapes}] {dtype}".rstrip()


# ----------------------------------------------------------------------------- torch.cuda & co.

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
        rec = _active()
        rec.saw_explicit_step = True
        rec.explicit_step = self.step_num

    def stop(self):
        _active().explicit_step = -1

    def step(self):
        self.step_num += 1
        _active().explicit_step_boundary()

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
        "memory_stats": lambda *a, **k: {},
        "memory_summary": lambda *a, **k: "(emulated GPU: no allocations)",
        "mem_get_info": lambda *a, **k: (spec.total_memory_bytes, spec.total_memory_bytes),
        "utilization": zero,
    }
    for attr, val in patches.items():
        patch(cuda, attr, _fresh(val))
    for mod_attr, val in (("memory_allocated", zero), ("max_memory_allocated", zero), ("memory_reserved", zero),
                          ("max_memory_reserved", zero), ("empty_cache", none),
                          ("reset_peak_memory_stats", none), ("mem_get_info", patches["mem_get_info"])):
        if hasattr(cuda, "memory"):
            patch(cuda.memory, mod_attr, _fresh(val))
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
    orig_is_pinned = torch.Tensor.is_pinned

    def pin_memory(self, device=None):
        if self.is_meta:
            return orig_pin(self)
        return _mark_pinned(self.clone())

    def is_pinned(self, device=None):
        return _pinned(self) if not self.is_meta else False

    patch(torch.Tensor, "pin_memory", pin_memory)
    patch(torch.Tensor, "is_pinned", is_pinned)
    orig_clear = torch.clear_autocast_cache
    fmode_ref: list = []

    def clear_autocast_cache():
        orig_clear()
        for m in fmode_ref:
            m.cast_cache.clear()

    patch(torch, "clear_autocast_cache", clear_autocast_cache)

    def compile_(model=None, *a, **k):
        if model is None:
            return lambda m: m
        return model

    patch(torch, "compile", compile_)
    import torch.profiler as tprof

    patch(tprof, "profile", _ProfilerStub)
    patch(torch.autograd.profiler, "profile", _ProfilerStub)
    from torch.optim.optimizer import register_optimizer_step_post_hook

    hook = register_optimizer_step_post_hook(rec.optimizer_step_done)
    _ACTIVE.append(rec)
    try:
        yield fmode_ref
    finally:
        _ACTIVE.remove(rec)
        hook.remove()
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


def preload():
    """Import what torch imports lazily, before the patches and the clock start."""
    import torch._dynamo  # noqa: F401  (imported by nn.Module construction otherwise)


def calibrate(rec: Recorder, fmode, dmode, n: int = 300) -> int:
    """The time one interception costs (Python mode entry/exit around the handlers, which the
    handlers cannot time themselves), in ns: ``t.view(-1)`` on a meta tensor timed with and
    without the modes; the virtual time it advances beyond the plain call is overhead.
    Nothing is recorded (the recorder's state is restored)."""
    t = torch.empty(8, device=META)
    for _ in range(20):
        t.view(-1)
    t0 = time.perf_counter_ns()
    for _ in range(n):
        t.view(-1)
    plain = (time.perf_counter_ns() - t0) / n
    saved = (rec.now, rec._resume, rec.host_end)
    with fmode, dmode:
        rec._resume = time.perf_counter_ns()
        start = rec.now
        for _ in range(n):
            t.view(-1)
        rec.enter()
        rec.leave()
        adv = (rec.now - start) / n
    rec.now, rec._resume, rec.host_end = saved
    # one view = 2 interceptions (function + dispatch) + the modeled view cost + the plain call
    return max(0, int((adv - rec.spec.aten_view_host_ns - plain) / 2))


@contextlib.contextmanager
def emulated_gpu(rec: Recorder):
    """Everything at once: patches, the function mode and the dispatch mode."""
    preload()
    with patched_torch(rec) as fmode_ref, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*meta.*")
        fmode = _FunctionMode(rec)
        fmode_ref.append(fmode)
        dmode = _DispatchMode(rec)
        rec.intercept_ns = calibrate(rec, fmode, dmode)
        rec._resume = time.perf_counter_ns()
        with fmode, dmode:
            yield rec
