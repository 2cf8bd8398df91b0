"""Where each node of a replay goes on a timeline: processes, tracks, flows, steps, counters.

The layout is the same for every output format (:mod:`replay.exporters.timeline.chrome`,
:mod:`replay.exporters.timeline.pftrace`); it follows what the PyTorch profiler (Kineto) writes, so that
Holistic Trace Analysis and Perfetto read a replay as they read a profile:

* per rank, a **host** process (one track per host thread, tid = the thread id), a **GPU**
  process per device (one track per stream, tid = the stream id, pid = the device index for
  rank 0) and a **TEE** process with one track per hardware-model resource that did work (PCIe
  per direction, copy engines, secure copy channels, GPU authentication, CPU crypto, submission,
  links) and the bounce-slot counter;
* a node that overlaps the previous one on its track without nesting in it (a lane with several
  servers, or kernels a negative stream lag lets overlap) goes on a sub-track ``NAME #k``: trace
  viewers need slices on one track to nest;
* CPU crypto that runs inline in the calling thread stays on that thread (the thread is busy) and
  is drawn a second time on the rank's ``cpu_crypto`` track, marked as a copy (``mirror``), so that
  track shows all of the rank's CPU crypto whatever ran it;
* ``ac2g`` flows from the host call that launched a GPU op to the op (the LAUNCH edge; for a
  launch the protocol routed through a derived node such as ``cc_submit``, from the trace call
  that node derives from), and the launch's correlation id on both;
* a GPU op that the protocol carried out in stages on the TEE tracks (a CC copy: its stream node
  keeps no duration of its own) is drawn on its stream from when the stream reached it (the
  later of its first stage's start and the previous op's finish on that stream) to its
  completion, the time the stream was held by it, as a profiler records a copy; its ``args``
  carry ``staged: true``. A zero-length GPU slice would also break HTA, which rounds starts up
  and ends down to whole microseconds;
* ``ProfilerStep#N`` slices on a ``steps`` track of the host process, spanning the host work of
  each step the trace marks;
* collectives named as NCCL names its kernels (``ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)``),
  unless the trace already gave such a name, with the ``args`` PyTorch writes on them
  (:func:`nccl_names`, :func:`collective_args`): Holistic Trace Analysis counts communication by
  the name (``^nccl.*Kernel``), TraceLens by the name and those args.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from fastrack_core.schema import DepKind, OpKind
from replay.graph import NO_LANE, Category, LaneType, OpGraph
from replay.pipeline.engine import Schedule

HOST_PID_BASE = 1_000_000  # pid of rank r's host process: HOST_PID_BASE + r (Kineto: the OS pid)
TEE_PID_BASE = 2_000_000  # pid of rank r's TEE-resource process
GPU_PID_STRIDE = 1000  # pid of device d of rank r: r * GPU_PID_STRIDE + d (Kineto: the device index)
SYNTHETIC_TID_BASE = 1 << 30  # tids of tracks that are not a thread or a stream (steps, sub-tracks, ...)
# Correlation ids start here, as CUPTI's are large numbers: HTA sizes its correlation column by
# the values and then stores event indices in a column of the same type (pandas 3 refuses an
# index that does not fit, e.g. in int8 when every id is below 128)
CORRELATION_BASE = 1 << 20
STREAM_KEY_SHIFT = 40  # a stream lane's key is device << 40 | stream (replay/pipeline/build.py)

HOST, GPU, TEE = 0, 1, 2  # the side of a process

# Kineto event categories of trace ops (what the PyTorch profiler writes for the same activity)
KINETO_CAT = {
    OpKind.CPU: "cpu_op",
    OpKind.RUNTIME: "cuda_runtime",
    OpKind.SYNC: "cuda_runtime",
    OpKind.KERNEL: "kernel",
    OpKind.MEMCPY: "gpu_memcpy",
    OpKind.MEMSET: "gpu_memset",
    OpKind.COLLECTIVE: "kernel",  # NCCL kernels are plain kernels in Kineto
}
TEE_CAT = "tee"  # category of the nodes a protocol transform derives (codes >= 16)
# CPU crypto that runs on a host thread is CPU work of that thread: Kineto's CPU category, so that
# HTA's critical path takes it as an operator of the thread (named cpu_encrypt, ...) rather than a gap
HOST_CRYPTO_CAT = "cpu_op"

# NCCL kernel names (NCCL >= 2.19 spells them ncclDevKernel_<Coll>[_<RedOp>_<type>]_<ALGO>_<PROTO>
# (ncclDevKernelArgsStorage<4096ul>)); HTA's is_comm_kernel matches ^nccl.*Kernel
NCCL_KERNEL_RE = re.compile(r"^nccl.*Kernel")
NCCL_ARGS = "(ncclDevKernelArgsStorage<4096ul>)"
# collective of a name (letters only, lower case) -> (NCCL kernel stem, PyTorch's "Collective name",
# reduces?); searched in this order, so reduce_scatter is not taken for reduce
NCCL_COLLECTIVES = (
    ("allreduce", "AllReduce", "allreduce", True),
    ("reducescatter", "ReduceScatter", "reduce_scatter", True),
    ("allgather", "AllGather", "allgather", False),
    ("alltoall", "SendRecv", "all_to_all", False),
    ("broadcast", "Broadcast", "broadcast", False),
    ("reduce", "Reduce", "reduce", True),
    ("send", "SendRecv", "send", False),
    ("recv", "SendRecv", "recv", False),
)
# assumption: collectives whose trace records no element type carry fp32 (torch DDP all-reduces
# gradients in the parameters' dtype, fp32 unless a comm hook compresses them); only the name's
# type field and the element counts (bytes / 4) depend on it, not any time
NCCL_DTYPE, NCCL_DTYPE_TORCH, NCCL_DTYPE_BYTES = "f32", "Float", 4
NCCL_ALGO = "RING_LL"  # assumption: a label only (NCCL picks algorithm and protocol by size)
GPU_OP_KINDS = np.array([int(k) for k in (OpKind.KERNEL, OpKind.MEMCPY, OpKind.MEMSET, OpKind.COLLECTIVE)], np.int8)
HOST_OP_KINDS = np.array([int(k) for k in (OpKind.CPU, OpKind.RUNTIME, OpKind.SYNC)], np.int8)

# TEE tracks in display order (lane type -> sort rank); unlisted types follow
TEE_ORDER = {LaneType.PCIE_H2D: 0, LaneType.PCIE_D2H: 1, LaneType.COPY_ENGINE: 2, LaneType.GPU_CRYPTO: 3,
             LaneType.GPU_AUTH: 4, LaneType.CPU_CRYPTO: 5, LaneType.SUBMIT: 6, LaneType.LINK: 7}
CPU_CRYPTO_TRACK = "cpu_crypto"
BOUNCE_COUNTER = "bounce slots in use"


@dataclass(frozen=True)
class Process:
    pid: int
    name: str
    label: str  # Kineto's process_labels: "CPU", "GPU 0", ...
    sort: int
    rank: int
    side: int  # HOST, GPU or TEE


@dataclass(frozen=True)
class Track:
    pid: int
    tid: int
    name: str
    sort: int
    stream: int = -1  # GPU tracks: the stream id written in every slice's args (Kineto's "stream")
    device: int = -1


@dataclass
class Layout:
    processes: list[Process]
    tracks: list[Track]
    node_track: np.ndarray  # int32 per node: index into tracks
    mirror_node: np.ndarray  # int64: nodes drawn a second time (inline CPU crypto)
    mirror_track: np.ndarray  # int32: their second track
    flow_src: np.ndarray  # int64: launching host node of each flow
    flow_dst: np.ndarray  # int64: launched GPU node
    correlation: np.ndarray  # int64 per node: Kineto correlation id, -1 for none
    start: np.ndarray  # int64 per node: where the slice starts (sched.start, except staged GPU ops)
    staged: np.ndarray  # bool per node: a GPU op drawn over the span its stream was held (see above)
    name: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # int32 per node: index into names
    names: tuple[str, ...] = ()  # slice names: the graph's, then the NCCL names given to collectives
    collective: dict[int, str] = field(default_factory=dict)  # node -> its collective args (JSON members, ',' ended)
    host_crypto: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # bool per node: CPU crypto on a host thread
    steps: list[tuple[int, int, int, int]] = field(default_factory=list)  # (track, step, start ns, end ns)
    counters: list[tuple[int, str, np.ndarray, np.ndarray]] = field(default_factory=list)  # (pid, name, t, value)
    rank_pid: dict[int, int] = field(default_factory=dict)  # host pid per rank

    def track_counts(self) -> np.ndarray:
        """Slices per track (mirrors included)."""
        c = np.bincount(self.node_track, minlength=len(self.tracks))
        c += np.bincount(self.mirror_track, minlength=len(self.tracks))
        return c


def _split_overlaps(track: np.ndarray, start: np.ndarray, finish: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Sub-track index (0, 1, ...) of each of ``nodes`` on its ``track`` so that the slices of one
    sub-track nest or follow each other. Vectorised check; a Python pass only for tracks that need it."""
    sub = np.zeros(nodes.size, np.int32)
    if nodes.size < 2:
        return sub
    order = np.lexsort((nodes, -finish[nodes], start[nodes], track))
    t, s, f = track[order], start[nodes][order], finish[nodes][order]
    clash = (t[1:] == t[:-1]) & (f[:-1] > s[1:])
    if not clash.any():
        return sub
    for tr in np.unique(t[1:][clash]).tolist():
        pos = np.flatnonzero(t == tr)
        # independent segments: a slice that starts after every earlier one on the track ended
        # empties every stack. Only segments of two slices or more (those holding an overlap)
        # need the pass; a lone slice goes on sub-track 0
        ps, pf = s[pos], f[pos]
        opens = np.r_[True, ps[1:] >= np.maximum.accumulate(pf)[:-1]]
        seg = np.cumsum(opens) - 1
        sizes = np.bincount(seg)
        pos = pos[sizes[seg] > 1]
        opens = opens[sizes[seg] > 1]
        stacks: list[list[int]] = []
        for p, fresh in zip(pos.tolist(), opens.tolist()):
            if fresh:
                stacks = []
            si, fi = int(s[p]), int(f[p])
            for k, stack in enumerate(stacks):
                while stack and stack[-1] <= si:
                    stack.pop()
                if not stack or stack[-1] >= fi:
                    stack.append(fi)
                    sub[order[p]] = k
                    break
            else:
                stacks.append([fi])
                sub[order[p]] = len(stacks) - 1
    return sub


def _launch_pairs(graph: OpGraph) -> tuple[np.ndarray, np.ndarray]:
    """(host node, GPU op) of every GPU trace op with a LAUNCH edge: the first such edge's source,
    or, when that source is a derived node (``cc_submit``), the trace op of the same rank it derives from."""
    n = graph.n
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.dep_ptr))
    e = np.flatnonzero((graph.dep_kind == DepKind.LAUNCH) & np.isin(graph.kind[dst], GPU_OP_KINDS))
    if not e.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    d = dst[e]
    first = np.r_[True, d[1:] != d[:-1]]
    d, src = d[first], graph.dep_src[e[first]]
    derived = graph.kind[src] >= 16
    if derived.any():
        trace_nodes = np.flatnonzero(graph.kind < 16)
        key = (graph.rank[trace_nodes].astype(np.int64) << 40) + graph.op_id[trace_nodes]
        order = np.argsort(key, kind="stable")
        skey = key[order]
        want = (graph.rank[src[derived]].astype(np.int64) << 40) + graph.origin[src[derived]]
        pos = np.minimum(np.searchsorted(skey, want), max(skey.size - 1, 0))
        found = skey[pos] == want if skey.size else np.zeros(want.size, bool)
        mapped = np.where(found, trace_nodes[order][pos], -1)
        src = src.copy()
        src[np.flatnonzero(derived)] = mapped
    host = np.isin(graph.kind[np.maximum(src, 0)], HOST_OP_KINDS) & (src >= 0)
    return src[host], d[host]


def _launch_ready(graph: OpGraph, sched: Schedule) -> np.ndarray:
    """Per node, the earliest start its LAUNCH edges allow (the call's start + the edge's lag, the
    engine's rule), or the int64 minimum where it has none."""
    ready = np.full(graph.n, np.iinfo(np.int64).min, np.int64)
    dst = np.repeat(np.arange(graph.n, dtype=np.int64), np.diff(graph.dep_ptr))
    e = np.flatnonzero(graph.dep_kind == DepKind.LAUNCH)
    if e.size:
        np.maximum.at(ready, dst[e], sched.start[graph.dep_src[e]] + graph.dep_lag[e])
    return ready


def _step_spans(graph: OpGraph, sched: Schedule, host_nodes: np.ndarray) -> list[tuple[int, int, int, int]]:
    """(rank, step, start, end) of the host work of every step, in time order per rank; a step's
    end is cut at the next step's start on the same rank so that the slices follow each other."""
    has = host_nodes[graph.step[host_nodes] >= 0]
    if not has.size:
        return []
    key = (graph.rank[has].astype(np.int64) << 32) | graph.step[has].astype(np.int64)
    order = np.argsort(key, kind="stable")
    k = key[order]
    first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    s0 = np.minimum.reduceat(sched.start[has][order], first)
    s1 = np.maximum.reduceat(sched.finish[has][order], first)
    rows = sorted(zip((k[first] >> 32).tolist(), s0.tolist(), s1.tolist(), (k[first] & 0xFFFFFFFF).tolist()))
    out = []
    for i, (r, a, b, st) in enumerate(rows):
        if i + 1 < len(rows) and rows[i + 1][0] == r:
            b = min(b, rows[i + 1][1])
        out.append((r, st, a, max(a, b)))
    return out


def bounce_occupancy(graph: OpGraph, sched: Schedule) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per pool lane: (times ns, slots in use) steps of the bounce-slot pool. A chunk holds its slot
    from the start of the node that takes it (``hold_lane``) to the finish of the node that returns
    it (``hold_until``), the interval the resources report counts (:func:`replay.pipeline.results.resource_usage`)."""
    holders = np.flatnonzero(graph.hold_lane >= 0)
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for lane in np.unique(graph.hold_lane[holders]).tolist():
        h = holders[graph.hold_lane[holders] == lane]
        t = np.concatenate([sched.start[h], sched.finish[graph.hold_until[h]]])
        d = np.concatenate([np.ones(h.size, np.int64), -np.ones(h.size, np.int64)])
        order = np.lexsort((d, t))  # at one instant, returns before takes
        t, level = t[order], np.cumsum(d[order])
        last = np.r_[t[1:] != t[:-1], True]  # one value per instant: the level after all its changes
        out[int(lane)] = (t[last], level[last])
    return out


def _staged_starts(graph: OpGraph, sched: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """Drawn start of every node, and which GPU ops were widened to the span their stream was held."""
    start = sched.start.copy()
    gpu = np.flatnonzero(np.isin(graph.kind, GPU_OP_KINDS) & (sched.finish == sched.start) & (graph.lane >= 0))
    derived = np.flatnonzero(graph.kind >= 16)
    staged = np.zeros(graph.n, bool)
    if not gpu.size or not derived.size:
        return start, staged
    dkey = (graph.rank[derived].astype(np.int64) << 40) + graph.origin[derived]
    order = np.lexsort((sched.start[derived], dkey))
    dkey, dstart = dkey[order], sched.start[derived][order]
    first = np.r_[True, dkey[1:] != dkey[:-1]]
    ukey, ustart = dkey[first], dstart[first]  # earliest stage start per (rank, origin op)
    gkey = (graph.rank[gpu].astype(np.int64) << 40) + graph.origin[gpu]  # (a what-if collective: its marker)
    pos = np.minimum(np.searchsorted(ukey, gkey), ukey.size - 1)
    hit = ukey[pos] == gkey
    gpu, first_stage = gpu[hit], ustart[pos[hit]]
    # previous node on the same lane (in-order stream): by start, ties by index
    lane_nodes = np.flatnonzero(np.isin(graph.lane, np.unique(graph.lane[gpu])))
    lo = lane_nodes[np.lexsort((lane_nodes, sched.start[lane_nodes], graph.lane[lane_nodes]))]
    prev_finish = np.full(graph.n, np.iinfo(np.int64).min, np.int64)
    same = graph.lane[lo[1:]] == graph.lane[lo[:-1]]
    prev_finish[lo[1:][same]] = sched.finish[lo[:-1]][same]
    # never before its launch allows: a collective's first stage on this rank may be a receive
    # that began before the rank launched the kernel (HTA's queue length would go below 0)
    launch = _launch_ready(graph, sched)[gpu]
    s = np.minimum(np.maximum(np.maximum(first_stage, prev_finish[gpu]), launch), sched.finish[gpu])
    start[gpu] = s
    staged[gpu] = s < sched.finish[gpu]
    return start, staged


def _collective_of(name: str) -> tuple[str, str, bool] | None:
    key = re.sub(r"[^a-z]", "", name.lower())
    for word, stem, torch_name, reduces in NCCL_COLLECTIVES:
        if word in key:
            return stem, torch_name, reduces
    return None


def nccl_name(name: str) -> str:
    """The name NCCL gives the kernel of the collective ``name`` (kept when it is one already)."""
    if NCCL_KERNEL_RE.match(name):
        return name
    coll = _collective_of(name)
    if coll is None:
        return f"ncclDevKernel_Generic{NCCL_ARGS}"
    stem, _, reduces = coll
    if stem == "SendRecv":
        return f"ncclDevKernel_SendRecv{NCCL_ARGS}"
    middle = f"_Sum_{NCCL_DTYPE}" if reduces else ""
    return f"ncclDevKernel_{stem}{middle}_{NCCL_ALGO}{NCCL_ARGS}"


def nccl_names(graph: OpGraph) -> tuple[np.ndarray, tuple[str, ...]]:
    """Per node, the index of its slice name, and the names: the graph's, then the NCCL names of
    collectives whose trace name is not one (a name used by other nodes too keeps its meaning there)."""
    names = list(graph.names)
    name = graph.name.astype(np.int32, copy=True)
    coll = np.flatnonzero(graph.kind == OpKind.COLLECTIVE)
    if not coll.size:
        return name, tuple(names)
    index = {s: k for k, s in enumerate(names)}
    for old in np.unique(name[coll]).tolist():
        new = nccl_name(names[old])
        if new != names[old]:
            if new not in index:
                index[new] = len(names)
                names.append(new)
            name[coll[name[coll] == old]] = index[new]
    return name, tuple(names)


def collective_args(graph: OpGraph) -> dict[int, str]:
    """The ``args`` of each collective node as PyTorch writes them on an NCCL kernel (the
    members TraceLens reads: ``Collective name``, ``Process Group Name``/``Ranks``, ``Group
    size``, ``dtype``, ``In``/``Out msg nelems``, split sizes), as JSON members each ended by a
    comma. The group is the collective's barrier group (its members on every rank), or, where
    the protocol replaced the barrier by messages (the TEE protocols drop the groups) or the
    trace gave none, every rank of the replay (the default process group); process groups are
    numbered by their rank sets in order of first appearance."""
    coll = np.flatnonzero(graph.kind == OpKind.COLLECTIVE)
    if not coll.size:
        return {}
    grp = graph.group[coll]
    member_ranks: dict[int, list[int]] = {}
    grouped = coll[grp >= 0]
    if grouped.size:
        order = np.lexsort((graph.rank[grouped], graph.group[grouped]))
        g, r = graph.group[grouped][order], graph.rank[grouped][order]
        first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        for lo, hi in zip(first.tolist(), np.r_[first[1:], g.size].tolist()):
            member_ranks[int(g[lo])] = sorted(set(r[lo:hi].tolist()))
    world = sorted(set(np.unique(graph.rank).tolist()))
    pg_names: dict[tuple[int, ...], int] = {}
    coll_of_name: dict[int, tuple[str, str, bool] | None] = {}
    out = {}
    for i, gi, b, nm in zip(coll.tolist(), grp.tolist(), graph.bytes[coll].tolist(), graph.name[coll].tolist()):
        ranks = tuple(member_ranks.get(gi, world))
        pg = pg_names.setdefault(ranks, len(pg_names))
        if nm not in coll_of_name:
            coll_of_name[nm] = _collective_of(graph.names[nm])
        c = coll_of_name[nm]
        nel = max(int(b), 0) // NCCL_DTYPE_BYTES
        out[i] = (f'"Collective name":"{c[1] if c else "unknown"}","Process Group Name":"{pg}",'
                  f'"Process Group Ranks":[{",".join(map(str, ranks))}],"Group size":{len(ranks)},'
                  f'"dtype":"{NCCL_DTYPE_TORCH}","In msg nelems":{nel},"Out msg nelems":{nel},'
                  f'"In split size":[],"Out split size":[],')
    return out


def _host_tid(key: int, lane: int) -> int:
    return key if 0 <= key < SYNTHETIC_TID_BASE else SYNTHETIC_TID_BASE - 1 - lane


def build_layout(graph: OpGraph, sched: Schedule, protocol: str) -> Layout:
    lanes = graph.lanes
    n = graph.n
    ranks = sorted(set(np.unique(graph.rank).tolist()) | set(np.unique(lanes.rank).tolist()))
    used = np.zeros(len(lanes), bool)
    used[graph.lane[graph.lane >= 0]] = True
    processes: dict[tuple[int, int, int], Process] = {}

    def process(rank: int, side: int, device: int = 0) -> Process:
        key = (rank, side, device)
        if key not in processes:
            if side == HOST:
                p = Process(HOST_PID_BASE + rank, f"rank {rank} host (replayed: {protocol})", "CPU", 3 * rank, rank, side)
            elif side == GPU:
                p = Process(rank * GPU_PID_STRIDE + device, f"rank {rank} GPU {device}", f"GPU {device}",
                            3 * rank + 1, rank, side)
            else:
                p = Process(TEE_PID_BASE + rank, f"rank {rank} TEE resources ({protocol})", "TEE", 3 * rank + 2,
                            rank, side)
            processes[key] = p
        return processes[key]

    # base track of each lane (and of "no lane" nodes per rank)
    base: list[Track] = []
    lane_base = np.full(len(lanes), -1, np.int64)
    crypto_base: dict[int, int] = {}
    synth: dict[int, int] = {}

    def synthetic_tid(pid: int) -> int:
        synth[pid] = synth.get(pid, 0) + 1
        return SYNTHETIC_TID_BASE + synth[pid]

    for li in range(len(lanes)):
        ty, r, key = LaneType(int(lanes.type[li])), int(lanes.rank[li]), int(lanes.key[li])
        label = lanes.names[li].split("/", 1)[-1]
        if ty == LaneType.BOUNCE_POOL or not (used[li] or ty == LaneType.CPU_CRYPTO):
            continue
        if ty == LaneType.HOST_THREAD:
            p = process(r, HOST)
            name = f"thread {key}" if key >= 0 else "host thread (no id in the trace)"
            base.append(Track(p.pid, _host_tid(key, li), name, li))
        elif ty == LaneType.STREAM:
            dev, stream = key >> STREAM_KEY_SHIFT, key & ((1 << STREAM_KEY_SHIFT) - 1)
            p = process(r, GPU, dev)
            base.append(Track(p.pid, stream, f"stream {stream}", stream, stream=stream, device=dev))
        else:
            p = process(r, TEE)
            if ty == LaneType.CPU_CRYPTO:
                if r in crypto_base:
                    lane_base[li] = crypto_base[r]
                    continue
                crypto_base[r] = len(base)
                label = CPU_CRYPTO_TRACK
            base.append(Track(p.pid, synthetic_tid(p.pid), label, 100 * TEE_ORDER.get(ty, 50) + li))
        lane_base[li] = len(base) - 1
    node_base = np.where(graph.lane >= 0, lane_base[np.maximum(graph.lane, 0)], -1)
    loose = np.flatnonzero(graph.lane == NO_LANE)
    for r in np.unique(graph.rank[loose]).tolist():
        p = process(r, HOST)
        base.append(Track(p.pid, synthetic_tid(p.pid), "no server (latency only)", 1 << 20))
        node_base[loose[graph.rank[loose] == r]] = len(base) - 1

    # inline CPU crypto: a copy on the rank's cpu_crypto track
    on_host = np.zeros(len(lanes) + 1, bool)
    on_host[:-1] = lanes.type == LaneType.HOST_THREAD
    host_nodes = np.flatnonzero(on_host[graph.lane])  # graph.lane == -1 indexes the trailing False
    mirror = host_nodes[graph.category[host_nodes] == Category.CPU_CRYPTO]
    for r in np.unique(graph.rank[mirror]).tolist():
        if r not in crypto_base:
            p = process(r, TEE)
            base.append(Track(p.pid, synthetic_tid(p.pid), CPU_CRYPTO_TRACK, 100 * TEE_ORDER[LaneType.CPU_CRYPTO]))
            crypto_base[r] = len(base) - 1
    crypto_of_rank = np.full(max(ranks, default=0) + 1, -1, np.int64)
    for r, t in crypto_base.items():
        crypto_of_rank[r] = t
    mirror_base = crypto_of_rank[graph.rank[mirror]]

    # sub-tracks where slices on one track overlap without nesting (nodes and mirrors together)
    drawn, staged = _staged_starts(graph, sched)
    all_nodes = np.concatenate([np.arange(n, dtype=np.int64), mirror])
    all_base = np.concatenate([node_base, mirror_base])
    sub = _split_overlaps(all_base, drawn, sched.finish, all_nodes) if n else np.zeros(0, np.int32)
    tracks: list[Track] = []
    index: dict[tuple[int, int], int] = {}
    final = np.empty(all_nodes.size, np.int32)
    keys = all_base * 1_000_000 + sub  # (track, sub-track) in one sortable key (sub-tracks < 10^6)
    uk, inv = np.unique(keys, return_inverse=True)
    for b, k in ((int(u) // 1_000_000, int(u) % 1_000_000) for u in uk.tolist()):
        t = base[b]
        if k == 0:
            tracks.append(t)
        else:
            tracks.append(Track(t.pid, synthetic_tid(t.pid), f"{t.name} #{k}", t.sort, t.stream, t.device))
        index[(b, k)] = len(tracks) - 1
    if all_nodes.size:
        ids = np.array([index[(int(u) // 1_000_000, int(u) % 1_000_000)] for u in uk.tolist()], np.int32)
        final = ids[inv.reshape(-1)]
    # an empty cpu_crypto lane (crypto inline, nothing mirrored) gets no track: only non-empty tracks are drawn

    src, dst = _launch_pairs(graph)
    corr = np.full(n, -1, np.int64)
    corr[src] = CORRELATION_BASE + src
    corr[dst] = CORRELATION_BASE + src
    gpu_ops = np.flatnonzero(np.isin(graph.kind, GPU_OP_KINDS) & (corr < 0))
    corr[gpu_ops] = CORRELATION_BASE + n + gpu_ops  # launched by nothing in the trace: an id no host call has

    steps = []
    for r, st, a, b in _step_spans(graph, sched, host_nodes[graph.kind[host_nodes] < 16]):
        p = process(r, HOST)
        key = ("steps", p.pid)
        if key not in index:
            tracks.append(Track(p.pid, synthetic_tid(p.pid), "steps", -1))
            index[key] = len(tracks) - 1
        steps.append((index[key], st, a, b))

    counters = []
    for lane, (t, v) in bounce_occupancy(graph, sched).items():
        counters.append((process(int(lanes.rank[lane]), TEE).pid, BOUNCE_COUNTER, t, v))

    procs = sorted(processes.values(), key=lambda p: p.sort)
    name, names = nccl_names(graph)
    host_crypto = np.zeros(n, bool)
    host_crypto[mirror] = True
    return Layout(processes=procs, tracks=tracks, node_track=final[:n], mirror_node=mirror,
                  mirror_track=final[n:], flow_src=src, flow_dst=dst, correlation=corr, start=drawn, staged=staged,
                  name=name, names=names, collective=collective_args(graph), host_crypto=host_crypto, steps=steps,
                  counters=counters, rank_pid={p.rank: p.pid for p in procs if p.side == HOST})
