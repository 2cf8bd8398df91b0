"""Build the dependency graph of a trace: trace (Parquet rows) -> :class:`OpGraph`.

What the builder derives from the *measured* timeline (so that replaying the graph with measured
durations reproduces it, and so that protocol transforms change only what they model):

* **lanes**: one per (rank, host thread) and one per (rank, device, stream);
* **launch lag** (LAUNCH edges, start-to-start): measured ``start[gpu op] - start[call]`` when the
  launch was what held the GPU op back; when the op instead waited for its stream (or another
  dependency), the measured gap includes queueing, so the lag is the smaller of the measured gap
  and the rank's median launch lag among launch-bound ops;
* **stream overlap** (STREAM edges): ``min(0, start[op] - finish[previous])``: consecutive
  kernels that measurably overlap keep overlapping;
* **CPU gaps** (PROGRAM edges): any idle time between a host op and the later of its
  prerequisites is kept as a lag (importers normally fill it with explicit ``cpu`` ops already);
* **blocking calls** (``sync`` ops): only the part after the awaited GPU work finished is kept as
  duration; the wait itself comes out of the replay;
* **barrier groups**: the members of one collective on all ranks present (COLLECTIVE deps),
  each with the shortest measured duration of the group (the last rank to arrive waited least;
  that is the transfer itself, the rest was waiting for peers);
* **release**: a node with no prerequisite starts at its measured start.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from fastrack.errors import GraphError
from fastrack.schema import COPY_DIR_BY_LABEL, HOST_MEM_BY_LABEL, DepKind, OpKind
from fastrack.traceio import Trace
from replay.graph import KIND_CATEGORY, Lanes, LaneType, OpGraph, edges_by_dependent

_STREAM_KEY_SHIFT = 40  # lane key of a stream: device << 40 | stream


def _dict_codes(table: pa.Table, name: str, mapping: dict, default: int) -> np.ndarray:
    """Map a dictionary-encoded string column to integer codes via ``mapping``."""
    col = table.column(name).combine_chunks()
    if not pa.types.is_dictionary(col.type):
        col = col.dictionary_encode()
    labels = col.dictionary.to_pylist()
    lut = np.array([mapping.get(v, default) if v is not None else default for v in labels] or [default], np.int64)
    idx = col.indices.to_numpy(zero_copy_only=False)
    if col.null_count:
        idx = np.where(col.is_valid().to_numpy(zero_copy_only=False), idx, 0)
        out = lut[idx.astype(np.int64)]
        out[~col.is_valid().to_numpy(zero_copy_only=False)] = default
        return out
    return lut[idx.astype(np.int64)]


def _names(table: pa.Table) -> tuple[np.ndarray, tuple[str, ...]]:
    col = table.column("name").combine_chunks()
    if not pa.types.is_dictionary(col.type):
        col = col.dictionary_encode()
    col = col.unify_dictionaries() if hasattr(col, "unify_dictionaries") else col
    return col.indices.to_numpy(zero_copy_only=False).astype(np.int32), tuple(col.dictionary.to_pylist())


def _segment_max(values: np.ndarray, ptr: np.ndarray, empty: int) -> np.ndarray:
    """Max of values[ptr[i]:ptr[i+1]] per segment; ``empty`` for empty segments."""
    n = ptr.shape[0] - 1
    out = np.full(n, empty, np.int64)
    nonempty = np.flatnonzero(ptr[1:] > ptr[:-1])
    if nonempty.size:
        out[nonempty] = np.maximum.reduceat(values, ptr[:-1][nonempty])
    return out


def build_graph(trace: Trace) -> OpGraph:
    """The dependency graph of a trace, with measured durations (the ``captured`` replay)."""
    t = trace.table
    path = trace.path
    n = t.num_rows
    op_id = t.column("op_id").to_numpy().astype(np.int64)
    rank = t.column("rank").to_numpy().astype(np.int32)
    device = t.column("device").to_numpy().astype(np.int64)
    thread = t.column("thread").to_numpy().astype(np.int64)
    stream = t.column("stream").to_numpy().astype(np.int64)
    start = t.column("start_ns").to_numpy().astype(np.int64)
    dur = t.column("dur_ns").to_numpy().astype(np.int64)
    kind = _dict_codes(t, "kind", {k.label: int(k) for k in OpKind}, -1).astype(np.int8)
    if np.any(kind < 0):
        raise GraphError("trace has an op of unknown kind", path=path)
    name, names = _names(t)
    finish = start + dur

    # --- op id -> index ---
    if n and op_id[0] == 0 and np.all(np.diff(op_id) == 1):  # the usual 0..n-1: no sort needed
        order_ids = op_id
        sorted_ids = op_id
    else:
        order_ids = np.argsort(op_id, kind="stable")
        sorted_ids = op_id[order_ids]

    deps = t.column("deps").combine_chunks()
    dep_kinds = t.column("dep_kinds").combine_chunks()
    ptr_in = deps.offsets.to_numpy().astype(np.int64) - int(deps.offsets[0].as_py())
    dep_ids = deps.values.to_numpy().astype(np.int64)[int(deps.offsets[0].as_py()):][: ptr_in[-1]]
    kinds_e = dep_kinds.values.to_numpy().astype(np.uint8)[int(dep_kinds.offsets[0].as_py()):][: ptr_in[-1]]
    dst_e = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr_in))
    pos = np.searchsorted(sorted_ids, dep_ids)
    pos_c = np.minimum(pos, n - 1)
    dangling = sorted_ids[pos_c] != dep_ids
    if np.any(dangling):
        e = int(np.flatnonzero(dangling)[0])
        raise GraphError(
            f"op {int(op_id[dst_e[e]])} depends on op {int(dep_ids[e])}, which is not in the trace "
            f"({int(dangling.sum())} dangling dependencies)", path=path)
    src_e = order_ids[pos_c].astype(np.int64)
    self_loop = src_e == dst_e
    if np.any(self_loop):
        raise GraphError(f"op {int(op_id[dst_e[np.flatnonzero(self_loop)[0]]])} depends on itself", path=path)

    # --- collective groups (COLLECTIVE deps are group membership, not edges) ---
    is_coll = kinds_e == DepKind.COLLECTIVE
    group = _collective_groups(n, src_e[is_coll], dst_e[is_coll])
    src_e, dst_e, kinds_e = src_e[~is_coll], dst_e[~is_coll], kinds_e[~is_coll]
    if group.max(initial=-1) >= 0:
        dur = _group_durations(group, dur)

    eorder, dep_ptr = edges_by_dependent(dst_e, n)
    src_e, dst_e, kinds_e = src_e[eorder], dst_e[eorder], kinds_e[eorder]
    lag = np.zeros(src_e.shape[0], np.int64)

    # STREAM: keep measured overlap (negative lag only)
    m = kinds_e == DepKind.STREAM
    lag[m] = np.minimum(0, start[dst_e[m]] - finish[src_e[m]])
    # finish-to-start bound of every node from non-launch edges (measured times)
    fs = kinds_e != DepKind.LAUNCH
    fs_bound = _segment_max(np.where(fs, finish[src_e] + lag, np.iinfo(np.int64).min // 4), dep_ptr,
                            np.iinfo(np.int64).min // 4)
    # LAUNCH lags
    m = kinds_e == DepKind.LAUNCH
    measured = np.maximum(0, start[dst_e[m]] - start[src_e[m]])
    launch_bound = fs_bound[dst_e[m]] < start[dst_e[m]]
    typical = _median_by_rank(rank[dst_e[m]], measured, launch_bound, rank)
    lag[m] = np.where(launch_bound, measured, np.minimum(measured, typical[dst_e[m]]))
    # PROGRAM: keep idle CPU time after the binding prerequisite
    all_bound = np.maximum(fs_bound, _segment_max(
        np.where(kinds_e == DepKind.LAUNCH, start[src_e] + lag, np.iinfo(np.int64).min // 4), dep_ptr,
        np.iinfo(np.int64).min // 4))
    m = kinds_e == DepKind.PROGRAM
    lag[m] = np.maximum(0, start[dst_e[m]] - all_bound[dst_e[m]])
    # SYNC ops: keep only the part after the awaited GPU work
    sync_done = _segment_max(np.where(kinds_e == DepKind.SYNC, finish[src_e], np.iinfo(np.int64).min // 4),
                             dep_ptr, np.iinfo(np.int64).min // 4)
    is_sync = (kind == OpKind.SYNC) & (sync_done > start)
    dur = dur.copy()
    dur[is_sync] = np.maximum(0, finish[is_sync] - sync_done[is_sync])

    has_deps = np.diff(dep_ptr) > 0
    shift = _rank_clock_shifts(group, rank, finish)
    release = np.where(has_deps, 0, start + shift[rank]).astype(np.int64)

    lanes, lane = _lanes(rank, device, thread, stream, kind)
    copy_dir = _dict_codes(t, "copy_dir", {k: int(v) for k, v in COPY_DIR_BY_LABEL.items()}, 0).astype(np.int8)
    host_mem = _dict_codes(t, "host_mem", {k: int(v) for k, v in HOST_MEM_BY_LABEL.items()}, 0).astype(np.int8)
    category = np.zeros(n, np.int8)
    for k, cat in KIND_CATEGORY.items():
        category[kind == k] = cat

    g = OpGraph(
        op_id=op_id,
        origin=op_id.copy(),
        rank=rank,
        kind=kind,
        category=category,
        lane=lane,
        dur=dur,
        bytes=t.column("bytes").to_numpy().astype(np.int64),
        copy_dir=copy_dir,
        host_mem=host_mem,
        name=name,
        order=start + shift[rank],
        release=release,
        group=group,
        dep_ptr=dep_ptr,
        dep_src=src_e,
        dep_kind=kinds_e.astype(np.uint8),
        dep_lag=lag,
        lanes=lanes,
        names=names,
        captured_start=start,
        captured_dur=t.column("dur_ns").to_numpy().astype(np.int64),
        step=t.column("step").to_numpy().astype(np.int32),
        rank_shift=shift,
    )
    g.validate()
    return g


def _lanes(rank, device, thread, stream, kind) -> tuple[Lanes, np.ndarray]:
    on_gpu = np.isin(kind, [int(k) for k in (OpKind.KERNEL, OpKind.MEMCPY, OpKind.MEMSET, OpKind.COLLECTIVE)])
    ltype = np.where(on_gpu, int(LaneType.STREAM), int(LaneType.HOST_THREAD)).astype(np.int64)
    key = np.where(on_gpu, (np.maximum(device, 0) << _STREAM_KEY_SHIFT) | (stream & ((1 << _STREAM_KEY_SHIFT) - 1)),
                   thread)
    uniq, inverse = _unique_rows(rank.astype(np.int64), ltype, key)
    names = []
    for r, ty, k in uniq:
        if ty == LaneType.STREAM:
            names.append(f"rank{r}/gpu{k >> _STREAM_KEY_SHIFT}/stream {k & ((1 << _STREAM_KEY_SHIFT) - 1)}")
        else:
            names.append(f"rank{r}/thread {k}")
    lanes = Lanes(
        rank=uniq[:, 0].astype(np.int32),
        type=uniq[:, 1].astype(np.int8),
        key=uniq[:, 2].astype(np.int64),
        servers=np.ones(len(uniq), np.int32),
        names=tuple(names),
    )
    return lanes, inverse.reshape(-1).astype(np.int32)


def _unique_rows(rank: np.ndarray, ltype: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(axis=0) of (rank, lane type, key) rows, fast for millions of rows: the three are
    packed into one int64 when they fit (rank < 2^15, key < 2^47), else sorted lexicographically."""
    if rank.size and rank.max() < (1 << 15) and key.min() >= 0 and key.max() < (1 << 47) and ltype.max() < 2:
        packed = (rank << 48) | (ltype << 47) | key
        uniq, inverse = np.unique(packed, return_inverse=True)
        rows = np.stack([uniq >> 48, (uniq >> 47) & 1, uniq & ((1 << 47) - 1)], axis=1)
        return rows, inverse.reshape(-1)
    order = np.lexsort((key, ltype, rank))
    stacked = np.stack([rank[order], ltype[order], key[order]], axis=1)
    change = np.r_[True, np.any(stacked[1:] != stacked[:-1], axis=1)]
    group_sorted = np.cumsum(change) - 1
    inverse = np.empty(order.shape[0], np.int64)
    inverse[order] = group_sorted
    return stacked[change], inverse


def _median_by_rank(edge_rank, measured, launch_bound, rank) -> np.ndarray:
    """Per node: the median measured launch lag of launch-bound ops of its rank."""
    out = np.zeros(rank.shape[0], np.int64)
    for r in np.unique(rank):
        sel = (edge_rank == r) & launch_bound
        med = int(np.median(measured[sel])) if np.any(sel) else 0
        out[rank == r] = med
    return out


def _collective_groups(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    group = np.full(n, -1, np.int64)
    if src.size == 0:
        return group
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        root = x
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(x, x) != root:
            parent[x], x = root, parent[x]
        return root

    for a, b in zip(src.tolist(), dst.tolist()):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    members = sorted(set(src.tolist()) | set(dst.tolist()))
    for m in members:
        group[m] = find(m)
    return group


def _rank_clock_shifts(group: np.ndarray, rank: np.ndarray, finish: np.ndarray) -> np.ndarray:
    """Offset of each rank's clock, from its collectives: every member of a collective finishes
    at the same real time, so ``finish + shift[rank]`` should agree within a group. The shift of
    rank r is the median, over the groups r shares with the lowest grouped rank, of the
    difference of their finishes; shifts are made non-negative. Ranks without collectives: 0."""
    nranks = int(rank.max()) + 1 if rank.size else 1
    shift = np.zeros(nranks, np.int64)
    idx = np.flatnonzero(group >= 0)
    if idx.size == 0:
        return shift
    r0 = int(rank[idx].min())
    ref = {}
    for g, r, f in zip(group[idx].tolist(), rank[idx].tolist(), finish[idx].tolist()):
        if r == r0:
            ref[g] = f
    diffs: dict[int, list[int]] = {}
    for g, r, f in zip(group[idx].tolist(), rank[idx].tolist(), finish[idx].tolist()):
        if r != r0 and g in ref:
            diffs.setdefault(r, []).append(ref[g] - f)
    for r, d in diffs.items():
        shift[r] = int(np.median(d))
    return shift - shift.min()


def _group_durations(group: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Every member of a barrier group gets the group's shortest measured duration."""
    dur = dur.copy()
    idx = np.flatnonzero(group >= 0)
    g = group[idx]
    order = np.argsort(g, kind="stable")
    g_sorted = g[order]
    starts = np.flatnonzero(np.r_[True, g_sorted[1:] != g_sorted[:-1]])
    mins = np.minimum.reduceat(dur[idx[order]], starts)
    seg = np.cumsum(np.r_[True, g_sorted[1:] != g_sorted[:-1]]) - 1
    dur[idx[order]] = mins[seg]
    return dur
