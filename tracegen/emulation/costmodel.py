"""Per-operator cost model of an NVIDIA GPU for emulated capture (``tracegen capture --emulate``).

Every GPU operation the emulator sees (an ATen operator on an emulated CUDA tensor) is priced
here: FLOPs and bytes come from the operand shapes and dtypes, the duration from a roofline with
an efficiency factor per operator family plus a fixed floor per kernel. Every constant is a named
field of :class:`GpuSpec` with its unit in the name; ``docs/emulation.md`` lists each with its
source or says that it is an assumption.

The machine's facts (SMs, peaks, HBM, copy rates, runtime call costs, host CPU speed) are not
defined here: :func:`get_spec` builds a :class:`GpuSpec` from a preset of the machine description
(``fastrack_core.machine``, docs/machine.md), the same file the replay's hardware model reads.
What this module defines are the cost model's calibration factors (efficiencies, floors, tiles,
framework costs), which a preset may override in its ``[costmodel]`` table.

This module does not import torch: operands are described by :class:`TensorInfo`, so the model
can be tested and used (e.g. by ``benchmarks/validation/capture_accuracy.py``) on its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Sequence

from fastrack_core.errors import ConfigError

FAMILIES = ("gemm", "attention", "elementwise", "reduction", "memcpy", "memset", "other")


@dataclass(frozen=True)
class GpuSpec:
    """Parameters of one GPU model. Units are in the names (tflops = 1e12 FLOP/s, gb_s = 1e9 B/s).

    The fields without a default are the machine's facts, read from a preset
    (:data:`MACHINE_FACTS` names the table and key of each); the fields with a default are the
    cost model's calibration (a preset's ``[costmodel]`` table may override them)."""

    name: str  # the preset's name
    gpu_name: str  # as torch.cuda.get_device_name() reports it
    sms: int  # streaming multiprocessors
    total_memory_bytes: int
    # Dense tensor-core / vector peaks (dense = without sparsity)
    bf16_dense_tflops: float
    fp8_dense_tflops: float
    tf32_dense_tflops: float
    fp32_tflops: float  # non-tensor-core FP32
    fp64_tflops: float  # FP64 tensor core
    hbm_gb_s: float
    boost_clock_mhz: int  # informational: the peaks include it
    # Host <-> device copies: pinned copies at the link's achieved rate per direction, pageable
    # copies at the host's staging copy (the replay's host.staging_copy_gb_s: one parameter)
    pcie_h2d_gb_s: float
    pcie_d2h_gb_s: float
    pcie_pageable_gb_s: float
    pcie_latency_ns: int
    # CUDA runtime calls on the host (modelled host time, tracegen.emulation.hosttime)
    launch_kernel_ns: int  # per cudaLaunchKernel call
    memcpy_call_ns: int  # per cudaMemcpyAsync call (excluding any wait)
    memset_call_ns: int  # per cudaMemsetAsync call
    sync_return_ns: int
    """ns from the end of the GPU work a synchronise call waits for (or from the call's start when
    nothing is pending) to the call's return."""
    event_call_ns: int  # per cudaEventRecord / cudaStreamWaitEvent call
    launch_latency_ns: int  # from the end of a launch call to the earliest GPU start
    host_cpu_speed: float
    """Python speed of the target GPU server's host CPU relative to the reference host (2 = runs
    the script's Python in half the time): the preset's ``[host_cpu] speed_ratio``."""
    # ---- calibration of the cost model (docs/emulation.md gives the source of each)
    # Efficiencies (fraction of the peak reached by a large, well-shaped kernel)
    gemm_efficiency: float = 0.80
    conv_efficiency: float = 0.60
    gemm_tile_m: int = 128
    gemm_tile_n: int = 128
    gemm_misaligned_factor: float = 0.35
    attention_max_efficiency: float = 0.33
    attention_half_seq: float = 1024.0
    attention_bwd_flop_factor: float = 2.5
    attention_bwd_efficiency_factor: float = 0.8
    mem_efficient_attention_factor: float = 0.7
    attention_memory_efficiency: float = 0.70
    """Fraction of the HBM bandwidth a fused attention kernel reaches where it is memory bound
    (decode: one query row per sequence, every key/value byte read once): the kernel takes the
    larger of its compute time and its bytes (Q, the keys/values it reads, O) at this fraction of
    ``hbm_gb_s``. Assumption: paged/split-KV decode kernels (FlashDecoding, FlashInfer, vLLM's)
    are reported at most of the peak bandwidth at long contexts; 0.70 is a round, conservative
    figure, not fitted to a trace."""
    elementwise_efficiency: float = 0.85
    strided_efficiency: float = 0.45
    reduction_efficiency: float = 0.75
    other_efficiency: float = 0.45
    # Fixed time per kernel (launch-to-completion of a tiny kernel on the GPU), ns
    elementwise_floor_ns: int = 1500
    reduction_floor_ns: int = 3000
    gemm_floor_ns: int = 3500
    attention_floor_ns: int = 3500
    other_floor_ns: int = 3000
    memset_floor_ns: int = 1000
    d2d_floor_ns: int = 1500
    # multi_tensor_apply (foreach / fused optimizers): tensors per launch, blocks per launch
    foreach_tensors_per_launch: int = 110
    foreach_chunk_elems: int = 65536
    foreach_blocks_per_launch: int = 320
    # ---- Framework host costs (modelled host time). Calibrated with `python
    # benchmarks/validation/host_calibration.py` on the real H100 Kineto traces in tests/data
    # (h100_bert_small_uncased = "BERT", h100_qwen1.5_0.5b_chat = "Qwen"); both were recorded
    # with record_shapes/profile_memory/with_stack/with_modules, so every figure includes the
    # profiler's own overhead (an upper bound for an unprofiled run). docs/emulation.md.
    aten_op_host_ns: int = 6100
    """ns of framework time (Python binding, dispatcher, shape checks, TensorIterator, caching
    allocator) per ATen operator that launches GPU work, besides the runtime calls; also charged
    per ATen operator on CPU tensors in modelled mode. The innermost ATen op around a launch call,
    minus the calls inside it: Qwen median 6.14 us (n=1030); BERT 19.84 us (n=61)."""
    aten_view_host_ns: int = 500
    """ns per ATen operator that launches nothing (view, reshape, allocation): leaf ATen ops
    without a runtime call, median 0.47 us (BERT, n=246) and 0.55 us (Qwen, n=1447)."""
    module_call_host_ns: int = 27000
    """ns of Python per nn.Module call (modelled mode): step host time outside every ATen op and
    runtime call, divided by the step's nn.Module calls: 26.8 us (BERT, 84 calls), 34.3 us (Qwen,
    316 calls); the smaller taken. Hugging Face modules; includes with_stack tracing overhead."""
    optimizer_step_host_ns: int = 20000
    """ns of Python per optimizer.step() call besides its ATen ops (modelled mode). Assumption:
    neither real trace has an optimizer step; of the order of a few module calls."""
    optimizer_param_host_ns: int = 1000
    """ns of Python per parameter with a gradient in optimizer.step() (modelled mode; the
    per-parameter state lookups and list building of _init_group). Assumption, not calibrated."""
    # Script host time (--host-time script, tracegen.emulation.scripttime): the script's Python,
    # measured as thread CPU time on the capture machine, is scaled by
    # (host_reference_loop_ns / this machine's calibration loop ns) / host_cpu_speed.
    host_reference_loop_ns: int = 563_000
    """ns of thread CPU time of one calibration run (tracegen.emulation.scripttime.calibration_loop,
    4 000 iterations, fastest of 15) on the reference host: the 2-core development VM ("Intel(R)
    Xeon(R) Processor", CPython 3.11.7, torch 2.13): 0.563-0.608 ms over twelve calibrations
    at load 3, the fastest taken (the VM when it is least disturbed). A fact of the machine the
    calibration ran on, not of the target: it stays here."""

    @property
    def per_sm_bf16_flops(self) -> float:
        return self.bf16_dense_tflops * 1e12 / self.sms

    def with_overrides(self, **kw) -> "GpuSpec":
        known = {f.name for f in fields(self)}
        bad = sorted(set(kw) - known)
        if bad:
            raise ConfigError(f"unknown cost-model parameter(s) {', '.join(bad)}")
        return replace(self, **kw)


# GpuSpec field <- (table, key) of the machine description (fastrack_core.machine): every fact
# of the machine is read from the preset, none is defined in this module.
MACHINE_FACTS: dict[str, tuple[str, str]] = {
    "gpu_name": ("compute", "gpu_name"),
    "sms": ("gpu", "sms"),
    "total_memory_bytes": ("compute", "memory_bytes"),
    "bf16_dense_tflops": ("compute", "bf16_dense_tflops"),
    "fp8_dense_tflops": ("compute", "fp8_dense_tflops"),
    "tf32_dense_tflops": ("compute", "tf32_dense_tflops"),
    "fp32_tflops": ("compute", "fp32_tflops"),
    "fp64_tflops": ("compute", "fp64_tflops"),
    "hbm_gb_s": ("compute", "hbm_gb_s"),
    "boost_clock_mhz": ("compute", "boost_clock_mhz"),
    "pcie_h2d_gb_s": ("pcie", "h2d_bandwidth_gb_s"),
    "pcie_d2h_gb_s": ("pcie", "d2h_bandwidth_gb_s"),
    "pcie_pageable_gb_s": ("host", "staging_copy_gb_s"),
    "pcie_latency_ns": ("pcie", "latency_ns"),
    "launch_kernel_ns": ("runtime", "launch_kernel_ns"),
    "memcpy_call_ns": ("runtime", "memcpy_call_ns"),
    "memset_call_ns": ("runtime", "memset_call_ns"),
    "sync_return_ns": ("runtime", "sync_return_ns"),
    "event_call_ns": ("runtime", "event_call_ns"),
    "launch_latency_ns": ("runtime", "launch_latency_ns"),
    "host_cpu_speed": ("host_cpu", "speed_ratio"),
}

DEFAULT_DEVICE = "h100-sxm"


def spec_from_machine(machine) -> GpuSpec:
    """The :class:`GpuSpec` of a :class:`fastrack_core.machine.Machine`: its facts, then the
    calibration defaults with the preset's ``[costmodel]`` overrides."""
    kw = {f: machine.fact(t, k) for f, (t, k) in MACHINE_FACTS.items()}
    calibration = {f.name: f for f in fields(GpuSpec) if f.name != "name" and f.name not in MACHINE_FACTS}
    for key, value in machine.costmodel.items():
        if key in MACHINE_FACTS:
            t, k = MACHINE_FACTS[key]
            raise ConfigError(f"[costmodel] {key}: a fact of the machine, set as [{t}] {k}", path=machine.path)
        f = calibration.get(key)
        if f is None:
            raise ConfigError(f"[costmodel] unknown cost-model parameter '{key[:60]}'; known: "
                              f"{', '.join(calibration)}", path=machine.path)
        if f.type in (int, "int") and not float(value).is_integer():
            raise ConfigError(f"[costmodel] {key}: expected an integer", path=machine.path)
        kw[key] = int(value) if f.type in (int, "int") else float(value)
    return GpuSpec(name=machine.name, **kw)


def get_spec(device: str = DEFAULT_DEVICE) -> GpuSpec:
    """The cost model of preset ``device`` (a name ``replay --preset`` takes, or a path to a
    preset file). An unknown name, or a preset without the compute half, is a ConfigError."""
    from fastrack_core.machine import load_machine

    return spec_from_machine(load_machine(device))


def device_names() -> list[str]:
    """Installed presets that have the compute half (the names ``--device`` offers)."""
    from fastrack_core.machine import has_compute_half, preset_names

    def ok(name: str) -> bool:
        try:
            return has_compute_half(name)
        except ConfigError:  # a broken file is reported when it is used, not while listing
            return False

    return [n for n in preset_names() if ok(n)]


_SHIPPED = {"H100_SXM": "h100-sxm", "H100_PCIE": "h100-pcie"}


def __getattr__(name: str):
    """``H100_SXM`` / ``H100_PCIE``: the shipped presets' specs, read on first use."""
    if name in _SHIPPED:
        spec = get_spec(_SHIPPED[name])
        globals()[name] = spec
        return spec
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------------------------- operands

_ITEMSIZE = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16,
}


@dataclass(frozen=True)
class TensorInfo:
    """What the cost model needs to know about one operand."""

    shape: tuple[int, ...]
    dtype: str  # torch dtype name without 'torch.' (e.g. 'bfloat16')
    contiguous: bool = True

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE.get(self.dtype, 4)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


@dataclass(frozen=True)
class KernelCost:
    """One modeled GPU kernel."""

    family: str
    dur_ns: int
    flops: float = 0.0
    bytes: float = 0.0


def _ns(seconds: float) -> int:
    return max(1, int(round(seconds * 1e9)))


# ----------------------------------------------------------------------------- primitives

def matmul_peak_flops(dtype: str, spec: GpuSpec, tf32: bool = False) -> float:
    """Peak FLOP/s of the unit a matmul in ``dtype`` runs on."""
    if dtype in ("bfloat16", "float16"):
        return spec.bf16_dense_tflops * 1e12
    if dtype.startswith("float8"):
        return spec.fp8_dense_tflops * 1e12
    if dtype == "float32":
        return (spec.tf32_dense_tflops if tf32 else spec.fp32_tflops) * 1e12
    if dtype == "float64":
        return spec.fp64_tflops * 1e12
    return spec.fp32_tflops * 1e12  # integer/complex matmuls: no tensor cores assumed


def gemm_ns(m: int, n: int, k: int, dtype: str, spec: GpuSpec, *, batch: int = 1, tf32: bool = False,
            efficiency: float | None = None, aligned: bool = True, out_itemsize: int | None = None) -> int:
    """Duration of one (batched) GEMM C[m,n] = A[m,k] @ B[k,n], ns.

    Wave-quantised roofline: the output is cut into ``gemm_tile_m x gemm_tile_n`` tiles, one tile
    per SM at a time; the compute time is the number of waves times the time of one tile at
    ``efficiency`` of the per-SM peak. Memory time is the operand bytes at HBM bandwidth. The
    kernel takes the larger of the two, plus ``gemm_floor_ns``.
    """
    m, n, k, batch = max(m, 1), max(n, 1), max(k, 1), max(batch, 1)
    eff = spec.gemm_efficiency if efficiency is None else efficiency
    if not aligned:
        eff *= spec.gemm_misaligned_factor
    peak = matmul_peak_flops(dtype, spec, tf32)
    per_sm = peak / spec.sms
    tiles = math.ceil(m / spec.gemm_tile_m) * math.ceil(n / spec.gemm_tile_n) * batch
    waves = math.ceil(tiles / spec.sms)
    tile_flops = 2.0 * min(m, spec.gemm_tile_m) * min(n, spec.gemm_tile_n) * k
    compute_s = waves * tile_flops / (per_sm * eff)
    isz = _ITEMSIZE.get(dtype, 4)
    osz = isz if out_itemsize is None else out_itemsize
    bytes_ = batch * (m * k * isz + k * n * isz + m * n * osz)
    memory_s = bytes_ / (spec.hbm_gb_s * 1e9 * spec.elementwise_efficiency)
    return spec.gemm_floor_ns + _ns(max(compute_s, memory_s))


def gemm_ideal_ns(m: int, n: int, k: int, dtype: str, spec: GpuSpec, efficiency: float | None = None) -> float:
    """The plain roofline 2mnk / (peak * efficiency), ns (no tiles, no floor): for checks by hand."""
    eff = spec.gemm_efficiency if efficiency is None else efficiency
    return 2.0 * m * n * k / (matmul_peak_flops(dtype, spec) * eff) * 1e9


def memory_ns(nbytes: float, efficiency: float, floor_ns: int, spec: GpuSpec) -> int:
    """A memory-bound kernel moving ``nbytes`` through HBM at ``efficiency`` of peak, plus a floor."""
    return floor_ns + _ns(nbytes / (spec.hbm_gb_s * 1e9 * efficiency))


def attention_efficiency(seq_k: int, spec: GpuSpec) -> float:
    """Fraction of the BF16 peak a FlashAttention-2 kernel reaches at key length ``seq_k``:
    ``attention_max_efficiency * S / (S + attention_half_seq)`` (short sequences are latency bound)."""
    return spec.attention_max_efficiency * seq_k / (seq_k + spec.attention_half_seq)


def attention_ns(b: int, h: int, sq: int, sk: int, d: int, dv: int, causal: bool, spec: GpuSpec,
                 *, backward: bool = False, mem_efficient: bool = False, dtype: str = "bfloat16",
                 nbytes: float = 0.0, pairs: float | None = None) -> tuple[int, float]:
    """Fused attention kernel time (ns) and FLOPs. Forward FLOPs = 2*b*h*sq*sk*(d+dv), halved when
    causal (``pairs``, when given, replaces b*sq*sk as the count of query-key pairs, causality
    included: variable-length batches); backward = ``attention_bwd_flop_factor`` times that. The
    kernel takes the larger of that compute time and ``nbytes`` (the bytes it reads and writes) at
    ``attention_memory_efficiency`` of HBM bandwidth (decode is memory bound)."""
    if pairs is None:
        flops = 2.0 * b * h * sq * sk * (d + dv)
        if causal:
            flops *= 0.5
    else:
        flops = 2.0 * h * pairs * (d + dv)
    eff = attention_efficiency(sk, spec)
    if backward:
        flops *= spec.attention_bwd_flop_factor
        eff *= spec.attention_bwd_efficiency_factor
    if mem_efficient or dtype == "float32":
        eff *= spec.mem_efficient_attention_factor
    peak = matmul_peak_flops("bfloat16" if dtype != "float32" else "float32", spec, tf32=True)
    memory_s = nbytes / (spec.hbm_gb_s * 1e9 * spec.attention_memory_efficiency)
    return spec.attention_floor_ns + _ns(max(flops / (peak * eff), memory_s)), flops


def h2d_d2h_ns(nbytes: int, pinned: bool, spec: GpuSpec, d2h: bool = False) -> int:
    """A host<->device copy: ``pcie_latency_ns`` + bytes at the link's rate in its direction
    (pinned), or at the slower of the host's staging copy and the link (pageable: the calling
    thread copies through the driver's pinned staging buffer with the DMA streaming behind it,
    as the replay's ``none`` protocol prices it; docs/machine.md)."""
    link = spec.pcie_d2h_gb_s if d2h else spec.pcie_h2d_gb_s
    bw = link if pinned else min(spec.pcie_pageable_gb_s, link)
    return spec.pcie_latency_ns + _ns(nbytes / (bw * 1e9))


def d2d_ns(nbytes: int, spec: GpuSpec) -> int:
    """Device-to-device memcpy: reads and writes ``nbytes``."""
    return memory_ns(2 * nbytes, spec.elementwise_efficiency, spec.d2d_floor_ns, spec)


def memset_ns(nbytes: int, spec: GpuSpec) -> int:
    return memory_ns(nbytes, spec.elementwise_efficiency, spec.memset_floor_ns, spec)


# ----------------------------------------------------------------------------- operator families

_GEMM_OPS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "addr", "dot", "vdot",
             "_scaled_mm", "_int_mm", "linear", "matmul", "_addmm_activation"}
_CONV_OPS = {"convolution", "_convolution", "cudnn_convolution", "convolution_backward",
             "cudnn_convolution_transpose", "conv2d", "conv1d", "conv3d"}
_ATTN_OPS = {"_varlen_attn", "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention", "_flash_attention_forward", "_efficient_attention_forward",
             "_scaled_dot_product_flash_attention_backward", "_scaled_dot_product_efficient_attention_backward",
             "_scaled_dot_product_cudnn_attention_backward", "_flash_attention_backward",
             "_efficient_attention_backward"}
_REDUCTION_OPS = {"sum", "mean", "amax", "amin", "max", "min", "var", "std", "var_mean", "std_mean", "norm",
                  "linalg_vector_norm", "prod", "argmax", "argmin", "all", "any", "_softmax", "_log_softmax",
                  "_softmax_backward_data", "_log_softmax_backward_data", "native_layer_norm",
                  "native_layer_norm_backward", "native_group_norm", "native_group_norm_backward",
                  "native_batch_norm", "native_batch_norm_backward", "_native_batch_norm_legit",
                  "_native_batch_norm_legit_no_training", "cudnn_batch_norm", "cudnn_batch_norm_backward",
                  "layer_norm", "group_norm", "batch_norm", "rms_norm", "softmax", "log_softmax",
                  "cross_entropy_loss", "nll_loss", "nll_loss_nd", "instance_norm",
                  "_batch_norm_with_update", "batch_norm_backward", "_fused_rms_norm", "_fused_rms_norm_backward",
                  "cumsum", "cumprod", "logsumexp", "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward",
                  "nll_loss2d_backward", "mse_loss", "mse_loss_backward", "count_nonzero", "aminmax",
                  "_fused_adam_", "_fused_adamw_", "batch_norm_stats", "batch_norm_elemt",
                  "batch_norm_gather_stats_with_counts", "batch_norm_backward_reduce", "batch_norm_backward_elemt",
                  "topk", "sort", "median", "mode", "kthvalue", "_cdist_forward", "nansum"}
_OTHER_OPS = {"embedding", "embedding_dense_backward", "index_select", "gather", "scatter", "scatter_",
              "scatter_add", "scatter_add_", "scatter_reduce", "index", "index_put_", "index_put",
              "_index_put_impl_", "index_add_", "index_add", "index_copy_", "nonzero", "masked_select",
              "masked_scatter_", "multinomial", "unique", "_unique2", "bincount", "searchsorted",
              "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d",
              "avg_pool2d_backward", "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward",
              "upsample_nearest2d", "upsample_bilinear2d", "grid_sampler_2d", "take", "put_", "randperm",
              "embedding_bag", "_embedding_bag"}
_RNN_OPS = {"_cudnn_rnn", "_cudnn_rnn_backward"}  # priced by rnn_kernels (family: gemm, their larger part)
_COPY_OPS = {"to", "_to_copy", "copy_", "clone", "contiguous", "type_as", "reshape", "flatten"}
_GATHER_OPS = {"embedding", "index_select", "gather", "index", "take", "embedding_bag", "_embedding_bag"}
# In-place indexed writes into a larger destination (a KV cache, an embedding table, a histogram):
# the CUDA kernels visit only the indexed rows/elements, so they are priced by the source/index
# sizes (indexed_write_bytes), never by the whole destination. Read-modify-write ones (accumulate)
# also read the rows they write. Out-of-place forms (index_copy, scatter, ...) write a whole new
# tensor and stay priced by all their operands.
_INDEXED_WRITE_OPS = {"index_copy_", "index_put_", "_index_put_impl_", "index_add_", "index_reduce_", "scatter_",
                      "scatter_add_", "scatter_reduce_", "put_"}
_ACCUMULATING_WRITES = {"index_add_", "index_reduce_", "scatter_add_", "scatter_reduce_"}
_MULTI_KERNEL = {  # kernels launched per call (beyond one), from the CUDA implementations
    "native_layer_norm_backward": 2,
    "_scaled_dot_product_flash_attention_backward": 3,
    "_flash_attention_backward": 3,
    "_scaled_dot_product_efficient_attention_backward": 2,
    "_efficient_attention_backward": 2,
    "embedding_dense_backward": 4,
    "nonzero": 2,
    "sort": 3,
    "unique": 4,
    "_unique2": 4,
    "native_group_norm_backward": 2,
    "cudnn_batch_norm_backward": 1,
}


def op_family(op: str) -> str:
    """Family of an ATen operator name ('aten::mm', 'mm' or 'aten.mm.default')."""
    base = _base(op)
    if base in _GEMM_OPS or base in _CONV_OPS or base in _RNN_OPS:
        return "gemm"
    if base in _ATTN_OPS:
        return "attention"
    if base in _REDUCTION_OPS:
        return "reduction"
    if base in _OTHER_OPS:
        return "other"
    if base.startswith("_foreach_"):
        return "elementwise"
    return "elementwise"


def _base(op: str) -> str:
    s = op.split("::")[-1]
    if s.startswith("aten."):
        s = s[5:]
    return s.split(".")[0]


def kernel_family(name: str) -> str:
    """Family of a real CUDA kernel name (as in Kineto/nsys traces) or of an emulated kernel name."""
    low = name.lower()
    if low.startswith("memcpy") or "memcpy" in low.split("(")[0]:
        return "memcpy"
    if low.startswith("memset"):
        return "memset"
    if low.startswith("aten::"):
        return op_family(name.split(" ")[0])
    if "nccl" in low:
        return "other"
    if any(s in low for s in ("flash", "fmha", "attention", "attn")):
        return "attention"
    if any(s in low for s in ("gemm", "xmma", "cutlass", "cublas", "sm90_", "sm80_", "conv", "implicit_convolve",
                               "winograd", "gemv", "dot_kernel", "wgrad", "dgrad")):
        return "gemm"
    if any(s in low for s in ("reduce", "norm", "softmax", "cunn_softmax", "nll_loss", "cumsum", "scan",
                               "welford", "batch_norm", "layer_norm", "argmax", "topk", "sort")):
        return "reduction"
    if any(s in low for s in ("elementwise", "copy", "fill", "catarray", "multi_tensor_apply", "unrolled",
                               "where", "clamp", "dropout", "arange")):
        return "elementwise"
    if any(s in low for s in ("index", "gather", "scatter", "embedding", "nonzero", "pool", "unique",
                               "multinomial", "radix")):
        return "other"
    return "other"


# ----------------------------------------------------------------------------- pricing one operator

def _mm_dims(base: str, ins: Sequence[TensorInfo | None], outs: Sequence[TensorInfo]):
    """(m, n, k, batch) of a GEMM-like op from its operands, or None."""
    t = [x for x in ins if x is not None]
    if base in ("mm", "_scaled_mm", "_int_mm") and len(t) >= 2 and len(t[0].shape) == 2 and len(t[1].shape) == 2:
        return t[0].shape[0], t[1].shape[1], t[0].shape[1], 1, t[0], t[1]
    if base in ("addmm", "_addmm_activation") and len(t) >= 3:
        a, b = t[1], t[2]
        if len(a.shape) == 2 and len(b.shape) == 2:
            return a.shape[0], b.shape[1], a.shape[1], 1, a, b
    if base == "bmm" and len(t) >= 2 and len(t[0].shape) == 3:
        a, b = t[0], t[1]
        return a.shape[1], b.shape[2], a.shape[2], a.shape[0], a, b
    if base in ("baddbmm", "addbmm") and len(t) >= 3 and len(t[1].shape) == 3:
        a, b = t[1], t[2]
        return a.shape[1], b.shape[2], a.shape[2], a.shape[0], a, b
    if base == "linear" and len(t) >= 2 and len(t[1].shape) == 2 and t[0].shape:
        x, w = t[0], t[1]
        return math.prod(x.shape[:-1]), w.shape[0], w.shape[1], 1, x, w
    if base == "matmul" and len(t) >= 2 and len(t[0].shape) >= 1 and len(t[1].shape) >= 1:
        a, b = t[0], t[1]
        if len(b.shape) == 2:
            return math.prod(a.shape[:-1]) if len(a.shape) > 1 else 1, b.shape[1], b.shape[0], 1, a, b
        if len(a.shape) >= 2:
            batch = math.prod(b.shape[:-2]) if len(b.shape) > 2 else 1
            n = b.shape[-1] if len(b.shape) > 1 else 1
            return a.shape[-2], n, a.shape[-1], max(batch, math.prod(a.shape[:-2])), a, b
    if base in ("mv", "addmv") and len(t) >= 2:
        a = t[0] if base == "mv" else t[1]
        if len(a.shape) == 2:
            return a.shape[0], 1, a.shape[1], 1, a, a
    if base in ("dot", "vdot") and t:
        return 1, 1, t[0].numel, 1, t[0], t[0]
    if base == "addr" and len(t) >= 3:
        return t[1].numel, t[2].numel, 1, 1, t[1], t[2]
    return None


def _aligned(a: TensorInfo, b: TensorInfo, m: int, n: int, k: int) -> bool:
    """cuBLAS's fast tensor-core kernels need leading dimensions that are multiples of 16 bytes."""
    elems = max(1, 16 // max(a.itemsize, 1))
    return k % elems == 0 and n % elems == 0


def _conv_dims(base: str, ins, outs, args):
    """(m, n, k, groups) of the implicit GEMM of a forward convolution."""
    t = [x for x in ins if x is not None]
    if len(t) < 2 or not outs:
        return None
    w, out = t[1], outs[0]
    if len(w.shape) < 3 or len(out.shape) < 3:
        return None
    groups = 1
    if isinstance(args, dict):
        groups = int(args.get("groups", 1) or 1)
    cout = w.shape[0]
    kvol = math.prod(w.shape[2:])
    cin_g = w.shape[1]
    spatial = math.prod(out.shape[2:])
    return out.shape[0] * spatial, cout // max(groups, 1), cin_g * kvol, groups


def price_op(op: str, ins: Sequence[TensorInfo | None], outs: Sequence[TensorInfo], spec: GpuSpec,
             *, args: dict | None = None, tf32: bool = False, cudnn_tf32: bool = True) -> list[KernelCost]:
    """The kernels one ATen operator launches, with modeled durations.

    ``ins``/``outs`` describe the tensor operands (``None`` for absent optional inputs); ``args``
    carries the few non-tensor arguments some families need (``is_causal``, ``groups``,
    ``tensor_lists`` for foreach ops as lists of :class:`TensorInfo`).
    """
    base = _base(op)
    args = args or {}
    fam = op_family(base)
    t_in = [x for x in ins if x is not None]
    if base.startswith("_foreach_") or base in ("_fused_adam_", "_fused_adamw_", "_fused_sgd_"):
        return _price_foreach(base, args.get("tensor_lists") or [t_in], spec)
    if base in _RNN_OPS and t_in and len(t_in[0].shape) == 3 and "hidden_size" in args:
        x = t_in[0]
        t, b = (x.shape[1], x.shape[0]) if args.get("batch_first") else (x.shape[0], x.shape[1])
        mask = args.get("output_mask") or [True, True, True, True]
        return rnn_kernels(int(args.get("mode", 2)), t, b, x.shape[2], int(args["hidden_size"]),
                           int(args.get("proj_size") or 0), int(args.get("num_layers", 1)),
                           2 if args.get("bidirectional") else 1, x.dtype, spec, backward=base == "_cudnn_rnn_backward",
                           weight_grad=bool(mask[3]) if len(mask) > 3 else True, tf32=cudnn_tf32)
    if fam == "gemm" and base in _GEMM_OPS:
        dims = _mm_dims(base, ins, outs)
        if dims is None:
            return [_memory_kernel("gemm", t_in, outs, spec.strided_efficiency, spec.gemm_floor_ns, spec)]
        m, n, k, batch, a, b = dims
        out_isz = outs[0].itemsize if outs else None
        dur = gemm_ns(m, n, k, a.dtype, spec, batch=batch, tf32=tf32, aligned=_aligned(a, b, m, n, k),
                      out_itemsize=out_isz)
        return [KernelCost("gemm", dur, 2.0 * m * n * k * batch, _bytes(t_in, outs))]
    if fam == "gemm":  # convolutions
        if base == "convolution_backward":
            # inputs: grad_output, input, weight; one dgrad and one wgrad implicit GEMM (+ bias)
            if len(t_in) < 3:
                return [_memory_kernel("gemm", t_in, outs, spec.strided_efficiency, spec.gemm_floor_ns, spec)]
            go, x, w = t_in[0], t_in[1], t_in[2]
            dims = _conv_dims("convolution", [x, w], [go], args)
            if dims is None:
                return [_memory_kernel("gemm", t_in, outs, spec.strided_efficiency, spec.gemm_floor_ns, spec)]
            m, n, k, g = dims
            mask = args.get("output_mask") or [True, True, True]
            kernels = []
            if mask[0]:
                kernels.append(KernelCost("gemm", gemm_ns(m, k, n, x.dtype, spec, batch=g, tf32=cudnn_tf32,
                                                          efficiency=spec.conv_efficiency), 2.0 * m * n * k * g))
            if len(mask) > 1 and mask[1]:
                kernels.append(KernelCost("gemm", gemm_ns(n, k, m, x.dtype, spec, batch=g, tf32=cudnn_tf32,
                                                          efficiency=spec.conv_efficiency), 2.0 * m * n * k * g))
            if len(mask) > 2 and mask[2]:
                kernels.append(_memory_kernel("reduction", [go], [], spec.reduction_efficiency,
                                              spec.reduction_floor_ns, spec))
            return kernels or [KernelCost("gemm", spec.gemm_floor_ns)]
        dims = _conv_dims(base, ins, outs, args)
        if dims is None:
            return [_memory_kernel("gemm", t_in, outs, spec.strided_efficiency, spec.gemm_floor_ns, spec)]
        m, n, k, g = dims
        dtype = t_in[0].dtype
        if g > 1 and n * g == t_in[0].shape[1] and n == 1:  # depthwise: memory bound
            return [_memory_kernel("gemm", t_in, outs, spec.strided_efficiency, spec.gemm_floor_ns, spec)]
        dur = gemm_ns(m, n, k, dtype, spec, batch=g, tf32=cudnn_tf32, efficiency=spec.conv_efficiency)
        return [KernelCost("gemm", dur, 2.0 * m * n * k * g, _bytes(t_in, outs))]
    if fam == "attention":
        return _price_attention(base, t_in, outs, args, spec)
    nk = _MULTI_KERNEL.get(base, 1)
    if base in _INDEXED_WRITE_OPS:
        nbytes = indexed_write_bytes(base, t_in, accumulate=bool(args.get("accumulate", False)))
        if nbytes is not None:
            return [KernelCost("other", memory_ns(nbytes, spec.other_efficiency, spec.other_floor_ns, spec), 0.0,
                               nbytes)]
    if base in _GATHER_OPS and outs:
        # only the gathered rows are read: output bytes twice (read + write) plus the indices
        idx = [x for x in t_in if x.dtype in ("int64", "int32")]
        nbytes = 2 * sum(o.nbytes for o in outs) + sum(x.nbytes for x in idx)
        return [KernelCost("other", memory_ns(nbytes, spec.other_efficiency, spec.other_floor_ns, spec), 0.0, nbytes)]
    if fam == "reduction":
        eff, floor = spec.reduction_efficiency, spec.reduction_floor_ns
    elif fam == "other":
        eff, floor = spec.other_efficiency, spec.other_floor_ns
    else:
        eff = (spec.elementwise_efficiency if _vectorizable(t_in, outs, cast_ok=base in _COPY_OPS)
               else spec.strided_efficiency)
        floor = spec.elementwise_floor_ns
    total = _memory_kernel(fam, t_in, outs, eff, floor * nk, spec)
    if nk == 1:
        return [total]
    per = max(1, total.dur_ns // nk)
    return [KernelCost(fam, per, total.flops / nk, total.bytes / nk) for _ in range(nk)]


_RNN_GATES = {0: 1, 1: 1, 2: 4, 3: 3}  # cudnnRNNMode_t: RNN_RELU, RNN_TANH, LSTM, GRU
RNN_STANDARD, RNN_PERSISTENT = "standard", "persistent"


def rnn_algo(mode: int, batch: int, input_size: int, hidden: int, proj: int, layers: int, dirs: int, dtype: str,
             spec: GpuSpec, *, forward: bool = True) -> str:
    """The cuDNN RNN algorithm PyTorch's ``get_algo`` (aten/src/ATen/native/cudnn/RNN.cpp) picks
    for dense input on a GPU of compute capability >= 8 with >= 98 SMs (both H100 models):
    standard with a projection; persistent (``PERSIST_STATIC_SMALL_H``) for non-fp64 when hidden
    <= 192 (LSTM/GRU forward), <= 128 (LSTM/GRU backward), <= 384 / <= 256 (plain RNNs); the
    persistent ``PERSIST_STATIC`` for fp16 with one unidirectional layer, hidden <= 1024, hidden
    and input multiples of 128, batch a multiple of 8 up to 128 (not GRU; plain RNNs also not
    with batch >= 96 and hidden >= 896); standard otherwise."""
    if proj:
        return RNN_STANDARD
    plain = mode in (0, 1)
    if dtype != "float64":
        limit = (384 if forward else 256) if plain else (192 if forward else 128)
        if hidden <= limit:
            return RNN_PERSISTENT
    if dtype == "float16" and spec.sms >= 98:
        common = layers == 1 and dirs == 1 and hidden <= 1024 and hidden % 128 == 0 and input_size % 128 == 0
        if common and mode != 3 and batch % 8 == 0 and batch <= 128 and (not plain or batch < 96 or hidden < 896):
            return RNN_PERSISTENT
    return RNN_STANDARD


def rnn_kernels(mode: int, seq: int, batch: int, input_size: int, hidden: int, proj: int, layers: int, dirs: int,
                dtype: str, spec: GpuSpec, *, backward: bool = False, weight_grad: bool = True,
                tf32: bool = True) -> list[KernelCost]:
    """The kernels of one cuDNN RNN call (``_cudnn_rnn`` or its backward), as a model of cuDNN's
    algorithms (:func:`rnn_algo`). Per layer and direction:

    * standard, forward: one GEMM for the input projection of all ``seq`` steps (M = seq x batch,
      N = gates x hidden, K = layer input width), then per step one recurrent GEMM (M = batch,
      N = gates x hidden, K = hidden or ``proj``; plus the projection GEMM of an LSTM with
      ``proj``) and one pointwise cell kernel (gate pre-activations of both GEMMs read, cell state
      read and written, hidden state written, both biases read);
    * standard, backward: per step the cell kernel and the recurrent data-gradient GEMM, then one
      input data-gradient GEMM over all steps, and when ``weight_grad`` two weight-gradient GEMMs
      (K = seq x batch) and a bias reduction;
    * persistent: the per-step GEMMs and cell kernels become one kernel that runs every step
      (assumption: its time is the sum of their rooflines without the per-kernel floors, plus one
      ``gemm_floor_ns``); the input-projection / data- and weight-gradient GEMMs stay.

    Layers and directions run one after the other (cuDNN overlaps them on internal streams; not
    modelled)."""
    gates = _RNN_GATES.get(mode, 4)
    g = gates * hidden
    rec_w = proj or hidden
    isz = _ITEMSIZE.get(dtype, 4)
    cell_bytes = (2 * g + (2 if mode == 2 else 0) * hidden + hidden) * batch * isz + 2 * g * isz
    cell = KernelCost("elementwise", memory_ns(cell_bytes, spec.elementwise_efficiency, spec.elementwise_floor_ns,
                                               spec), 0.0, cell_bytes)
    persistent = rnn_algo(mode, batch, input_size, hidden, proj, layers, dirs, dtype, spec,
                          forward=not backward) == RNN_PERSISTENT

    def mm(m, n, k):
        return KernelCost("gemm", gemm_ns(m, n, k, dtype, spec, tf32=tf32), 2.0 * m * n * k)

    def steps(step: list[KernelCost]) -> list[KernelCost]:
        if not persistent:
            return step * seq
        floors = sum(spec.gemm_floor_ns if k.family == "gemm" else spec.elementwise_floor_ns for k in step)
        work = seq * (sum(k.dur_ns for k in step) - floors)
        return [KernelCost("gemm", spec.gemm_floor_ns + work, seq * sum(k.flops for k in step),
                           seq * sum(k.bytes for k in step))]

    kernels: list[KernelCost] = []
    for layer in range(max(layers, 1)):
        width = input_size if layer == 0 else rec_w * dirs
        for _ in range(max(dirs, 1)):
            if not backward:
                kernels.append(mm(seq * batch, g, width))
                kernels.extend(steps([mm(batch, g, rec_w)] + ([mm(batch, proj, hidden)] if proj else []) + [cell]))
            else:
                kernels.extend(steps([cell, mm(batch, rec_w, g)]))
                kernels.append(mm(seq * batch, width, g))
                if weight_grad:
                    kernels.append(mm(g, width, seq * batch))
                    kernels.append(mm(g, rec_w, seq * batch))
                    kernels.append(_memory_kernel("reduction", [TensorInfo((seq * batch, g), dtype)], [],
                                                  spec.reduction_efficiency, spec.reduction_floor_ns, spec))
    return kernels


def indexed_write_bytes(base: str, t_in: Sequence[TensorInfo], *, accumulate: bool = False) -> float | None:
    """HBM bytes of an in-place indexed write into ``t_in[0]`` (the destination, which is not
    read as a whole): the index tensors read, the source read, and the written elements written
    (read as well when the op accumulates). Written elements: the source's (``index_copy_``,
    ``index_add_``, ``index_put_`` with a full-size value), or for a broadcast value the indexed
    positions times the trailing slice of the destination (integer indices taken as indexing the
    leading dims, the common ``cache[idx] = v``); ``scatter_``/``put_`` write one element per index
    entry. None (the caller prices every operand) for a boolean-mask index, whose count of
    written positions is in the data."""
    if len(t_in) < 2:
        return None
    dst = t_in[0]
    if base in ("index_put_", "_index_put_impl_"):  # (self, indices..., values)
        idx, src_t = list(t_in[1:-1]), t_in[-1]
        if not idx or any(x.dtype not in ("int64", "int32") for x in idx):
            return None  # a boolean mask (or no index): the count is in the data
        positions = math.prod(_broadcast_shape([x.shape for x in idx]))
        trailing = math.prod(dst.shape[len(idx):]) if len(dst.shape) >= len(idx) else 1
        written = max(positions * trailing, src_t.numel)
    else:  # (self, index, source) or scatter_'s (self, index[, src])
        idx, src_t = [t_in[1]], (t_in[2] if len(t_in) > 2 else None)
        if idx[0].dtype not in ("int64", "int32"):
            return None
        if base in ("scatter_", "scatter_add_", "scatter_reduce_", "put_"):
            written = idx[0].numel  # one element per index entry
        elif src_t is None:
            return None
        else:  # index_copy_, index_add_, index_reduce_: the source's rows
            written = src_t.numel
    isz = dst.itemsize
    src_bytes = 0 if src_t is None or src_t.numel <= 1 else src_t.nbytes  # a 0-d value is a kernel argument
    if base in ("scatter_", "scatter_add_", "scatter_reduce_", "put_") and src_t is not None:
        src_bytes = min(src_bytes, written * src_t.itemsize)  # only the src elements the index names are read
    rmw = accumulate or base in _ACCUMULATING_WRITES
    return float(sum(x.nbytes for x in idx) + src_bytes + written * isz * (2 if rmw else 1))


def _broadcast_shape(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    n = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(n):
        dims = [s[len(s) - n + i] for s in shapes if len(s) - n + i >= 0]
        out.append(max(dims))
    return tuple(out)


def _bytes(ins: Sequence[TensorInfo], outs: Sequence[TensorInfo]) -> float:
    return float(sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs))


def _memory_kernel(fam: str, ins, outs, eff: float, floor: int, spec: GpuSpec) -> KernelCost:
    nbytes = _bytes(ins, outs)
    return KernelCost(fam, memory_ns(nbytes, eff, floor, spec), 0.0, nbytes)


def _vectorizable(ins: Sequence[TensorInfo], outs: Sequence[TensorInfo], cast_ok: bool = False) -> bool:
    """PyTorch's vectorized elementwise path: every operand contiguous, of the output's shape
    (0-d scalars aside) and of one dtype (a plain dtype-converting copy of contiguous tensors
    also vectorizes). Anything else takes the strided/casting path."""
    if not outs:
        return True
    out = outs[0]
    for t in list(ins) + list(outs):
        if t.numel <= 1 and len(t.shape) == 0:
            continue
        if not t.contiguous or t.shape != out.shape or (t.dtype != out.dtype and not cast_ok):
            return False
    return True


def _price_attention(base: str, t_in, outs, args, spec: GpuSpec) -> list[KernelCost]:
    if base in ("_varlen_attn", "_flash_attention_forward") and len(t_in) >= 3 and len(t_in[0].shape) == 3:
        return [varlen_attention_cost(t_in[0], t_in[1], t_in[2], args, spec)]
    if len(t_in) < 3 or len(t_in[0].shape) != 4:
        return [_memory_kernel("attention", t_in, outs, spec.other_efficiency, spec.attention_floor_ns, spec)]
    backward = base.endswith("_backward")
    if backward:  # grad_out, q, k, v, ...
        q, k, v = t_in[1], t_in[2], t_in[3]
    else:
        q, k, v = t_in[0], t_in[1], t_in[2]
    if base in ("_flash_attention_forward", "_flash_attention_backward", "_efficient_attention_forward",
                "_efficient_attention_backward"):
        b, sq, h, d = q.shape  # (batch, seq, heads, dim) layout
        sk, dv = k.shape[1], v.shape[3]
    else:
        b, h, sq, d = q.shape
        sk, dv = k.shape[2], v.shape[3]
    causal = bool(args.get("is_causal", False))
    mem_eff = "efficient" in base
    dur, flops = attention_ns(b, h, sq, sk, d, dv, causal, spec, backward=backward, mem_efficient=mem_eff,
                              dtype=q.dtype, nbytes=_bytes(t_in, outs))
    nk = _MULTI_KERNEL.get(base, 1)
    if nk == 1:
        return [KernelCost("attention", dur, flops, _bytes(t_in, outs))]
    # backward: a small pre-processing kernel (dot(dO, O)), the main kernel, a conversion of dQ
    small = memory_ns(q.nbytes * 2, spec.elementwise_efficiency, spec.elementwise_floor_ns, spec)
    main = KernelCost("attention", dur, flops, _bytes(t_in, outs))
    extra = [KernelCost("attention", small) for _ in range(nk - 1)]
    return [extra[0], main] + extra[1:]


def varlen_attention_cost(q: TensorInfo, k: TensorInfo, v: TensorInfo, args: dict, spec: GpuSpec) -> KernelCost:
    """A variable-length (FlashAttention varlen / paged) forward: ``q`` is [total_q, heads, d], ``k``
    and ``v`` a pool of cache rows [rows, kv_heads, d] (or pages [pages, page_size, kv_heads, d]),
    of which each sequence reads only its own context. ``args["seq_lens_q"]`` and
    ``args["seq_lens_k"]`` (the query rows and key positions of each sequence, read from the
    metadata tensors' values where the emulator holds them) give the work; without them every
    query row counts as a sequence of ``max_k`` keys (an upper bound). Bytes: Q and O, and each
    sequence's keys and values once (the pool as a whole is not read)."""
    h, d, dv, hkv = q.shape[1], q.shape[2], v.shape[-1], k.shape[-2]
    causal = bool(args.get("is_causal", False))
    lq, lk = args.get("seq_lens_q"), args.get("seq_lens_k")
    pool_rows = math.prod(k.shape[:-2])
    if lq is not None and lk is not None and len(lq) == len(lk):
        pairs = float(sum(a * b - (a * (a - 1) / 2 if causal and a <= b else 0) for a, b in zip(lq, lk)))
        kv_rows = float(sum(lk))
        rows_q = max(1, sum(lq))
    else:
        max_k = int(args.get("max_k") or pool_rows)
        rows_q = q.shape[0]
        pairs = float(rows_q * max_k)
        kv_rows = float(min(pool_rows, rows_q * max_k))
    nbytes = q.nbytes + q.shape[0] * h * dv * q.itemsize + kv_rows * hkv * (d + dv) * k.itemsize
    mean_k = max(1, int(round(pairs / rows_q)))
    dur, flops = attention_ns(1, h, 1, mean_k, d, dv, causal, spec, dtype=q.dtype, nbytes=nbytes, pairs=pairs)
    return KernelCost("attention", dur, flops, nbytes)


def _price_foreach(base: str, lists: Sequence[Sequence[TensorInfo]], spec: GpuSpec) -> list[KernelCost]:
    """multi_tensor_apply: one launch per ``foreach_tensors_per_launch`` tensors or per
    ``foreach_blocks_per_launch`` chunks of ``foreach_chunk_elems`` elements, whichever needs more;
    bytes = every element of every list read, the first list (or the output) written."""
    lists = [lst for lst in lists if lst]
    if not lists:
        return []
    first = lists[0]
    n_tensors = len(first)
    chunks = sum(math.ceil(t.numel / spec.foreach_chunk_elems) for t in first)
    launches = max(1, math.ceil(n_tensors / spec.foreach_tensors_per_launch),
                   math.ceil(chunks / spec.foreach_blocks_per_launch))
    nbytes = sum(t.nbytes for lst in lists for t in lst) + sum(t.nbytes for t in first)
    fam = "elementwise"
    total = memory_ns(nbytes, spec.elementwise_efficiency, 0, spec)
    per = spec.elementwise_floor_ns + total // launches
    return [KernelCost(fam, per, 0.0, nbytes / launches) for _ in range(launches)]
