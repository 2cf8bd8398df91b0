"""Build the dependency graph of a trace: trace (Parquet rows) -> :class:`OpGraph`.

The graph is causal: what it keeps from the measured timeline is what the machine would do again
(durations of work, the latencies of the launch path), never when things happened to happen, so a
replay with changed durations moves the way the hardware would. Replaying it with measured
durations reproduces the trace when its dependencies are complete (docs/fidelity.md).

* **lanes**: one per (rank, host thread) and one per (rank, device, stream);
* **launch latency** (LAUNCH edges, start-to-start): every launch of a rank carries the rank's
  launch latency, estimated from the ops that really were launch-bound; never an op's own
  queueing delay (:mod:`replay.causal`);
* **stream order** (STREAM edges): a GPU op queued behind its predecessor starts when it ends,
  plus the measured back-to-back gap when the op was queued (its launch had arrived) and the gap
  is within ``BACK_TO_BACK_MAX_NS``, else the rank's typical gap; measured overlap is kept;
* **CPU gaps** (PROGRAM edges): any idle time between a host op and the later of its
  prerequisites is kept as a lag (importers normally fill it with explicit ``cpu`` ops already);
* **waiting is an edge, never a duration**: a blocking call (``sync`` op) keeps only the part
  after the GPU work it waits for finished; the first half of a split blocking call (a call that
  launched the op it then waits for) keeps only the launch latency, the rest was waiting for the
  stream;
* **barrier groups**: the members of one collective on all ranks present (COLLECTIVE deps),
  each with the shortest measured duration of the group (the last rank to arrive waited least;
  that is the transfer itself, the rest was waiting for peers);
* **release**: a node with no prerequisite starts at its measured start (one whose only
  prerequisites are the GPU work it waits for enters at its measured start and starts when that
  work is done).

What the builder derived and what the trace could not explain is in ``OpGraph.calibration``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from fastrack_core.errors import GraphError
from fastrack_core.schema import COPY_DIR_BY_LABEL, HOST_MEM_BY_LABEL, DepKind, OpKind
from fastrack_core.traceio import Trace, as_numpy, buffer_values, one_chunk, validity
from replay import causal
from replay.graph import KIND_CATEGORY, Lanes, LaneType, OpGraph
from replay.pipeline.keys import sorted_codes

try:  # the compiled edge passes (setup.py ACCELERATORS); without them, their numpy twin
    from replay.pipeline import _build as _native
except ImportError:
    _native = None

_STREAM_KEY_SHIFT = 40  # lane key of a stream: device << 40 | stream
_NONE = np.iinfo(np.int64).min // 4  # "no prerequisite" in segment maxima
_GPU_KINDS = [int(k) for k in (OpKind.KERNEL, OpKind.MEMCPY, OpKind.MEMSET, OpKind.COLLECTIVE)]
# per OpKind code: on a GPU stream, and its Category (lookup tables indexed by the kind code)
_ON_GPU = np.zeros(max(OpKind) + 1, bool)
_ON_GPU[_GPU_KINDS] = True
_CATEGORY = np.zeros(max(OpKind) + 1, np.int8)
for _k, _cat in KIND_CATEGORY.items():
    _CATEGORY[int(_k)] = int(_cat)

# The trace columns a graph is built from: a reader may read only these (replay.pipeline.run.load_graph).
GRAPH_COLUMNS = ("op_id", "rank", "device", "thread", "stream", "kind", "name", "start_ns", "dur_ns", "bytes",
                 "copy_dir", "host_mem", "step", "deps", "dep_kinds")


def _dict_codes(table: pa.Table, name: str, mapping: dict, default: int) -> np.ndarray:
    """Map a dictionary-encoded string column to int8 codes via ``mapping``."""
    col = one_chunk(table.column(name))
    if not pa.types.is_dictionary(col.type):
        col = col.dictionary_encode()
    labels = col.dictionary.to_pylist()
    lut = np.array([mapping.get(v, default) if v is not None else default for v in labels] or [default], np.int8)
    if col.null_count:
        # (from the buffers: pyarrow's own converters would import pandas)
        valid = validity(col)
        idx = buffer_values(col.indices, np.dtype(col.type.index_type.to_pandas_dtype()))
        out = lut[np.where(valid, np.clip(idx, 0, lut.size - 1), 0)]
        out[~valid] = default
        return out
    return lut[as_numpy(col.indices)]


def _names(table: pa.Table) -> tuple[np.ndarray, tuple[str, ...]]:
    col = one_chunk(table.column("name"))
    if not pa.types.is_dictionary(col.type):
        col = col.dictionary_encode()
    col = col.unify_dictionaries() if hasattr(col, "unify_dictionaries") else col
    return _as(as_numpy(col.indices), np.int32), tuple(col.dictionary.to_pylist())


def _as(a: np.ndarray, dtype) -> np.ndarray:
    """``a`` as ``dtype``: itself (no copy, e.g. a zero-copy view of an Arrow buffer) when it already is."""
    return a if a.dtype == dtype else a.astype(dtype)


def _column(table: pa.Table, name: str, dtype) -> np.ndarray:
    return _as(as_numpy(table.column(name)), dtype)


def _dependents(ptr: np.ndarray) -> np.ndarray:
    """The dependent node of each edge of a CSR edge list (``ptr``: n + 1 offsets)."""
    return np.repeat(np.arange(ptr.shape[0] - 1, dtype=np.int64), np.diff(ptr))


def _segment_max(dst: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Per node, the max of ``values`` over its edges (``dst``: the dependent node of each edge);
    ``_NONE`` for nodes without an edge. Values are times, far above ``_NONE``."""
    out = np.full(n, _NONE, np.int64)
    np.maximum.at(out, dst, values)
    return out


def build_graph(trace: Trace) -> OpGraph:
    """The dependency graph of a trace, with measured durations (the ``captured`` replay).

    Arrays the graph keeps unchanged from the trace (ids, ranks, bytes, steps, names, measured
    times, dependency ids and kinds) are zero-copy views of the table's buffers where Arrow
    allows (one chunk, no nulls, the graph's dtype); the graph is immutable, so they are never
    written. Every other array is allocated once."""
    t = trace.table
    path = trace.path
    n = t.num_rows
    op_id = _column(t, "op_id", np.int64)
    rank = _column(t, "rank", np.int32)
    start = _column(t, "start_ns", np.int64)
    captured_dur = _column(t, "dur_ns", np.int64)
    kind = _dict_codes(t, "kind", {k.label: int(k) for k in OpKind}, -1)
    if np.any(kind < 0):
        raise GraphError("trace has an op of unknown kind", path=path)
    name, names = _names(t)
    finish = start + captured_dur

    # --- dependencies: CSR by dependent op, in trace order (so already grouped by dependent) ---
    deps = one_chunk(t.column("deps"))
    dep_kinds = one_chunk(t.column("dep_kinds"))
    offsets = as_numpy(deps.offsets)
    base = int(offsets[0])
    ptr_in = offsets.astype(np.int64)
    if base:
        ptr_in -= base
    m = int(ptr_in[-1])
    dep_ids = _as(as_numpy(deps.values), np.int64)[base: base + m]
    dk_base = int(as_numpy(dep_kinds.offsets)[0])
    kinds_e = _as(as_numpy(dep_kinds.values), np.uint8)[dk_base: dk_base + m]
    # the dependent op of each edge (the compiled passes walk dep_ptr instead: made only if needed)
    dst_e = _dependents(ptr_in) if _native is None else None

    # --- op id -> index ---
    if n and op_id[0] == 0 and op_id[-1] == n - 1 and np.all(op_id[1:] > op_id[:-1]):
        # the usual 0..n-1: an id is its index
        src_e = dep_ids
        dangling = (dep_ids < 0) | (dep_ids >= n) if m and (dep_ids.min() < 0 or dep_ids.max() >= n) else None
    else:
        order_ids = np.argsort(op_id, kind="stable")
        sorted_ids = op_id[order_ids]
        pos_c = np.minimum(np.searchsorted(sorted_ids, dep_ids), n - 1)
        dangling = sorted_ids[pos_c] != dep_ids
        src_e = order_ids[pos_c]
    if dangling is not None and np.any(dangling):
        e = int(np.flatnonzero(dangling)[0])
        op = np.searchsorted(ptr_in, e, side="right") - 1  # the op whose deps hold edge e
        raise GraphError(
            f"op {int(op_id[op])} depends on op {int(dep_ids[e])}, which is not in the trace "
            f"({int(dangling.sum())} dangling dependencies)", path=path)
    del dangling
    if dst_e is not None:
        self_loop = np.flatnonzero(src_e == dst_e)
        loop = int(self_loop[0]) if self_loop.size else -1
    else:
        loop = _native.first_self_loop(ptr_in, src_e)
    if loop >= 0:
        raise GraphError(f"op {int(op_id[np.searchsorted(ptr_in, loop, side='right') - 1])} depends on itself",
                         path=path)

    # --- collective groups (COLLECTIVE deps are group membership, not edges) ---
    is_coll = kinds_e == DepKind.COLLECTIVE
    if is_coll.any():
        if dst_e is None:
            dst_e = _dependents(ptr_in)
        group = _collective_groups(n, src_e[is_coll], dst_e[is_coll])
        keep = ~is_coll
        src_e, dst_e, kinds_e = src_e[keep], dst_e[keep], kinds_e[keep]
        dep_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(dst_e, minlength=n), out=dep_ptr[1:])
        dur = _group_durations(group, captured_dur) if group.max(initial=-1) >= 0 else captured_dur.copy()
        grouped = group >= 0
    else:
        group = np.full(n, -1, np.int64)
        dep_ptr = ptr_in
        dur = captured_dur.copy()
        grouped = None
    del is_coll

    on_gpu = _ON_GPU[kind]
    lag, calib = _causal_lags(src_e, dst_e, kinds_e, dep_ptr, start, finish, dur, kind, on_gpu, rank, op_id,
                              grouped)

    # a node enters at its measured time when nothing but the GPU work it waits for precedes it (the
    # first op of a thread, a GPU op the profiler saw no launch of); a blocking call still starts
    # only when that work is done
    enters = np.zeros(n, bool)
    if _native is not None:
        _native.has_other_edge(dep_ptr, kinds_e, int(DepKind.SYNC), enters)
    else:
        enters[dst_e[kinds_e != DepKind.SYNC]] = True
    del dst_e
    shift = _rank_clock_shifts(group, rank, finish)
    del finish
    order = start + shift[rank] if shift.any() else start.copy()
    release = np.where(enters, 0, order)
    del enters

    lanes, lane = _lanes(t, rank, kind, on_gpu)
    g = OpGraph(
        op_id=op_id,
        origin=op_id.copy(),
        rank=rank,
        kind=kind,
        category=_CATEGORY[kind],
        lane=lane,
        dur=dur,
        bytes=_column(t, "bytes", np.int64),
        copy_dir=_dict_codes(t, "copy_dir", {k: int(v) for k, v in COPY_DIR_BY_LABEL.items()}, 0),
        host_mem=_dict_codes(t, "host_mem", {k: int(v) for k, v in HOST_MEM_BY_LABEL.items()}, 0),
        name=name,
        order=order,
        release=release,
        group=group,
        dep_ptr=dep_ptr,
        dep_src=src_e,
        dep_kind=kinds_e,
        dep_lag=lag,
        lanes=lanes,
        names=names,
        captured_start=start,
        captured_dur=captured_dur,
        step=_column(t, "step", np.int32),
        rank_shift=shift,
        calibration=calib,
    )
    g.validate()
    return g


def _lanes(t: pa.Table, rank, kind, on_gpu) -> tuple[Lanes, np.ndarray]:
    key = _column(t, "thread", np.int64).copy()
    gpu = np.flatnonzero(on_gpu)
    if gpu.size:
        device = np.maximum(as_numpy(t.column("device"))[gpu], 0).astype(np.int64)
        stream = _column(t, "stream", np.int64)[gpu]
        key[gpu] = (device << _STREAM_KEY_SHIFT) | (stream & ((1 << _STREAM_KEY_SHIFT) - 1))
    uniq, inverse = _unique_rows(rank, on_gpu, key)
    names = []
    for r, ty, k in uniq.tolist():
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
    return lanes, inverse


def _unique_rows(rank: np.ndarray, on_gpu: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(axis=0) of the (rank, lane type, key) rows (lane type: STREAM where ``on_gpu``, else
    HOST_THREAD): the sorted distinct rows (int64) and each op's row index (int32). Fast for
    millions of ops: the three are packed into one int64 when they fit (rank < 2^15, key < 2^47)
    and hashed (:func:`replay.pipeline.keys.sorted_codes`, linear time); only the few distinct rows are sorted.
    Otherwise sorted lexicographically."""
    assert int(LaneType.HOST_THREAD) == 0 and int(LaneType.STREAM) == 1  # the packing below
    if rank.size and rank.max() < (1 << 15) and key.min() >= 0 and key.max() < (1 << 47):
        packed = rank.astype(np.int64) << 48
        packed[on_gpu] |= 1 << 47
        packed |= key
        uniq, inverse = sorted_codes(packed)
        del packed
        rows = np.stack([uniq >> 48, (uniq >> 47) & 1, uniq & ((1 << 47) - 1)], axis=1)
        return rows, inverse
    rank = rank.astype(np.int64)
    ltype = on_gpu.astype(np.int64)
    order = np.lexsort((key, ltype, rank))
    stacked = np.stack([rank[order], ltype[order], key[order]], axis=1)
    change = np.r_[True, np.any(stacked[1:] != stacked[:-1], axis=1)]
    group_sorted = np.cumsum(change) - 1
    inverse = np.empty(order.shape[0], np.int32)
    inverse[order] = group_sorted
    return stacked[change], inverse


def _causal_lags(src_e, dst_e, kinds_e, dep_ptr, start, finish, dur, kind, on_gpu, rank, op_id, grouped):
    """Edge lags (returned, with the :class:`Calibration`) and node durations (``dur``, changed in
    place) of the causal graph (rules: :mod:`replay.causal`). ``grouped``: barrier-group members,
    or None when there are none. The passes over the edges run compiled (``replay.pipeline._build``) when
    it is built, else in numpy; both give the same lags."""
    passes = _edge_passes_native if _native is not None else _edge_passes_numpy
    lag, ready, sync_done, halves, latency, samples, typical, after = passes(src_e, dst_e, kinds_e, dep_ptr, start,
                                                                             finish, kind, rank)
    # blocking calls (sync ops): the wait comes out of the replay, only the return after the awaited
    # GPU work is kept as duration
    is_sync = (kind == OpKind.SYNC) & (sync_done > _NONE)
    waited = is_sync & (sync_done > start)
    dur[waited] = np.maximum(0, finish[waited] - sync_done[waited])
    # the first half of a split blocking call (it launched the op its sync half waits for) keeps
    # only the launch itself; the rest of it was waiting for the stream
    if halves.size:
        dur[halves] = np.minimum(dur[halves], causal.lookup(latency, rank[halves].astype(np.int64)))
    # report what the recorded prerequisites do not explain
    calib = causal.Calibration(launch_latency_ns=latency, launch_samples=samples, back_to_back_ns=typical,
                               launch_after_call_ns=after)
    gpu = (ready > _NONE) & on_gpu  # a group member waits for its peers:
    if grouped is not None:
        gpu &= ~grouped
    held = np.flatnonzero(gpu)
    hold = start[held] - ready[held]
    big = hold > causal.UNEXPLAINED_MIN_NS
    held, hold = held[big], hold[big]
    calib.unexplained_ops = int(held.size)
    calib.unexplained_ns = int(hold.sum())
    calib.unexplained_first = causal.largest(hold, op_id[held])
    si_ = np.flatnonzero(is_sync)
    ret = finish[si_] - np.maximum(sync_done[si_], start[si_])
    late_m = ret > causal.SYNC_RETURN_MAX_NS
    late, ret = si_[late_m], ret[late_m]
    calib.sync_unexplained_ops = int(late.size)
    calib.sync_unexplained_ns = int(ret.sum())
    calib.sync_unexplained_first = causal.largest(ret, op_id[late])
    return lag, calib


def _launch_latency(l_rank, l2s, idle):
    """Per rank: the launch latency (percentile of the launch-bound ops' launch-to-start times, or
    the smallest launch-to-start where none was launch-bound) and the number of samples."""
    latency = causal.per_rank_percentile(l_rank[idle], l2s[idle], causal.LAUNCH_LATENCY_PERCENTILE)
    samples = causal.per_rank_count(l_rank[idle])
    for r, v in causal.per_rank_percentile(l_rank, l2s, 0.0).items():
        latency.setdefault(r, v)  # no launch-bound op: the smallest launch-to-start bounds it
        samples.setdefault(r, 0)
    return latency, samples


def _launch_lags(l_rank, l2s, call, idle, waited):
    """Per LAUNCH edge, its lag from the call's start (:mod:`replay.causal`, "After the call"):
    the call's own measured duration ``call`` plus the rank's after-call gap, the percentile of
    the launch-bound ops' start minus their call's end (the smallest where none was launch-bound),
    never below 0. ``waited``: edges from the first half of a split blocking call, whose measured
    duration is mostly waiting: they are no sample of the gap, and keep their own launch-to-start
    when they were launch-bound, else the median launch-to-start of the rank's launch-bound
    blocking calls (or, without any, the rank's latency from the call's start). Returns (lags, after-call gap per rank, start-based latency per rank,
    samples)."""
    latency, samples = _launch_latency(l_rank, l2s, idle)
    l2e = l2s - call  # start of the GPU op after its call returned (negative: before)
    ok = ~waited
    after = causal.per_rank_percentile(l_rank[idle & ok], l2e[idle & ok], causal.LAUNCH_LATENCY_PERCENTILE)
    for r, v in causal.per_rank_percentile(l_rank[ok], l2e[ok], 0.0).items():
        after.setdefault(r, v)
    # a blocking call's first half: launch-bound, its own launch-to-start is its launch path (the
    # call waited for nothing before it); queued, the rank's latency from the call's start
    # call waited for nothing before it); queued, the median of the rank's launch-bound blocking
    # calls (their launch path: a blocking copy stages before it launches), else the rank's latency
    blocking = causal.per_rank_percentile(l_rank[idle & waited], l2s[idle & waited], causal.LAUNCH_LATENCY_PERCENTILE)
    queued = causal.lookup(blocking, l_rank, causal.lookup(latency, l_rank)) if blocking else causal.lookup(latency, l_rank)
    lags = np.where(waited, np.where(idle, l2s, queued), np.maximum(0, call + causal.lookup(after, l_rank, 0)))
    return lags, after, latency, samples


def _waited_launches(src_e, kinds_e, dep_ptr, kind, li) -> tuple[np.ndarray, np.ndarray]:
    """The first halves of split blocking calls (:func:`_blocking_halves`), and per LAUNCH edge
    ``li`` whether its source is one. Only the dependents of the PROGRAM, LAUNCH and SYNC edges
    are looked up (edges are grouped by dependent: a sorted search in ``dep_ptr``)."""
    pi = np.flatnonzero(kinds_e == DepKind.PROGRAM)
    yi = np.flatnonzero(kinds_e == DepKind.SYNC)

    def dst(e):
        return np.searchsorted(dep_ptr, e, side="right") - 1

    halves = _blocking_halves(src_e[pi], dst(pi), src_e[li], dst(li), src_e[yi], dst(yi), kind)
    is_half = np.zeros(kind.shape[0], bool)
    is_half[halves] = True
    return halves, is_half[src_e[li]]


def _stream_lags(s_rank, g, b2b):
    """STREAM edge lags: measured back-to-back gaps and overlap kept, larger gaps replaced by the
    rank's typical gap (never more than measured); and the typical gap per rank."""
    typical = causal.per_rank_percentile(s_rank[b2b], g[b2b], 50.0)
    keep = (g < 0) | b2b
    return np.where(keep, g, np.minimum(g, causal.lookup(typical, s_rank))), typical


def _edge_passes_native(src_e, dst_e, kinds_e, dep_ptr, start, finish, kind, rank):
    """:func:`_edge_passes_numpy` with its edge loops compiled (``replay.pipeline._build``)."""
    n, m = start.shape[0], src_e.shape[0]
    nl = int(np.count_nonzero(kinds_e == DepKind.LAUNCH))
    ns = int(np.count_nonzero(kinds_e == DepKind.STREAM))
    l_rank, l2s, idle = np.empty(nl, np.int64), np.empty(nl, np.int64), np.empty(nl, bool)
    _native.launch_samples(dep_ptr, src_e, kinds_e, start, finish, rank, l_rank, l2s, idle)
    li = np.flatnonzero(kinds_e == DepKind.LAUNCH)  # (the compiled pass reports LAUNCH edges in edge order)
    l_src = src_e[li]
    _, waited = _waited_launches(src_e, kinds_e, dep_ptr, kind, li)
    l_lag, after, latency, samples = _launch_lags(l_rank, l2s, finish[l_src] - start[l_src], idle, waited)
    del waited
    del l2s, idle, l_rank, l_src
    lag, arrival = np.zeros(m, np.int64), np.empty(n, np.int64)
    s_rank, g, b2b = np.empty(ns, np.int64), np.empty(ns, np.int64), np.empty(ns, bool)
    _native.stream_samples(dep_ptr, src_e, kinds_e, start, finish, rank, l_lag, causal.BACK_TO_BACK_MAX_NS, lag,
                           arrival, s_rank, g, b2b)
    del l_lag
    s_lag, typical = _stream_lags(s_rank, g, b2b)
    del s_rank, g, b2b
    ready, sync_done, half = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, bool)
    _native.settle(dep_ptr, src_e, kinds_e, start, finish, kind, s_lag, lag, arrival, ready, sync_done, half)
    return lag, ready, sync_done, np.flatnonzero(half), latency, samples, typical, after


def _edge_passes_numpy(src_e, dst_e, kinds_e, dep_ptr, start, finish, kind, rank):
    """The passes over the edges: returns (lag per edge, ready, sync_done, halves, launch latency
    per rank, its samples, typical back-to-back gap per rank). ``ready``: per node, the earliest
    start its prerequisites allow with these lags (``_NONE`` without any); ``sync_done``: the
    latest finish of the GPU work a node waits for (SYNC edges; ``_NONE`` without); ``halves``:
    the runtime ops that are the first half of a split blocking call."""
    n = start.shape[0]
    lag = np.zeros(src_e.shape[0], np.int64)
    li = np.flatnonzero(kinds_e == DepKind.LAUNCH)
    si = np.flatnonzero(kinds_e == DepKind.STREAM)
    not_l = np.flatnonzero(kinds_e != DepKind.LAUNCH)
    l_src, l_dst = src_e[li], dst_e[li]
    s_src, s_dst = src_e[si], dst_e[si]
    l_start = start[l_src]  # the launching call's start
    s_fin = finish[s_src]  # the stream predecessor's finish
    g = start[s_dst] - s_fin  # the measured gap on each STREAM edge
    l2s = np.maximum(0, start[l_dst] - l_start)
    # launch latency per rank: launch-to-start of ops whose other prerequisites were all done
    # (measured overlap on the stream included) when the launching call started
    nl_dst = dst_e[not_l]
    fin_src = finish[src_e]  # the prerequisite's finish, per edge
    bound = fin_src.copy()
    bound[si] += np.minimum(0, g)
    other_done = _segment_max(nl_dst, bound[not_l], n)
    l_rank = rank[l_dst].astype(np.int64)
    idle = other_done[l_dst] <= l_start
    del other_done
    halves, waited = _waited_launches(src_e, kinds_e, dep_ptr, kind, li)
    l_lag, after, latency, samples = _launch_lags(l_rank, l2s, finish[l_src] - l_start, idle, waited)
    del waited
    del idle, l2s
    lag[li] = l_lag
    # stream: a gap is the GPU's own back-to-back gap only when the op was queued behind its
    # predecessor: its launch (call start + the rank's latency) had arrived by the time the
    # predecessor ended. An op whose launch arrived later was launch-bound; its gap says when the
    # host launched it, which a what-if that changes the host must not keep.
    s_rank = rank[s_dst].astype(np.int64)
    launch_arrival = _segment_max(l_dst, l_start + l_lag, n)
    del l_lag
    queued = launch_arrival[s_dst] <= s_fin
    b2b = (g >= 0) & (g <= causal.BACK_TO_BACK_MAX_NS) & queued
    del queued
    lag[si], typical = _stream_lags(s_rank, g, b2b)
    del b2b, g, s_rank
    # every other finish-to-start edge: the earliest start its prerequisites allow, measured times
    # (a LAUNCH edge binds at the call's start plus its lag: that is the launch arrival)
    bound[:] = fin_src
    bound += lag
    ready = np.maximum(_segment_max(nl_dst, bound[not_l], n), launch_arrival)
    del bound, launch_arrival, nl_dst, not_l
    # PROGRAM: idle CPU time after the binding prerequisite stays host time
    pi = np.flatnonzero(kinds_e == DepKind.PROGRAM)
    p_dst = dst_e[pi]
    lag[pi] = np.maximum(0, start[p_dst] - ready[p_dst])
    yi = np.flatnonzero(kinds_e == DepKind.SYNC)
    sync_done = _segment_max(dst_e[yi], fin_src[yi], n)
    return lag, ready, sync_done, halves, latency, samples, typical, after


def _blocking_halves(p_src, p_dst, l_src, l_dst, y_src, y_dst, kind) -> np.ndarray:
    """The runtime ops followed by a sync op that waits for a GPU op the runtime op launched: the
    first halves of blocking calls, whose duration beyond the launch latency was waiting. (Edges
    by kind: PROGRAM ``p_*``, LAUNCH ``l_*``, SYNC ``y_*``.)"""
    n = kind.shape[0]
    pe = np.flatnonzero((kind[p_dst] == OpKind.SYNC) & (kind[p_src] == OpKind.RUNTIME))
    if not pe.size:
        return pe
    before = np.full(n, -1, np.int64)  # the runtime op just before each such sync op
    before[p_dst[pe]] = p_src[pe]
    launcher = np.full(n, -1, np.int64)
    launcher[l_dst] = l_src
    h = before[y_dst]
    is_half = np.zeros(n, bool)
    is_half[h[(h >= 0) & (launcher[y_src] == h)]] = True
    return np.flatnonzero(is_half)


def _collective_groups(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Barrier group of every node: the smallest node index of its connected component over the
    COLLECTIVE deps (``src`` -> ``dst``); -1 for nodes in none. Minimum-label propagation with
    pointer jumping over the members only (a handful of rounds; each is linear)."""
    group = np.full(n, -1, np.int64)
    if src.size == 0:
        return group
    members = np.unique(np.concatenate([src, dst]))  # sorted: a smaller index is a smaller node
    a, b = np.searchsorted(members, src), np.searchsorted(members, dst)
    label = np.arange(members.size)  # always a member of the same component, never above its own
    while True:
        low = np.minimum(label[a], label[b])
        np.minimum.at(label, a, low)
        np.minimum.at(label, b, low)
        while True:  # pointer jumping: a label's label is in the same component, and lower
            up = label[label]
            if np.array_equal(up, label):
                break
            label = up
        if np.array_equal(label[a], label[b]):
            break
    group[members] = members[label]
    return group


def _rank_clock_shifts(group: np.ndarray, rank: np.ndarray, finish: np.ndarray) -> np.ndarray:
    """Offset of each rank's clock, from its collectives: every member of a collective finishes
    at the same real time, so ``finish + shift[rank]`` should agree within a group. The shift of
    rank r is the median (as ``int(np.median)``: the mean of the two middle values when their
    number is even, truncated), over the groups r shares with the lowest grouped rank, of the
    difference of their finishes (that rank's last member in a group is its reference); shifts
    are made non-negative. Ranks without collectives: 0."""
    nranks = int(rank.max()) + 1 if rank.size else 1
    shift = np.zeros(nranks, np.int64)
    idx = np.flatnonzero(group >= 0)
    if idx.size == 0:
        return shift
    g, r, f = group[idx], rank[idx].astype(np.int64), finish[idx]
    r0 = int(r.min())
    first = r == r0
    g0, f0 = g[first], f[first]
    ref_groups, from_end = np.unique(g0[::-1], return_index=True)  # each group's last r0 member
    ref = f0[g0.size - 1 - from_end]
    other = ~first & np.isin(g, ref_groups)
    d = ref[np.searchsorted(ref_groups, g[other])] - f[other]
    dr = r[other]
    if d.size:
        order = np.lexsort((d, dr))
        d, dr = d[order], dr[order]
        start = np.flatnonzero(np.r_[True, dr[1:] != dr[:-1]])
        count = np.diff(np.r_[start, d.size])
        hi = start + count // 2
        lo = np.where(count % 2 == 1, hi, hi - 1)
        median = (d[lo].astype(np.float64) + d[hi].astype(np.float64)) / 2.0
        shift[dr[start]] = median.astype(np.int64)
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
