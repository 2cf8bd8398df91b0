"""The graph builder as it was before its speed work (commit 447ad94 of replay/pipeline/build.py,
with the replay/causal.py helpers of that commit): a frozen oracle, kept only so that
tests/test_build_reference.py can prove that today's :func:`replay.pipeline.build.build_graph` gives the
very same graphs. Never used by the product; never to be "fixed" (change both only together
with a deliberate change of the graph).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from fastrack_core.errors import GraphError
from fastrack_core.schema import COPY_DIR_BY_LABEL, HOST_MEM_BY_LABEL, DepKind, OpKind
from fastrack_core.traceio import Trace, as_numpy
from replay import causal as _causal_now
from replay.graph import KIND_CATEGORY, Lanes, LaneType, OpGraph, edges_by_dependent


class causal:  # the constants and Calibration of today, the helpers as they were
    LAUNCH_LATENCY_PERCENTILE = _causal_now.LAUNCH_LATENCY_PERCENTILE
    BACK_TO_BACK_MAX_NS = _causal_now.BACK_TO_BACK_MAX_NS
    UNEXPLAINED_MIN_NS = _causal_now.UNEXPLAINED_MIN_NS
    SYNC_RETURN_MAX_NS = _causal_now.SYNC_RETURN_MAX_NS
    Calibration = _causal_now.Calibration

    @staticmethod
    def per_rank_percentile(sample_rank, values, q):
        if values.size == 0:
            return {}
        order = np.lexsort((values, sample_rank))
        r, v = sample_rank[order], values[order]
        first = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
        counts = np.diff(np.r_[first, r.size])
        pick = first + np.minimum(counts - 1, np.floor(q / 100.0 * (counts - 1) + 0.5).astype(np.int64))
        return dict(zip(r[first].tolist(), v[pick].astype(np.int64).tolist()))

    @staticmethod
    def lookup(per_rank, rank, default=0):
        out = np.broadcast_to(np.asarray(default, np.int64), rank.shape).copy()
        for r, v in per_rank.items():
            out[rank == r] = v
        return out

    @staticmethod
    def largest(values, ids, k=5):
        if values.size == 0:
            return []
        top = np.argsort(-values, kind="stable")[:k]
        return [int(i) for i in ids[top]]

_STREAM_KEY_SHIFT = 40  # lane key of a stream: device << 40 | stream
_NONE = np.iinfo(np.int64).min // 4  # "no prerequisite" in segment maxima
_GPU_KINDS = [int(k) for k in (OpKind.KERNEL, OpKind.MEMCPY, OpKind.MEMSET, OpKind.COLLECTIVE)]


def _dict_codes(table: pa.Table, name: str, mapping: dict, default: int) -> np.ndarray:
    """Map a dictionary-encoded string column to integer codes via ``mapping``."""
    col = table.column(name).combine_chunks()
    if not pa.types.is_dictionary(col.type):
        col = col.dictionary_encode()
    labels = col.dictionary.to_pylist()
    lut = np.array([mapping.get(v, default) if v is not None else default for v in labels] or [default], np.int64)
    if col.null_count:
        # (from the buffers: pyarrow's own converters would import pandas)
        n, off = len(col), col.offset
        bits = np.frombuffer(col.buffers()[0], np.uint8)
        valid = np.unpackbits(bits, bitorder="little")[off: off + n].astype(bool)
        itype = np.dtype(col.type.index_type.to_pandas_dtype())
        idx = np.frombuffer(col.buffers()[1], itype, count=n, offset=off * itype.itemsize).astype(np.int64)
        out = lut[np.where(valid, np.clip(idx, 0, lut.size - 1), 0)]
        out[~valid] = default
        return out
    idx = as_numpy(col.indices)
    return lut[idx.astype(np.int64)]


def _names(table: pa.Table) -> tuple[np.ndarray, tuple[str, ...]]:
    col = table.column("name").combine_chunks()
    if not pa.types.is_dictionary(col.type):
        col = col.dictionary_encode()
    col = col.unify_dictionaries() if hasattr(col, "unify_dictionaries") else col
    return as_numpy(col.indices).astype(np.int32), tuple(col.dictionary.to_pylist())


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
    op_id = as_numpy(t.column("op_id")).astype(np.int64)
    rank = as_numpy(t.column("rank")).astype(np.int32)
    device = as_numpy(t.column("device")).astype(np.int64)
    thread = as_numpy(t.column("thread")).astype(np.int64)
    stream = as_numpy(t.column("stream")).astype(np.int64)
    start = as_numpy(t.column("start_ns")).astype(np.int64)
    dur = as_numpy(t.column("dur_ns")).astype(np.int64)
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
    ptr_in = as_numpy(deps.offsets).astype(np.int64) - int(deps.offsets[0].as_py())
    dep_ids = as_numpy(deps.values).astype(np.int64)[int(deps.offsets[0].as_py()):][: ptr_in[-1]]
    kinds_e = as_numpy(dep_kinds.values).astype(np.uint8)[int(dep_kinds.offsets[0].as_py()):][: ptr_in[-1]]
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
    lag, dur, calib = _causal_lags(src_e, dst_e, kinds_e, dep_ptr, start, finish, dur, kind, rank, op_id,
                                   group >= 0)

    # a node enters at its measured time when nothing but the GPU work it waits for precedes it (the
    # first op of a thread, a GPU op the profiler saw no launch of); a blocking call still starts
    # only when that work is done
    enters = _segment_max(np.where(kinds_e == DepKind.SYNC, 0, 1), dep_ptr, 0) > 0
    shift = _rank_clock_shifts(group, rank, finish)
    release = np.where(enters, 0, start + shift[rank]).astype(np.int64)

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
        bytes=as_numpy(t.column("bytes")).astype(np.int64),
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
        captured_dur=as_numpy(t.column("dur_ns")).astype(np.int64),
        step=as_numpy(t.column("step")).astype(np.int32),
        rank_shift=shift,
        calibration=calib,
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


def _causal_lags(src_e, dst_e, kinds_e, dep_ptr, start, finish, dur, kind, rank, op_id, grouped):
    """Edge lags and node durations of the causal graph (rules: :mod:`replay.causal`).

    Returns (lag per edge, durations, :class:`Calibration`)."""
    lag = np.zeros(src_e.shape[0], np.int64)
    dur = dur.copy()
    is_l = kinds_e == DepKind.LAUNCH
    is_s = kinds_e == DepKind.STREAM
    gap = start[dst_e] - finish[src_e]  # meaningful on STREAM edges
    l2s = np.maximum(0, start[dst_e] - start[src_e])  # meaningful on LAUNCH edges
    # launch latency per rank: launch-to-start of ops whose other prerequisites were all done
    # (measured overlap on the stream included) when the launching call started
    other_done = _segment_max(np.where(is_l, _NONE, finish[src_e] + np.where(is_s, np.minimum(0, gap), 0)),
                              dep_ptr, _NONE)
    li = np.flatnonzero(is_l)
    l_rank = rank[dst_e[li]].astype(np.int64)
    idle = other_done[dst_e[li]] <= start[src_e[li]]
    latency = causal.per_rank_percentile(l_rank[idle], l2s[li][idle], causal.LAUNCH_LATENCY_PERCENTILE)
    samples = {int(r): int(c) for r, c in zip(*np.unique(l_rank[idle], return_counts=True))}
    for r, v in causal.per_rank_percentile(l_rank, l2s[li], 0.0).items():
        latency.setdefault(r, v)  # no launch-bound op: the smallest launch-to-start bounds it
        samples.setdefault(r, 0)
    # applied after the call (replay.causal, "After the call"): the call's duration + the rank's
    # after-call gap (percentile of start minus call end over the launch-bound ops)
    # (edges from the first half of a split blocking call keep the start-based latency)
    call = finish[src_e[li]] - start[src_e[li]]
    l2e = l2s[li] - call
    n = kind.shape[0]
    prog_sync = np.flatnonzero((kinds_e == DepKind.PROGRAM) & (kind[dst_e] == OpKind.SYNC) & (kind[src_e] == OpKind.RUNTIME))
    before = np.full(n, -1, np.int64)
    before[dst_e[prog_sync]] = src_e[prog_sync]
    launcher = np.full(n, -1, np.int64)
    launcher[dst_e[li]] = src_e[li]
    yi = np.flatnonzero(kinds_e == DepKind.SYNC)
    h = before[dst_e[yi]]
    half = np.zeros(n, bool)
    half[h[(h >= 0) & (launcher[src_e[yi]] == h)]] = True
    waited = half[src_e[li]]
    ok = ~waited
    after = causal.per_rank_percentile(l_rank[idle & ok], l2e[idle & ok], causal.LAUNCH_LATENCY_PERCENTILE)
    for r, v in causal.per_rank_percentile(l_rank[ok], l2e[ok], 0.0).items():
        after.setdefault(r, v)
    blocking = causal.per_rank_percentile(l_rank[idle & waited], l2s[li][idle & waited],
                                          causal.LAUNCH_LATENCY_PERCENTILE)
    queued = causal.lookup(blocking, l_rank, causal.lookup(latency, l_rank)) if blocking else causal.lookup(latency, l_rank)
    lag[li] = np.where(waited, np.where(idle, l2s[li], queued), np.maximum(0, call + causal.lookup(after, l_rank, 0)))
    # stream: measured back-to-back gaps kept, larger gaps replaced by the rank's typical gap
    si = np.flatnonzero(is_s)
    s_rank = rank[dst_e[si]].astype(np.int64)
    g = gap[si]
    # a gap is the GPU's own back-to-back gap only when the op was queued behind its predecessor:
    # its launch (call start + the rank's latency) had arrived by the time the predecessor ended.
    # An op whose launch arrived later was launch-bound; its gap says when the host launched it,
    # which a what-if that changes the host must not keep.
    launch_arrival = _segment_max(np.where(is_l, start[src_e] + lag, _NONE), dep_ptr, _NONE)
    queued = launch_arrival[dst_e[si]] <= finish[src_e[si]]
    b2b = (g >= 0) & (g <= causal.BACK_TO_BACK_MAX_NS) & queued
    typical = causal.per_rank_percentile(s_rank[b2b], g[b2b], 50.0)
    keep = (g < 0) | b2b
    lag[si] = np.where(keep, g, np.minimum(g, causal.lookup(typical, s_rank)))
    # every other finish-to-start edge: the earliest start its prerequisites allow, measured times
    fs_bound = _segment_max(np.where(is_l, _NONE, finish[src_e] + lag), dep_ptr, _NONE)
    ready = np.maximum(fs_bound, _segment_max(np.where(is_l, start[src_e] + lag, _NONE), dep_ptr, _NONE))
    # PROGRAM: idle CPU time after the binding prerequisite stays host time
    m = kinds_e == DepKind.PROGRAM
    lag[m] = np.maximum(0, start[dst_e[m]] - ready[dst_e[m]])
    # blocking calls (sync ops): the wait comes out of the replay, only the return after the awaited
    # GPU work is kept as duration
    is_sync_e = kinds_e == DepKind.SYNC
    sync_done = _segment_max(np.where(is_sync_e, finish[src_e], _NONE), dep_ptr, _NONE)
    is_sync = (kind == OpKind.SYNC) & (sync_done > _NONE)
    waited = is_sync & (sync_done > start)
    dur[waited] = np.maximum(0, finish[waited] - sync_done[waited])
    # the first half of a split blocking call (it launched the op its sync half waits for) keeps
    # only the launch itself; the rest of it was waiting for the stream
    _trim_blocking_halves(src_e, dst_e, kinds_e, dur, kind, rank, latency)
    # report what the recorded prerequisites do not explain
    calib = causal.Calibration(launch_latency_ns=latency, launch_samples=samples, back_to_back_ns=typical,
                               launch_after_call_ns=after)
    has_pre = ready > _NONE
    gpu = has_pre & np.isin(kind, _GPU_KINDS) & ~grouped  # a group member waits for its peers
    hold = np.where(gpu, start - ready, 0)
    held = np.flatnonzero(hold > causal.UNEXPLAINED_MIN_NS)
    calib.unexplained_ops = int(held.size)
    calib.unexplained_ns = int(hold[held].sum())
    calib.unexplained_first = causal.largest(hold[held], op_id[held])
    ret = np.where(is_sync, finish - np.maximum(sync_done, start), 0)
    late = np.flatnonzero(is_sync & (ret > causal.SYNC_RETURN_MAX_NS))
    calib.sync_unexplained_ops = int(late.size)
    calib.sync_unexplained_ns = int(ret[late].sum())
    calib.sync_unexplained_first = causal.largest(ret[late], op_id[late])
    return lag, dur, calib


def _trim_blocking_halves(src_e, dst_e, kinds_e, dur, kind, rank, latency) -> None:
    """A runtime op followed by a sync op that waits for a GPU op the runtime op launched is the
    first half of a blocking call: its duration beyond the launch latency was waiting."""
    n = dur.shape[0]
    pe = np.flatnonzero((kinds_e == DepKind.PROGRAM) & (kind[dst_e] == OpKind.SYNC)
                        & (kind[src_e] == OpKind.RUNTIME))
    if not pe.size:
        return
    before = np.full(n, -1, np.int64)  # the runtime op just before each such sync op
    before[dst_e[pe]] = src_e[pe]
    launcher = np.full(n, -1, np.int64)
    lm = kinds_e == DepKind.LAUNCH
    launcher[dst_e[lm]] = src_e[lm]
    se = np.flatnonzero(kinds_e == DepKind.SYNC)
    h = before[dst_e[se]]
    halves = np.unique(h[(h >= 0) & (launcher[src_e[se]] == h)])
    if halves.size:
        dur[halves] = np.minimum(dur[halves], causal.lookup(latency, rank[halves].astype(np.int64)))


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
