"""Tiny hand-built OpGraphs for protocol/model tests (no trace files involved)."""
from __future__ import annotations

import numpy as np

from fastrack.schema import CopyDir, DepKind, HostMem, OpKind
from replay.graph import KIND_CATEGORY, Lanes, LaneType, OpGraph


class HandGraph:
    """Add ops in issue order; PROGRAM/STREAM edges are added automatically.

    host ops live on (rank, thread); GPU ops on (rank, stream). ``order`` = the op's issue index x 10.
    """

    def __init__(self):
        self.ops = []
        self.edges = []  # (src, dst, kind, lag)
        self.last_on = {}

    def _add(self, kind, dur, lane_key, rank, nbytes=0, copy_dir=CopyDir.NONE, host_mem=HostMem.NONE, name="op"):
        i = len(self.ops)
        self.ops.append(dict(kind=int(kind), dur=int(dur), lane_key=lane_key, rank=rank, bytes=int(nbytes),
                             copy_dir=int(copy_dir), host_mem=int(host_mem), name=name))
        prev = self.last_on.get(lane_key)
        if prev is not None:
            self.edges.append((prev, i, DepKind.PROGRAM if lane_key[1] == "thread" else DepKind.STREAM, 0))
        self.last_on[lane_key] = i
        return i

    def cpu(self, dur, thread=0, rank=0, kind=OpKind.CPU):
        return self._add(kind, dur, (rank, "thread", thread), rank, name=kind.name.lower())

    def call(self, dur, thread=0, rank=0):
        return self.cpu(dur, thread, rank, OpKind.RUNTIME)

    def gpu(self, kind, dur, stream, launched_by, rank=0, nbytes=0, copy_dir=CopyDir.NONE,
            host_mem=HostMem.NONE, lag=0):
        i = self._add(kind, dur, (rank, "stream", stream), rank, nbytes, copy_dir, host_mem, kind.name.lower())
        if launched_by is not None:
            self.edges.append((launched_by, i, DepKind.LAUNCH, lag))
        return i

    def kernel(self, dur, stream, launched_by, rank=0):
        return self.gpu(OpKind.KERNEL, dur, stream, launched_by, rank)

    def copy(self, nbytes, direction, stream, launched_by, rank=0, dur=1, host_mem=HostMem.PINNED):
        return self.gpu(OpKind.MEMCPY, dur, stream, launched_by, rank, nbytes, direction, host_mem)

    def sync(self, waits_for, dur=0, thread=0, rank=0):
        i = self.cpu(dur, thread, rank, OpKind.SYNC)
        for w in np.atleast_1d(waits_for):
            self.edges.append((int(w), i, DepKind.SYNC, 0))
        return i

    def dep(self, src, dst, kind=DepKind.EVENT, lag=0):
        self.edges.append((src, dst, kind, lag))

    def build(self) -> OpGraph:
        n = len(self.ops)
        keys = sorted({o["lane_key"] for o in self.ops})
        lane_of = {k: i for i, k in enumerate(keys)}
        lanes = Lanes(rank=np.array([k[0] for k in keys], np.int32),
                      type=np.array([LaneType.HOST_THREAD if k[1] == "thread" else LaneType.STREAM for k in keys],
                                    np.int8),
                      key=np.array([k[2] for k in keys], np.int64), servers=np.ones(len(keys), np.int32),
                      names=tuple(f"rank{k[0]}/{k[1]} {k[2]}" for k in keys))
        edges = sorted(self.edges, key=lambda e: e[1])
        ptr = np.zeros(n + 1, np.int64)
        for _, d, _, _ in edges:
            ptr[d + 1] += 1
        kind = np.array([o["kind"] for o in self.ops], np.int8)
        names = sorted({o["name"] for o in self.ops})
        return OpGraph(
            op_id=np.arange(n, dtype=np.int64), origin=np.arange(n, dtype=np.int64),
            rank=np.array([o["rank"] for o in self.ops], np.int32), kind=kind,
            category=np.array([KIND_CATEGORY[OpKind(k)] for k in kind], np.int8),
            lane=np.array([lane_of[o["lane_key"]] for o in self.ops], np.int32),
            dur=np.array([o["dur"] for o in self.ops], np.int64),
            bytes=np.array([o["bytes"] for o in self.ops], np.int64),
            copy_dir=np.array([o["copy_dir"] for o in self.ops], np.int8),
            host_mem=np.array([o["host_mem"] for o in self.ops], np.int8),
            name=np.array([names.index(o["name"]) for o in self.ops], np.int32),
            order=np.arange(n, dtype=np.int64) * 10, release=np.zeros(n, np.int64),
            group=np.full(n, -1, np.int64), dep_ptr=np.cumsum(ptr),
            dep_src=np.array([e[0] for e in edges], np.int64), dep_kind=np.array([e[2] for e in edges], np.uint8),
            dep_lag=np.array([e[3] for e in edges], np.int64), lanes=lanes, names=tuple(names),
            captured_start=np.arange(n, dtype=np.int64) * 10, captured_dur=np.array([o["dur"] for o in self.ops]),
            step=np.full(n, -1, np.int32))


# A round-number preset for hand-checkable times: 1 GB/s = 1 byte/ns, so 1 MB takes 1 ms.
ROUND = {
    "gpu": {"sms": 4, "copy_engines": 2},
    "pcie": {"h2d_bandwidth_gb_s": 1.0, "d2h_bandwidth_gb_s": 1.0, "latency_ns": 1000},
    "cpu_crypto": {"core_gb_s": 1.0, "call_overhead_ns": 0, "call_bytes": 1_000_000, "threads": 1},
    "ce": {"crypto_gb_s": 2.0, "op_overhead_ns": 0},
    "auth": {"serial_gb_s": 0.5, "parallel_gb_s_per_sm": 1.0, "op_overhead_ns": 0},
    "submit": {"kernel_ns": 1000, "copy_ns": 1000, "memset_ns": 1000, "collective_ns": 1000},
    "bounce": {"slot_bytes": 1_000_000, "slots": 2, "growth": "none", "max_slots": 2},
    "direct": {"h2d": "all", "d2h": "none", "min_bytes": 0},
    # multi-GPU (tests/test_multigpu.py): NVLink 10 GB/s = 10 bytes/ns, 1 us per ring step
    "topology": {"gpus_per_node": 8, "link": "nvlink", "nvlink_gb_s": 10.0, "nvlink_latency_ns": 1000,
                 "pcie_p2p_gb_s": 1.0, "pcie_p2p_latency_ns": 2000, "internode_gb_s": 1.0,
                 "internode_latency_ns": 5000, "allreduce": "ring"},
    "keys": {"usage_limit": 10**12, "ivs_per_key": 2**31, "rotation_stall_ns": 1_000_000},
}


def round_raw(**changes) -> dict:
    """ROUND as a preset mapping (every key gets a source); ``changes``: {"pcie.latency_ns": 0}."""
    raw = {t: dict(v) for t, v in ROUND.items()}
    for dotted, value in changes.items():
        t, k = dotted.split(".")
        raw[t][k] = value
    for t in raw.values():
        for k in list(t):
            t[k + "_source"] = "test: round number"
    return raw


def round_model(*overrides: str, **changes):
    from fastrack_models.h100 import H100Model

    return H100Model.from_dict(round_raw(**changes), list(overrides), name="round")


def big_graph(n_ops: int, copy_share: float = 0.1, streams: int = 4, seed: int = 0) -> OpGraph:
    """A large graph built with numpy (for speed checks): one host thread alternating CUDA calls
    and the GPU ops they launch on ``streams`` streams; ``copy_share`` of all ops are H2D/D2H
    copies of 4 KiB..16 MiB (log-uniform), the other GPU ops kernels of 2-200 us."""
    rng = np.random.default_rng(seed)
    calls = n_ops // 2
    n = 2 * calls
    call = np.arange(0, n, 2)
    gpu = call + 1
    stream = rng.integers(0, streams, calls)
    is_copy = rng.random(calls) < 2 * copy_share
    kind = np.empty(n, np.int8)
    kind[call] = OpKind.RUNTIME
    kind[gpu] = np.where(is_copy, OpKind.MEMCPY, OpKind.KERNEL)
    nbytes = np.zeros(n, np.int64)
    nbytes[gpu] = np.where(is_copy, np.exp(rng.uniform(np.log(4096), np.log(16 << 20), calls)).astype(np.int64), 0)
    copy_dir = np.zeros(n, np.int8)
    copy_dir[gpu] = np.where(is_copy, np.where(rng.random(calls) < 0.6, CopyDir.H2D, CopyDir.D2H), CopyDir.NONE)
    host_mem = np.zeros(n, np.int8)
    host_mem[gpu] = np.where(is_copy, HostMem.PINNED, HostMem.NONE)
    dur = np.empty(n, np.int64)
    dur[call] = rng.integers(2_000, 8_000, calls)
    dur[gpu] = rng.integers(2_000, 200_000, calls)
    lane = np.empty(n, np.int32)
    lane[call] = 0
    lane[gpu] = 1 + stream
    # edges: PROGRAM call->next call, LAUNCH call->gpu op, STREAM previous op of the stream
    src = [call[:-1], call]
    dst = [call[1:], gpu]
    kinds = [np.full(calls - 1, DepKind.PROGRAM), np.full(calls, DepKind.LAUNCH)]
    o = np.lexsort((gpu, stream))
    same = stream[o][1:] == stream[o][:-1]
    src.append(gpu[o][:-1][same])
    dst.append(gpu[o][1:][same])
    kinds.append(np.full(int(same.sum()), DepKind.STREAM))
    src, dst, kinds = np.concatenate(src), np.concatenate(dst), np.concatenate(kinds).astype(np.uint8)
    e = np.argsort(dst, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=ptr[1:])
    start = np.cumsum(dur[call])
    order = np.empty(n, np.int64)
    order[call] = start
    order[gpu] = start + 1
    cat = np.array([KIND_CATEGORY[OpKind(k)] for k in range(7)], np.int8)[kind]
    lanes = Lanes(rank=np.zeros(1 + streams, np.int32),
                  type=np.array([LaneType.HOST_THREAD] + [LaneType.STREAM] * streams, np.int8),
                  key=np.arange(1 + streams, dtype=np.int64), servers=np.ones(1 + streams, np.int32),
                  names=("rank0/thread 0",) + tuple(f"rank0/stream {s}" for s in range(streams)))
    return OpGraph(
        op_id=np.arange(n, dtype=np.int64), origin=np.arange(n, dtype=np.int64), rank=np.zeros(n, np.int32),
        kind=kind, category=cat, lane=lane, dur=dur, bytes=nbytes, copy_dir=copy_dir, host_mem=host_mem,
        name=np.zeros(n, np.int32), order=order, release=np.zeros(n, np.int64), group=np.full(n, -1, np.int64),
        dep_ptr=ptr, dep_src=src[e].astype(np.int64), dep_kind=kinds[e], dep_lag=np.zeros(src.size, np.int64),
        lanes=lanes, names=("op",), captured_start=order.copy(), captured_dur=dur.copy(),
        step=np.full(n, -1, np.int32))
