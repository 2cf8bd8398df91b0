"""``tracegen synth``: synthetic traces for tests, benchmarks and what-if studies.

Two generators, both writing schema-v1 traces that follow ``docs/conventions.md``:

* ``random``: a realistic mix on one main host thread per rank: CPU work between CUDA runtime
  calls (``cudaLaunchKernel``, ``cudaMemcpyAsync``, ``cudaMemsetAsync``, ``cudaEventRecord``,
  ``cudaStreamWaitEvent``, ``cudaStreamSynchronize``, ``cudaDeviceSynchronize``), kernels on several
  streams, H2D/D2H copies from pinned and pageable memory, memsets and cross-stream events.
* ``memcpy``: a transfer microbenchmark in the style of nvbandwidth: K times
  ``cudaMemcpyAsync`` + the copy + ``cudaStreamSynchronize``.

The *captured* timeline is not drawn at random: it is simulated from the drawn durations with
the replay engine's rules, so that every measured time is consistent with the stored
dependencies:

* host ops of a thread run back to back (the time between CUDA calls is an explicit ``cpu`` op);
* a GPU op starts at ``max(start of its launching call + LAUNCH_LATENCY_NS, finish of the
  previous op on its stream, finish of the op it waits for through an event)``;
* a synchronising call starts when the host reaches it and ends at
  ``max(start + SYNC_CALL_NS, finish of what it waits for + SYNC_WAKE_NS)``: a ``sync`` op spans
  the whole wait, so its *finish* (not its start) is after the GPU op it depends on;
* ``cudaMemcpyAsync`` D2H into pageable memory blocks: it is split into a ``runtime`` op (the
  launch, from the call's start to the copy's start) and a ``sync`` op (the wait).

Durations come from the named constants below (units in the names). They are a stand-in for a
measurement: the replay re-prices copies and launches under its hardware model anyway.

Drawing is numpy-vectorised; the timeline simulation is one sequential pass (a recurrence with
host/GPU feedback through syncs), compiled with numba like the replay engine
(``FASTRACK_NO_JIT=1`` runs it as plain Python). Everything is deterministic for a seed.
"""

from __future__ import annotations

import math
import re

import click
import numpy as np
import pyarrow as pa

from fastrack_core.version import __version__
from fastrack_core.cli_support import reports_errors
from fastrack_core.errors import ConfigError
from fastrack_core.outputs import check_output_path
from fastrack_core.schema import MAX_BYTES, CopyDir, DepKind, HostMem, OpKind
from fastrack_core.traceio import make_table, write_trace

from fastrack_core.jit import njit

# ---------------------------------------------------------------------------------------------
# Cost constants (nominal, H100-class numbers; a stand-in for a measurement)
# ---------------------------------------------------------------------------------------------
LAUNCH_LATENCY_NS = 4_000  # start of a launching call -> earliest start of its GPU op
PINNED_COPY_BW_BYTES_PER_S = 25e9  # H2D/D2H copy from/to pinned host memory
PAGEABLE_COPY_BW_BYTES_PER_S = 12e9  # H2D/D2H copy from/to pageable memory (driver staging)
COPY_FIXED_NS = 2_000  # per-copy fixed cost on the GPU (DMA setup, completion)
MEMSET_BW_BYTES_PER_S = 1_000e9  # device memset
MEMSET_FIXED_NS = 1_000
SYNC_CALL_NS = 2_000  # a synchronising call that does not need to wait
SYNC_WAKE_NS = 1_000  # GPU op finished -> blocked host call returns
MIN_COPY_BYTES = 4 * 1024  # copy/memset sizes are log-uniform in [MIN, MAX]
MAX_COPY_BYTES = 64 * 1024 * 1024
CPU_GAP_MEDIAN_NS = 8_000  # CPU work between two CUDA calls (log-normal)
CPU_GAP_SIGMA = 1.0
CPU_GAP_PROB = 0.6  # probability that a CUDA call is preceded by CPU work
KERNEL_SIGMA = 0.5  # log-normal spread of a kernel's duration around its name's median
RUNTIME_SIGMA = 0.3  # log-normal spread of a CUDA call's duration
ACTIONS_PER_STEP = 500  # CUDA calls (with their CPU work) per profiler step
MAIN_THREAD_ID = 4242  # host thread id of rank r is MAIN_THREAD_ID + r
FIRST_STREAM_ID = 7  # PyTorch's usual default-stream id; stream k has id FIRST_STREAM_ID + k
MICROBENCH_STREAM_ID = 13

# (name, median duration ns) of kernels: tens of microseconds, with a few long GEMMs.
KERNELS: tuple[tuple[str, int], ...] = (
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1", 60_000),
    ("flash_fwd_kernel", 45_000),
    ("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", 90_000),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", 8_000),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t>>", 15_000),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", 12_000),
    ("void at::native::(anonymous namespace)::layer_norm_kernel<c10::BFloat16>", 20_000),
    ("void at::native::unrolled_elementwise_kernel<at::native::copy_device_to_device>", 6_000),
)
# (name, median duration ns) of CUDA runtime calls.
RUNTIME_CALLS = {
    "cudaLaunchKernel": 3_500,
    "cudaMemcpyAsync": 4_500,
    "cudaMemsetAsync": 3_000,
    "cudaEventRecord": 1_500,
    "cudaStreamWaitEvent": 1_500,
}

# Mix of the random generator: probability of each action (one CUDA call, or two for an event).
A_KERNEL, A_H2D, A_D2H, A_MEMSET, A_EVENT, A_STREAM_SYNC, A_DEVICE_SYNC = range(7)
ACTION_PROBS = np.array([0.72, 0.06, 0.04, 0.04, 0.07, 0.055, 0.015])
H2D_PINNED_PROB = 0.7
D2H_PINNED_PROB = 0.5
DEFAULT_STREAM_SHARE = 0.5  # share of kernels on the first (default) stream

# Op classes of the simulation.
(C_CPU, C_RT, C_RT_LAUNCH, C_RT_BLOCK, C_GPU, C_EV_RECORD, C_EV_WAIT, C_SYNC_STREAM, C_SYNC_DEVICE,
 C_SYNC_COPY) = range(10)

# ---------------------------------------------------------------------------------------------
# Sizes
# ---------------------------------------------------------------------------------------------
_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


MAX_SYNTH_OPS = 10**9  # about 100 GB of trace: beyond what a machine holds, refused before allocating


def parse_size(text: str, field: str = "--bytes") -> int:
    """Bytes from '4096', '4KiB', '1MiB', '1GiB', '1e9', '2.5GB' (KB/MB/GB decimal, KiB/MiB/GiB
    binary). Raises ConfigError naming ``field`` for anything else, or for a size that is not a
    positive whole number of bytes."""
    m = _SIZE_RE.match(str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise ConfigError(
            f"{field}: '{text}' is not a size (examples: 4096, 4KiB, 1MiB, 1GiB, 1e9, 2GB)"
        )
    value = float(m.group(1)) * _UNITS[unit]
    if not math.isfinite(value) or value <= 0 or value != int(value):
        raise ConfigError(f"{field}: '{text}' is not a positive whole number of bytes")
    if value > MAX_BYTES:
        raise ConfigError(f"{field}: '{text}' is more than the {MAX_BYTES:,} bytes a trace may hold per op")
    return int(value)


# ---------------------------------------------------------------------------------------------
# Timeline simulation (one rank)
# ---------------------------------------------------------------------------------------------
_PROGRAM, _LAUNCH, _STREAM, _EVENT, _SYNC = (int(DepKind.PROGRAM), int(DepKind.LAUNCH), int(DepKind.STREAM),
                                             int(DepKind.EVENT), int(DepKind.SYNC))


@njit(cache=True)
def _simulate(cls, stream, dur, n_streams, launch_ns, sync_call_ns, wake_ns, cap):
    """Captured start/duration of every op (in generation order) and the dependency edges
    (src, dst, kind), grouped by dst in increasing dst order."""
    n = cls.shape[0]
    start = np.zeros(n, np.int64)
    out_dur = dur.copy()
    esrc = np.empty(cap, np.int64)
    edst = np.empty(cap, np.int64)
    ekind = np.empty(cap, np.uint8)
    ne = 0
    t = np.int64(0)  # host thread's clock
    prev_host = -1
    launcher = -1
    last_gpu = -1
    recorded = -1
    last_on = np.full(n_streams, -1, np.int64)  # last GPU op launched on each stream
    pending = np.full(n_streams, -1, np.int64)  # event source the next op of a stream waits for
    for i in range(n):
        c = cls[i]
        if c == C_GPU:  # launched by the runtime call just before it
            s = stream[i]
            st = start[launcher] + launch_ns
            esrc[ne] = launcher
            edst[ne] = i
            ekind[ne] = _LAUNCH
            ne += 1
            p = last_on[s]
            if p >= 0:
                f = start[p] + out_dur[p]
                if f > st:
                    st = f
                esrc[ne] = p
                edst[ne] = i
                ekind[ne] = _STREAM
                ne += 1
            e = pending[s]
            if e >= 0:
                f = start[e] + out_dur[e]
                if f > st:
                    st = f
                esrc[ne] = e
                edst[ne] = i
                ekind[ne] = _EVENT
                ne += 1
                pending[s] = -1
            start[i] = st
            last_on[s] = i
            last_gpu = i
            if cls[launcher] == C_RT_BLOCK:  # a blocking call: its launch part ends when the copy starts
                out_dur[launcher] = st - start[launcher]
                t = st
            continue
        # host op: starts where the previous one ended
        start[i] = t
        if prev_host >= 0:
            esrc[ne] = prev_host
            edst[ne] = i
            ekind[ne] = _PROGRAM
            ne += 1
        prev_host = i
        if c == C_RT_LAUNCH or c == C_RT_BLOCK:
            launcher = i
            if c == C_RT_BLOCK:
                continue  # duration set when its copy starts
        elif c == C_EV_RECORD:
            recorded = last_on[stream[i]]
        elif c == C_EV_WAIT:
            if recorded >= 0:
                pending[stream[i]] = recorded
            recorded = -1
        elif c == C_SYNC_STREAM or c == C_SYNC_COPY or c == C_SYNC_DEVICE:
            end = t + sync_call_ns
            for k in range(n_streams if c == C_SYNC_DEVICE else 1):
                if c == C_SYNC_DEVICE:
                    p = last_on[k]
                elif c == C_SYNC_STREAM:
                    p = last_on[stream[i]]
                else:
                    p = last_gpu
                if p >= 0:
                    f = start[p] + out_dur[p] + wake_ns
                    if f > end:
                        end = f
                    esrc[ne] = p
                    edst[ne] = i
                    ekind[ne] = _SYNC
                    ne += 1
            out_dur[i] = end - t
        t = start[i] + out_dur[i]
    return start, out_dur, esrc[:ne], edst[:ne], ekind[:ne]


# Max edges an op of each class can get (device syncs get n_streams more).
_CAP_BY_CLS = np.array([1, 1, 1, 1, 3, 1, 1, 2, 1, 2], np.int64)


# ---------------------------------------------------------------------------------------------
# Random mix
# ---------------------------------------------------------------------------------------------
_NAMES: list[str] = (
    ["cpu"]
    + list(RUNTIME_CALLS)
    + ["cudaStreamSynchronize", "cudaDeviceSynchronize"]
    + [k for k, _ in KERNELS]
    + ["Memcpy HtoD (Pinned -> Device)", "Memcpy HtoD (Pageable -> Device)",
       "Memcpy DtoH (Device -> Pinned)", "Memcpy DtoH (Device -> Pageable)", "Memset (Device)"]
)
_NAME_ID = {n: i for i, n in enumerate(_NAMES)}
_KERNEL0 = _NAME_ID[KERNELS[0][0]]
_KERNEL_MEDIAN = np.array([m for _, m in KERNELS], np.float64)
_RT_MEDIAN = np.zeros(len(_NAMES))
for _n, _m in RUNTIME_CALLS.items():
    _RT_MEDIAN[_NAME_ID[_n]] = _m

_KINDS = [k.label for k in OpKind]
_COPY_LABELS = [d.label for d in CopyDir if d.label]  # dictionary of copy_dir: index = code - 1
_MEM_LABELS = [m.label for m in HostMem if m.label]

# Template of each action type: (op class, name) per slot, after an optional CPU-work op.
_K = "<kernel>"  # kernel name chosen per action
_TEMPLATES = {
    A_KERNEL: [(C_RT_LAUNCH, "cudaLaunchKernel"), (C_GPU, _K)],
    A_H2D: [(C_RT_LAUNCH, "cudaMemcpyAsync"), (C_GPU, "<h2d>")],
    A_D2H: [(C_RT_LAUNCH, "cudaMemcpyAsync"), (C_GPU, "<d2h>")],
    A_MEMSET: [(C_RT_LAUNCH, "cudaMemsetAsync"), (C_GPU, "Memset (Device)")],
    A_EVENT: [(C_EV_RECORD, "cudaEventRecord"), (C_EV_WAIT, "cudaStreamWaitEvent")],
    A_STREAM_SYNC: [(C_SYNC_STREAM, "cudaStreamSynchronize")],
    A_DEVICE_SYNC: [(C_SYNC_DEVICE, "cudaDeviceSynchronize")],
}
_A_D2H_PAGEABLE = 7  # internal: D2H into pageable memory (blocking call: 3 ops)
_TEMPLATES[_A_D2H_PAGEABLE] = [(C_RT_BLOCK, "cudaMemcpyAsync"), (C_GPU, "<d2h>"), (C_SYNC_COPY, "cudaMemcpyAsync")]
_NT = len(_TEMPLATES)
_TPL_LEN = np.array([len(_TEMPLATES[a]) for a in range(_NT)], np.int64)
_TPL_CLS = np.full((_NT, 3), -1, np.int8)
_TPL_NAME = np.full((_NT, 3), -1, np.int32)
for _a, _tpl in _TEMPLATES.items():
    for _j, (_c, _nm) in enumerate(_tpl):
        _TPL_CLS[_a, _j] = _c
        _TPL_NAME[_a, _j] = _NAME_ID.get(_nm, -1)


def _draw_actions(rng: np.random.Generator, n_ops: int, n_streams: int) -> dict[str, np.ndarray]:
    """Actions (one CUDA call, with its optional preceding CPU work) adding up to exactly n_ops ops."""
    probs = ACTION_PROBS.copy()
    if n_streams < 2:  # no cross-stream events with a single stream
        probs[A_KERNEL] += probs[A_EVENT]
        probs[A_EVENT] = 0.0
    gap_mean = 1 + CPU_GAP_PROB
    mean_ops = float(probs @ np.array([2, 2, 2.5, 2, 2, 1, 1])) + gap_mean - 1
    types, gaps, pages = [], [], []
    total = 0
    while total < n_ops:
        m = int((n_ops - total) / mean_ops * 1.02) + 16
        a = rng.choice(len(probs), size=m, p=probs).astype(np.int8)
        g = (rng.random(m) < CPU_GAP_PROB).astype(np.int8)
        # copies from/to pageable memory; a D2H one blocks (one op more: the wait)
        memsel = rng.random(m)
        pageable = ((a == A_H2D) & (memsel >= H2D_PINNED_PROB)) | ((a == A_D2H) & (memsel >= D2H_PINNED_PROB))
        a[(a == A_D2H) & pageable] = _A_D2H_PAGEABLE
        types.append(a)
        gaps.append(g)
        pages.append(pageable)
        total += int(np.sum(g, dtype=np.int64) + np.sum(_TPL_LEN[a], dtype=np.int64))
    a = np.concatenate(types)
    g = np.concatenate(gaps)
    pageable = np.concatenate(pages)
    counts = g + _TPL_LEN[a]
    csum = np.cumsum(counts)
    keep = int(np.searchsorted(csum, n_ops, side="right"))
    deficit = n_ops - (int(csum[keep - 1]) if keep else 0)
    a, g, pageable = a[:keep], g[:keep], pageable[:keep]
    if deficit:  # top up with stream syncs (one op each, no CPU work)
        a = np.concatenate([a, np.full(deficit, A_STREAM_SYNC, np.int8)])
        g = np.concatenate([g, np.zeros(deficit, np.int8)])
        pageable = np.concatenate([pageable, np.zeros(deficit, bool)])
    n_act = a.size
    # streams: kernels prefer the default stream; copies/memsets/syncs anywhere; events a -> b != a
    s1 = rng.integers(0, n_streams, n_act)
    if n_streams > 1:
        on_default = rng.random(n_act) < DEFAULT_STREAM_SHARE
        s1 = np.where((a == A_KERNEL) & on_default, 0, s1)
        s2 = (s1 + rng.integers(1, n_streams, n_act)) % n_streams
    else:
        s2 = np.zeros(n_act, np.int64)
    log_lo, log_hi = math.log(MIN_COPY_BYTES), math.log(MAX_COPY_BYTES)
    nbytes = np.exp(rng.uniform(log_lo, log_hi, n_act)).astype(np.int64)
    kernel = rng.integers(0, len(KERNELS), n_act)
    return {"type": a, "gap": g, "pageable": pageable, "s1": s1, "s2": s2, "bytes": nbytes, "kernel": kernel}


def _random_rank(rng: np.random.Generator, n_ops: int, n_streams: int) -> dict[str, np.ndarray]:
    """One rank's ops in generation (host program) order with their simulated times and edges."""
    act = _draw_actions(rng, n_ops, n_streams)
    a, g = act["type"], act["gap"].astype(np.int64)
    counts = g + _TPL_LEN[a]
    first = np.zeros(a.size, np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    ai = np.repeat(np.arange(a.size, dtype=np.int64), counts)  # action of each op
    slot = np.arange(ai.size, dtype=np.int64) - first[ai] - g[ai]  # -1 for the CPU-work op
    at = a[ai]
    is_cpu = slot < 0
    cls = np.where(is_cpu, C_CPU, _TPL_CLS[at, np.maximum(slot, 0)]).astype(np.int8)
    name = np.where(is_cpu, 0, _TPL_NAME[at, np.maximum(slot, 0)]).astype(np.int32)

    gpu = cls == C_GPU
    pageable = act["pageable"][ai]
    is_h2d = gpu & (at == A_H2D)
    is_d2h = gpu & ((at == A_D2H) | (at == _A_D2H_PAGEABLE))
    is_memset = gpu & (at == A_MEMSET)
    is_kernel = gpu & (at == A_KERNEL)
    name[is_kernel] = _KERNEL0 + act["kernel"][ai[is_kernel]]
    name[is_h2d] = np.where(pageable[is_h2d], _NAME_ID["Memcpy HtoD (Pageable -> Device)"],
                            _NAME_ID["Memcpy HtoD (Pinned -> Device)"])
    name[is_d2h] = np.where(pageable[is_d2h], _NAME_ID["Memcpy DtoH (Device -> Pageable)"],
                            _NAME_ID["Memcpy DtoH (Device -> Pinned)"])

    stream = np.where(cls == C_EV_WAIT, act["s2"][ai], act["s1"][ai]).astype(np.int64)
    nbytes = np.where(is_h2d | is_d2h | is_memset, act["bytes"][ai], 0)

    # durations (before the simulation fixes those of blocking calls)
    n = cls.size
    z = rng.standard_normal(n)
    dur = np.zeros(n, np.float64)
    dur[is_cpu] = CPU_GAP_MEDIAN_NS * np.exp(CPU_GAP_SIGMA * z[is_cpu])
    rt = (cls == C_RT) | (cls == C_RT_LAUNCH) | (cls == C_EV_RECORD) | (cls == C_EV_WAIT)
    dur[rt] = _RT_MEDIAN[name[rt]] * np.exp(RUNTIME_SIGMA * z[rt])
    dur[is_kernel] = _KERNEL_MEDIAN[act["kernel"][ai[is_kernel]]] * np.exp(KERNEL_SIGMA * z[is_kernel])
    copy = is_h2d | is_d2h
    bw = np.where(pageable[copy], PAGEABLE_COPY_BW_BYTES_PER_S, PINNED_COPY_BW_BYTES_PER_S)
    dur[copy] = nbytes[copy] * 1e9 / bw + COPY_FIXED_NS
    dur[is_memset] = nbytes[is_memset] * 1e9 / MEMSET_BW_BYTES_PER_S + MEMSET_FIXED_NS
    dur = np.maximum(np.rint(dur), 1).astype(np.int64)
    del z

    n_dev = int(np.count_nonzero(cls == C_SYNC_DEVICE))
    cap = int(_CAP_BY_CLS[cls].sum()) + n_streams * n_dev
    start, dur, esrc, edst, ekind = _simulate(cls, stream, dur, n_streams, LAUNCH_LATENCY_NS, SYNC_CALL_NS,
                                              SYNC_WAKE_NS, cap)
    corr = np.where(gpu | (cls == C_RT_LAUNCH) | (cls == C_RT_BLOCK), ai + 1, -1)
    return {
        "cls": cls, "name": name, "stream": stream, "bytes": nbytes, "start": start, "dur": dur,
        "copy_dir": np.where(is_h2d, int(CopyDir.H2D), np.where(is_d2h, int(CopyDir.D2H), 0)).astype(np.int8),
        "host_mem": np.where(copy, np.where(pageable, int(HostMem.PAGEABLE), int(HostMem.PINNED)), 0).astype(np.int8),
        "corr": corr, "step": (ai // ACTIONS_PER_STEP).astype(np.int32),
        "esrc": esrc, "edst": edst, "ekind": ekind,
    }


_CLS_KIND = np.array([OpKind.CPU, OpKind.RUNTIME, OpKind.RUNTIME, OpKind.RUNTIME, 0, OpKind.RUNTIME, OpKind.RUNTIME,
                      OpKind.SYNC, OpKind.SYNC, OpKind.SYNC], np.int32)
# sort class at equal start: host calls, then GPU ops, then syncs (a sync may start exactly when the
# op it waits for starts: the two halves of a blocking copy), so deps always point to earlier ids
_CLS_TIE = np.array([0, 0, 0, 0, 1, 0, 0, 2, 2, 2], np.int8)


def _dict_array(codes: np.ndarray, labels: list[str], null: np.ndarray | None = None) -> pa.Array:
    idx = pa.array(codes.astype(np.int32), pa.int32(), mask=null)
    return pa.DictionaryArray.from_arrays(idx, pa.array(labels, pa.string()))


def _assemble(parts: list[dict[str, np.ndarray]]) -> pa.Table:
    """Sort each rank's ops by (start, host/GPU/sync, generation order), number them 0..n-1 over
    the file, remap the edges and build the Arrow table. Consumes ``parts`` (frees as it goes)."""
    keys = ("cls", "name", "stream", "bytes", "start", "dur", "copy_dir", "host_mem", "corr", "step")
    cols: dict[str, list[np.ndarray]] = {k: [] for k in keys + ("rank",)}
    offsets, values, kinds = [np.zeros(1, np.int32)], [], []
    base = 0
    for rank in range(len(parts)):
        p = parts[rank]
        parts[rank] = None  # type: ignore[call-overload]
        n = p["cls"].size
        order = np.lexsort((np.arange(n), _CLS_TIE[p["cls"]], p["start"]))
        new_id = np.empty(n, np.int64)
        new_id[order] = np.arange(base, base + n, dtype=np.int64)
        dst = new_id[p.pop("edst")]
        eorder = np.argsort(dst, kind="stable")
        values.append(new_id[p.pop("esrc")][eorder])
        kinds.append(p.pop("ekind")[eorder])
        counts = np.bincount(dst - base, minlength=n).astype(np.int32)
        del dst, eorder, new_id
        offsets.append(np.cumsum(counts, dtype=np.int64).astype(np.int32) + offsets[-1][-1])
        cols["rank"].append(np.full(n, rank, np.int32))
        for k in keys:
            cols[k].append(p.pop(k)[order])
        base += n
        del p, order
    c = {k: (v[0] if len(v) == 1 else np.concatenate(v)) for k, v in cols.items()}
    del cols
    cls = c.pop("cls")
    gpu = cls == C_GPU
    kind = _CLS_KIND[cls]
    kind[gpu & (c["copy_dir"] > 0)] = int(OpKind.MEMCPY)
    kind[gpu & (c["copy_dir"] == 0)] = int(OpKind.KERNEL)
    kind[gpu & (c["name"] == _NAME_ID["Memset (Device)"])] = int(OpKind.MEMSET)
    rank = c.pop("rank")
    stream = c.pop("stream")
    stream += FIRST_STREAM_ID
    stream[~gpu] = -1
    device = (rank % 8).astype(np.int32)
    device[cls == C_CPU] = -1
    thread = MAIN_THREAD_ID + rank.astype(np.int64)
    thread[gpu] = -1
    del cls, gpu
    offs = pa.array(offsets[0] if len(offsets) == 1 else np.concatenate(offsets), pa.int32())
    deps = pa.ListArray.from_arrays(offs, pa.array(values[0] if len(values) == 1 else np.concatenate(values)))
    dkinds = pa.ListArray.from_arrays(offs, pa.array(kinds[0] if len(kinds) == 1 else np.concatenate(kinds)))
    del values, kinds, offsets
    copy_dir, host_mem = c.pop("copy_dir"), c.pop("host_mem")
    return make_table({
        "op_id": np.arange(rank.size, dtype=np.int64),
        "rank": rank,
        "device": device,
        "thread": thread,
        "stream": stream,
        "kind": _dict_array(kind, _KINDS),
        "name": _dict_array(c.pop("name"), _NAMES),
        "start_ns": c.pop("start"),
        "dur_ns": c.pop("dur"),
        "bytes": c.pop("bytes"),
        "copy_dir": _dict_array(np.maximum(copy_dir - 1, 0), _COPY_LABELS, copy_dir == 0),
        "host_mem": _dict_array(np.maximum(host_mem - 1, 0), _MEM_LABELS, host_mem == 0),
        "correlation": c.pop("corr"),
        "step": c.pop("step"),
        "deps": deps,
        "dep_kinds": dkinds,
    })


def random_table(n_ops: int, seed: int, ranks: int = 1, streams: int = 4) -> pa.Table:
    """A random trace of exactly ``n_ops`` ops over ``ranks`` ranks (split evenly)."""
    if n_ops < ranks:
        raise ConfigError(f"--ops: {n_ops} op(s) cannot fill {ranks} rank(s); need at least one per rank")
    if ranks < 1:
        raise ConfigError(f"--ranks: expected at least 1, got {ranks}")
    if streams < 1:
        raise ConfigError(f"--streams: expected at least 1, got {streams}")
    rng = np.random.default_rng(seed)
    per_rank = [n_ops // ranks + (1 if r < n_ops % ranks else 0) for r in range(ranks)]
    parts = [_random_rank(rng, m, streams) for m in per_rank]
    return _assemble(parts)


# ---------------------------------------------------------------------------------------------
# memcpy microbenchmark
# ---------------------------------------------------------------------------------------------
def memcpy_table(nbytes: int, direction: str, memory: str, repeat: int) -> pa.Table:
    """K x (cudaMemcpyAsync, the copy, cudaStreamSynchronize) on one stream, no CPU work between
    calls. A D2H copy into pageable memory is blocking: its call is split into a runtime op (the
    launch) and a sync op (the wait), and the stream sync that follows returns at once."""
    if repeat < 1:
        raise ConfigError(f"--repeat: expected at least 1, got {repeat}")
    d = CopyDir.H2D if direction.lower() == "h2d" else CopyDir.D2H
    mem = HostMem.PINNED if memory.lower() == "pinned" else HostMem.PAGEABLE
    blocking = d is CopyDir.D2H and mem is HostMem.PAGEABLE
    bw = PINNED_COPY_BW_BYTES_PER_S if mem is HostMem.PINNED else PAGEABLE_COPY_BW_BYTES_PER_S
    copy_ns = max(1, round(nbytes * 1e9 / bw) + COPY_FIXED_NS)
    copy_name = {
        (CopyDir.H2D, HostMem.PINNED): "Memcpy HtoD (Pinned -> Device)",
        (CopyDir.H2D, HostMem.PAGEABLE): "Memcpy HtoD (Pageable -> Device)",
        (CopyDir.D2H, HostMem.PINNED): "Memcpy DtoH (Device -> Pinned)",
        (CopyDir.D2H, HostMem.PAGEABLE): "Memcpy DtoH (Device -> Pageable)",
    }[(d, mem)]
    tpl = [(C_RT_BLOCK if blocking else C_RT_LAUNCH, "cudaMemcpyAsync"), (C_GPU, copy_name)]
    if blocking:
        tpl.append((C_SYNC_COPY, "cudaMemcpyAsync"))
    tpl.append((C_SYNC_STREAM, "cudaStreamSynchronize"))
    cls = np.tile(np.array([c for c, _ in tpl], np.int8), repeat)
    name = np.tile(np.array([_NAME_ID[nm] for _, nm in tpl], np.int32), repeat)
    gpu = cls == C_GPU
    dur = np.where(gpu, copy_ns, np.where(cls == C_RT_LAUNCH, RUNTIME_CALLS["cudaMemcpyAsync"], 0)).astype(np.int64)
    stream = np.zeros(cls.size, np.int64)
    cap = int(_CAP_BY_CLS[cls].sum())
    start, dur, esrc, edst, ekind = _simulate(cls, stream, dur, 1, LAUNCH_LATENCY_NS, SYNC_CALL_NS, SYNC_WAKE_NS, cap)
    ai = np.repeat(np.arange(repeat, dtype=np.int64), len(tpl))
    part = {
        "cls": cls, "name": name, "stream": stream + (MICROBENCH_STREAM_ID - FIRST_STREAM_ID),
        "bytes": np.where(gpu, nbytes, 0).astype(np.int64), "start": start, "dur": dur,
        "copy_dir": np.where(gpu, int(d), 0).astype(np.int8), "host_mem": np.where(gpu, int(mem), 0).astype(np.int8),
        "corr": np.where(gpu | (cls == C_RT_LAUNCH) | (cls == C_RT_BLOCK), ai + 1, -1),
        "step": np.full(cls.size, -1, np.int32),
        "esrc": esrc, "edst": edst, "ekind": ekind,
    }
    return _assemble([part])


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------
def _metadata(name: str, ranks: int) -> dict:
    return {
        "source_format": "synthetic",
        "capture_tool": "tracegen synth",
        "tool_versions": {"fastrack": __version__},
        "world_size": ranks,
        "ranks": list(range(ranks)),
        "emulated": True,
        "device_model": "synthetic-nominal",
        "trace_name": name,
    }


@click.group("synth", context_settings={"help_option_names": ["-h", "--help"]})
def command() -> None:
    """Write synthetic traces (consistent captured timelines from nominal costs)."""


@command.command("random")
@click.option("--ops", "n_ops", type=click.IntRange(min=1, max=MAX_SYNTH_OPS), required=True,
              help="Total number of ops (exact).")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), required=True, help="Random seed (same seed, same trace).")
@click.option("--ranks", type=click.IntRange(min=1), default=1, show_default=True, help="Ranks (ops split evenly).")
@click.option("--streams", type=click.IntRange(min=1, max=64), default=4, show_default=True,
              help="GPU streams per rank.")
@click.option("--name", "trace_name", default=None, help="Trace name (metadata).")
@click.option("-o", "--output", type=click.Path(), required=True, help="Output Parquet file.")
@click.option("--overwrite", is_flag=True, help="Replace OUTPUT if it exists (never a link, a directory or a device).")
@reports_errors
def random_cmd(n_ops: int, seed: int, ranks: int, streams: int, trace_name: str | None, output: str,
               overwrite: bool) -> None:
    """A random mix of CPU work, CUDA calls, kernels, copies, memsets, events and syncs."""
    check_output_path(output, (), overwrite)
    table = random_table(n_ops, seed, ranks, streams)
    name = trace_name or f"synth random ops={n_ops} seed={seed} ranks={ranks} streams={streams}"
    path = write_trace(output, table, _metadata(name, ranks))
    click.echo(f"wrote {path} ({table.num_rows} ops, {ranks} rank(s))")


@command.command("memcpy")
@click.option("--bytes", "size", required=True, help="Bytes per copy: 4096, 4KiB, 1MiB, 1GiB, 1e9, 2GB.")
@click.option("--direction", type=click.Choice(["h2d", "d2h"], case_sensitive=False), required=True,
              help="Copy direction: host to device or device to host.")
@click.option("--memory", type=click.Choice(["pinned", "pageable"], case_sensitive=False), required=True,
              help="Host memory of the copy.")
@click.option("--repeat", type=click.IntRange(min=1, max=10**7), default=10, show_default=True, help="Number of copies.")
@click.option("--name", "trace_name", default=None, help="Trace name (metadata).")
@click.option("-o", "--output", type=click.Path(), required=True, help="Output Parquet file.")
@click.option("--overwrite", is_flag=True, help="Replace OUTPUT if it exists (never a link, a directory or a device).")
@reports_errors
def memcpy_cmd(size: str, direction: str, memory: str, repeat: int, trace_name: str | None, output: str,
               overwrite: bool) -> None:
    """Transfer microbenchmark (like nvbandwidth): K x cudaMemcpyAsync + copy + cudaStreamSynchronize.

    Copy durations come from a nominal bandwidth (a synthetic stand-in; the replay re-prices
    copies under its hardware model)."""
    check_output_path(output, (), overwrite)
    nbytes = parse_size(size)
    table = memcpy_table(nbytes, direction, memory, repeat)
    name = trace_name or f"synth memcpy {direction.lower()} {memory.lower()} bytes={nbytes} x{repeat}"
    path = write_trace(output, table, _metadata(name, 1))
    click.echo(f"wrote {path} ({repeat} copies of {nbytes} bytes)")


__all__ = ["command", "parse_size", "random_table", "memcpy_table"]
