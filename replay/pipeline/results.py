"""What a replay reports: spans per rank and step, the critical path by category, resources.

The critical path is walked backwards from the node that finishes last, following for each node
the prerequisite that bound its start (``Schedule.crit_pred``). Every nanosecond of the makespan
is attributed to exactly one :class:`~replay.graph.Category`: a node's own time to its category,
the lag of the edge that led to it to the edge's category (launch latency, PCIe latency,
bounce-slot waits, ...), and time before the first node to ``host``. The categories therefore
add up to the makespan.

Spans (makespan, per rank, per step) run from when each node was reached: its start, except for
a blocking call, which is reached when its thread gets to it, not when the GPU work it waits for
lets it finish (:func:`entry_times`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fastrack_core.schema import DepKind, OpKind
from replay.pipeline import engine
from replay.pipeline.engine import BOUND_GROUP, BOUND_LANE, BOUND_RELEASE, Schedule
from replay.graph import INDEX, Category, LaneType, OpGraph
from replay.pipeline.keys import sorted_codes

# Category of the time spent on an edge's lag (between the prerequisite and the node).
EDGE_CATEGORY = {
    DepKind.PROGRAM: Category.HOST,
    DepKind.LAUNCH: Category.LAUNCH,
    DepKind.STREAM: Category.COMPUTE,
    DepKind.EVENT: Category.COMPUTE,
    DepKind.SYNC: Category.SYNC_WAIT,
    DepKind.COLLECTIVE: Category.COMM,
    DepKind.DATA: Category.PCIE,
    DepKind.RESOURCE: Category.BOUNCE_WAIT,
}

JSON_DIGITS = 6  # ratios in the JSON reports (error_vs_captured, slowdown_vs_none) are rounded to this


@dataclass
class RankSpan:
    rank: int
    makespan_ns: int
    captured_span_ns: int


@dataclass
class ReplayResult:
    protocol: str
    makespan_ns: int
    ops: int
    nodes: int
    ranks: list[int]
    per_rank: list[RankSpan]
    steps: list[dict[str, int]]
    critical_path_ns: dict[str, int]
    lane_usage: "LaneUsage"  # the rows of ``resources``, as columns
    captured_span_ns: int
    model: dict[str, Any] | None = None  # model name, preset, params, digest
    notes: list[str] = field(default_factory=list)
    scales: dict[str, float] = field(default_factory=dict)  # what-if duration factors applied
    calibration: dict[str, Any] | None = None  # what the graph builder derived (replay.causal)

    @property
    def resources(self) -> list[dict[str, Any]]:
        """Busy time and utilisation of every lane, one row each (:func:`resource_usage`), built
        when first read."""
        return self.lane_usage.rows()

    def to_dict(self) -> dict[str, Any]:
        d = {
            "protocol": self.protocol,
            "makespan_ns": self.makespan_ns,
            "captured_span_ns": self.captured_span_ns,
            "error_vs_captured": _rel(self.makespan_ns, self.captured_span_ns),
            "ops": self.ops,
            "nodes": self.nodes,
            "ranks": self.ranks,
            "per_rank": [r.__dict__ | {"error_vs_captured": _rel(r.makespan_ns, r.captured_span_ns)}
                         for r in self.per_rank],
            "steps": self.steps,
            "critical_path_ns": self.critical_path_ns,
            "resources": self.resources,
            "notes": self.notes,
            "scales": dict(self.scales),
        }
        if self.calibration is not None:
            d["calibration"] = self.calibration
        if self.model is not None:
            d["model"] = self.model.get("model")
            d["preset"] = self.model.get("preset")
            d["params"] = self.model.get("params")
            d["params_digest"] = self.model.get("digest")
        return d


def _rel(value: int, ref: int) -> float | None:
    return None if ref <= 0 else round((value - ref) / ref, JSON_DIGITS)


def slowdown(makespan_ns, reference_ns, digits: int | None = None):
    """Makespan relative to the reference replay (protocol ``none``, same trace, model, preset and
    parameters): 1.0 means the protocol costs nothing. Rounded to ``digits`` when given (each
    output picks its own: :data:`JSON_DIGITS` for the JSON reports, more in the study table).

    On plain numbers: ``None`` when there is no reference (missing or zero makespan). On numpy or
    pandas columns: element-wise, NaN where the reference is missing (inf where it is zero).
    """
    if np.ndim(reference_ns) == 0:
        if not reference_ns:
            return None
        ratio = makespan_ns / reference_ns
        return ratio if digits is None else round(ratio, digits)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = makespan_ns / reference_ns
    return ratio if digits is None else ratio.round(digits)


SLICE_NODES = 1 << 20  # nodes per slice of the per-node reductions: their temporaries stay ~8 MiB a column


def _slices(n: int):
    """Consecutive node slices of at most :data:`SLICE_NODES` (memory: every per-node reduction of
    the summary works slice by slice, so its temporaries do not grow with the graph)."""
    for lo in range(0, n, SLICE_NODES):
        yield slice(lo, min(n, lo + SLICE_NODES))


class _Entered:
    """:func:`entry_times` without the full array: the start times, except at the blocking calls
    (sorted indices ``at``, entry times ``value``); or a full array a caller already has."""

    def __init__(self, start: np.ndarray, at: np.ndarray | None = None, value: np.ndarray | None = None,
                 full: np.ndarray | None = None):
        self.start, self.at, self.value, self.full = start, at, value, full

    def part(self, sl: slice) -> np.ndarray:
        if self.full is not None:
            return self.full[sl]
        if self.at is None or not self.at.size:
            return self.start[sl]
        k0, k1 = np.searchsorted(self.at, (sl.start, sl.stop))
        if k0 == k1:
            return self.start[sl]
        out = self.start[sl].copy()
        out[self.at[k0:k1] - sl.start] = self.value[k0:k1]
        return out

    def min(self) -> int:
        """The earliest entry time (an entry time is never later than its node's start)."""
        if self.full is not None:
            return int(self.full.min())
        first = int(self.start.min())
        return first if self.at is None or not self.at.size else min(first, int(self.value.min()))

    def array(self) -> np.ndarray:
        if self.full is not None:
            return self.full
        if self.at is None or not self.at.size:
            return self.start
        out = self.start.copy()
        out[self.at] = self.value
        return out


def _entered(graph: OpGraph, sched: Schedule) -> _Entered:
    """When each node was reached (:func:`entry_times`), stored for the blocking calls only."""
    sy = np.flatnonzero(graph.kind == OpKind.SYNC)
    if not sy.size:
        return _Entered(sched.start)
    # the edges of the blocking calls only, in edge order, and the call each belongs to
    lo, counts = graph.dep_ptr[sy], graph.dep_ptr[sy + 1] - graph.dep_ptr[sy]
    owner = np.repeat(np.arange(sy.size), counts)  # index into sy
    first = np.cumsum(counts) - counts
    e = np.repeat(lo - first, counts) + np.arange(owner.size, dtype=np.int64)
    keep = graph.dep_kind[e] != DepKind.SYNC
    e, owner = e[keep], owner[keep]
    src = graph.dep_src[e]
    bound = np.where(graph.dep_kind[e] == DepKind.LAUNCH, sched.start[src], sched.finish[src]) + graph.dep_lag[e]
    entry = graph.release[sy].astype(np.int64, copy=True)
    np.maximum.at(entry, owner, bound)
    return _Entered(sched.start, sy, np.minimum(sched.start[sy], entry))


def first_entry(graph: OpGraph, sched: Schedule) -> int:
    """The earliest of :func:`entry_times`, without building the array."""
    return _entered(graph, sched).min()


def entry_times(graph: OpGraph, sched: Schedule) -> np.ndarray:
    """When each node was reached: its start, except for a blocking call (``sync`` op): the time
    its thread reached the call (its release and every prerequisite other than the GPU work it
    waits for). The wait between the two belongs to the call's span, as it does in a trace."""
    return _entered(graph, sched).array()


class _KeyedMinMax:
    """Per-key min or max of columns, gathered slice by slice: each slice's per-key results (a few
    rows) are kept and reduced once more at the end; the same result as one pass over all nodes."""

    def __init__(self, *hows: str):
        self.hows = hows
        self.keys: list[np.ndarray] = []
        self.parts: list[list[np.ndarray]] = [[] for _ in hows]

    def add(self, keys: np.ndarray, *values: np.ndarray) -> None:
        uk, reduced = _group_reduce(keys, *zip(values, self.hows))
        self.keys.append(uk)
        for part, r in zip(self.parts, reduced):
            part.append(r)

    def result(self) -> tuple[np.ndarray, list[np.ndarray]]:
        keys = np.concatenate(self.keys) if self.keys else np.zeros(0, np.int64)
        cols = [(np.concatenate(p) if p else np.zeros(0, np.int64), how) for p, how in zip(self.parts, self.hows)]
        return _group_reduce(keys, *cols)


def summarize(graph: OpGraph, sched: Schedule, protocol: str, trace_ops: int) -> ReplayResult:
    entered = _entered(graph, sched)
    spans, caps = _KeyedMinMax("min", "max"), _KeyedMinMax("min", "max")
    first = last = None  # of the replay (entry, finish)
    c_first = c_last = None  # of the measured nodes (captured start, end; shifted as the replay's clocks)
    shift = None
    if graph.n and graph.rank_shift.size > int(graph.rank.max()) and graph.rank_shift.any():
        shift = graph.rank_shift
    for sl in _slices(graph.n):
        rank, came, done = graph.rank[sl], entered.part(sl), sched.finish[sl]
        spans.add(rank, came, done)
        first = came.min() if first is None else min(first, came.min())
        last = done.max() if last is None else max(last, done.max())
        del came, done
        # the measured nodes (every node of a captured replay: then no index copies)
        c_start = graph.captured_start[sl]
        measured = c_start >= 0
        if measured.all():
            c_dur = graph.captured_dur[sl]
        else:
            idx = np.flatnonzero(measured)
            rank, c_start, c_dur = rank[idx], c_start[idx], graph.captured_dur[sl][idx]
        c_end = c_start + c_dur
        caps.add(rank, c_start, c_end)
        if c_start.size:
            lo, hi = (c_start, c_end) if shift is None else (c_start + shift[rank], c_end + shift[rank])
            c_first = lo.min() if c_first is None else min(c_first, lo.min())
            c_last = hi.max() if c_last is None else max(c_last, hi.max())
    ur, (s0, s1) = spans.result()
    ranks = [int(r) for r in ur]
    cr, (c0, c1) = caps.result()
    cap_span = dict(zip(cr.tolist(), (c1 - c0).tolist()))
    per_rank = [RankSpan(rank=int(r), makespan_ns=int(b - a), captured_span_ns=int(cap_span.get(int(r), 0)))
                for r, a, b in zip(ur.tolist(), s0, s1)]
    if first is None:
        raise ValueError("summarize: the graph has no nodes")
    makespan = int(last - first)
    # captured span of the whole job: ranks' clocks aligned by the same shifts as the replay
    # (no shift, or no shift per rank: as measured)
    captured_span = 0 if c_first is None else int(c_last - c_first)
    return ReplayResult(
        protocol=protocol,
        makespan_ns=makespan,
        ops=trace_ops,
        nodes=graph.n,
        ranks=ranks,
        per_rank=per_rank,
        steps=_step_spans(graph, sched, entered),
        critical_path_ns=critical_path(graph, sched),
        lane_usage=lane_usage(graph, sched, makespan),
        captured_span_ns=captured_span,
    )


def _group_reduce(keys: np.ndarray, *cols: tuple[np.ndarray, str]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Unique keys (ascending, int64) and, per key, the min or max of each column, in linear time:
    integer keys (non-negative) index a table directly when they are dense (ranks), else are
    hashed (:func:`replay.pipeline.keys.sorted_codes`) and only the distinct keys are sorted."""
    keys = np.asarray(keys)
    if keys.size == 0:
        return keys.astype(np.int64), [np.zeros(0, v.dtype) for v, _ in cols]
    lo, hi = int(keys.min()), int(keys.max())
    if lo == hi:  # one key (one rank): plain reductions
        return np.array([lo], np.int64), [np.array([values.min() if how == "min" else values.max()], values.dtype)
                                          for values, how in cols]
    if lo >= 0 and hi <= 4 * keys.size + 1024:
        present = np.bincount(keys, minlength=hi + 1) > 0
        uniq = np.flatnonzero(present)
        code, size = keys, hi + 1
    else:
        uniq, code = sorted_codes(keys)
        size = uniq.size
        present = None
    out = []
    for values, how in cols:
        info = np.iinfo(values.dtype)
        acc = np.full(size, info.max if how == "min" else info.min, values.dtype)
        (np.minimum if how == "min" else np.maximum).at(acc, code, values)
        out.append(acc[uniq] if present is not None else acc)
    return uniq, out


def step_spans(graph: OpGraph, sched: Schedule, entered: np.ndarray | None = None) -> list[dict[str, int]]:
    """Replayed and captured span of every (rank, step) the trace marks (``entered``: the
    :func:`entry_times` when the caller has them)."""
    return _step_spans(graph, sched, _entered(graph, sched) if entered is None else _Entered(sched.start, full=entered))


def _pick(a: np.ndarray, idx: np.ndarray | None) -> np.ndarray:
    return a if idx is None else a[idx]


def _step_spans(graph: OpGraph, sched: Schedule, entered: _Entered) -> list[dict[str, int]]:
    spans, caps = _KeyedMinMax("min", "max"), _KeyedMinMax("min", "max")
    for sl in _slices(graph.n):
        step = graph.step[sl]
        valid = step >= 0
        if not valid.any():
            continue
        has = None if valid.all() else np.flatnonzero(valid)  # (None: every node, no index copies)
        del valid
        keys = _pick(graph.rank[sl], has).astype(np.int64)
        keys <<= 32
        keys |= _pick(step, has)
        spans.add(keys, _pick(entered.part(sl), has), _pick(sched.finish[sl], has))
        measured = _pick(graph.captured_start[sl], has) >= 0
        cap = has if measured.all() else (np.flatnonzero(measured) if has is None else has[measured])
        ckeys = keys if cap is has else keys[measured]
        c_start = _pick(graph.captured_start[sl], cap)
        caps.add(ckeys, c_start, c_start + _pick(graph.captured_dur[sl], cap))
    if not spans.keys:
        return []
    uk, (s0, s1) = spans.result()
    cuk, (c0, c1) = caps.result()
    cap_span = dict(zip(cuk.tolist(), (c1 - c0).tolist()))
    return [{"rank": int(k >> 32), "step": int(k & 0xFFFFFFFF), "makespan_ns": int(b - a),
             "captured_span_ns": int(cap_span.get(int(k), 0))} for k, a, b in zip(uk.tolist(), s0, s1)]


_EDGE_CAT = np.array([int(EDGE_CATEGORY[DepKind(k)]) for k in range(len(DepKind))], np.int64)


def path_totals(graph: OpGraph, sched: Schedule, node: int, t_end: int, t_stop: int,
                node_code: np.ndarray | None = None, edge_code: np.ndarray | None = None,
                ncode: int | None = None, other_code: int | None = None, wait_code: int | None = None) -> np.ndarray:
    """Nanoseconds of the critical path that leads to ``node`` (from ``t_end`` back to ``t_stop``)
    per code. By default the codes are the :class:`Category` values (``critical_path``); callers
    may pass their own per-node and per-edge-kind codes (``replay.pipeline.serving`` splits by mechanism).
    """
    if node_code is None:
        node_code, edge_code, ncode = graph.category, _EDGE_CAT, len(Category)
        other_code, wait_code = int(Category.HOST), int(Category.BOUNCE_WAIT)
    # the walk (engine.hh's walkPath, or the numba kernel): a node's own time to its code, the lag
    # of the edge that bound a start to the edge kind's code, a pool-server wait to wait_code, a
    # start bound by its release, its lane or before the first node to other_code
    args = (int(node), int(t_end), int(t_stop))
    codes = (int(DepKind.LAUNCH), int(other_code), BOUND_GROUP, BOUND_LANE, int(wait_code))
    core = engine.native()
    if core is None:
        from replay.pipeline.engine_numba import walk_path

        return walk_path(sched.start, sched.finish, sched.crit_pred, sched.bound_by, sched.slot_wait, *args,
                         node_code, edge_code, int(ncode), *codes)
    c = np.ascontiguousarray
    node_code = c(node_code, np.int8 if np.asarray(node_code).dtype == np.int8 else np.int64)
    totals = np.zeros(int(ncode), np.int64)
    core.walk_path(c(sched.start, np.int64), c(sched.finish, np.int64), c(sched.crit_pred, INDEX),
                   c(sched.bound_by, np.int8), c(sched.slot_wait, np.int64), *args, node_code,
                   c(edge_code, np.int64), *codes, totals)
    return totals


def critical_path(graph: OpGraph, sched: Schedule) -> dict[str, int]:
    """Nanoseconds of the critical path per category; the values add up to the makespan."""
    if graph.n == 0:
        return {c.label: 0 for c in Category}
    last = int(np.argmax(sched.finish))
    totals = path_totals(graph, sched, last, int(sched.finish[last]), min(0, int(sched.start.min())))
    return {c.label: int(totals[int(c)]) for c in Category}


class LaneUsage:
    """The per-lane report as columns (:func:`lane_usage`); :meth:`rows` builds its rows, once.

    A replay of 10,000 ranks has over 100,000 lanes, most of them idle: the numbers are whole-array
    sums, and the Python rows (what the JSON report and the API's table show) are made only when
    something reads them, not by every replay (a sweep keeps a point's makespan and spans)."""

    def __init__(self, names, type_, rank, servers, ops, busy, quotient, pools, size):
        self.columns = (names, type_, rank, servers, ops, busy, quotient, pools, size)
        self._rows: list[dict[str, Any]] | None = None

    def __len__(self) -> int:
        return len(self.columns[0])

    def __eq__(self, other) -> bool:
        return isinstance(other, LaneUsage) and self.rows() == other.rows()

    def __repr__(self) -> str:
        return f"LaneUsage({len(self)} lanes)"

    def __getstate__(self):
        return {"columns": self.columns, "_rows": None}

    def rows(self) -> list[dict[str, Any]]:
        if self._rows is None:
            self._rows = self._build()
        return self._rows

    def _build(self) -> list[dict[str, Any]]:
        names, type_, rank, servers, ops, busy, q, pools, size = self.columns
        if q is None:  # (no makespan)
            util = [0.0] * len(names)
        else:
            # float(busy) / (servers * makespan) per lane, rounded by Python's round (exact ties);
            # a quotient of zero (an idle lane: 0.0, or -0.0) is its own rounding
            util = q.tolist()
            for k in np.flatnonzero(q != 0).tolist():
                util[k] = round(util[k], 6)
        labels = {int(t): LaneType(int(t)).label for t in np.unique(type_).tolist()}
        types = [labels[t] for t in type_.tolist()]
        out = [{"name": name, "type": typ, "rank": r, "servers": sv, "ops": n, "busy_ns": b, "utilization": u}
               for name, typ, r, sv, n, b, u in zip(names, types, rank.tolist(), servers.tolist(), ops.tolist(),
                                                    busy.tolist(), util)]
        for k in np.flatnonzero(pools).tolist():
            out[k]["peak_servers"] = int(size[k])
        return out


def lane_usage(graph: OpGraph, sched: Schedule, makespan: int) -> LaneUsage:
    """Busy time and utilisation of every lane (busy / (servers x makespan)), as columns.

    A pool lane (bounce slots) counts holds: ``ops`` is the number of holds, ``busy_ns`` the sum of
    (finish of the releasing node - start of the holder), ``peak_servers`` the size the pool grew
    to, and utilisation is relative to that size."""
    lanes = graph.lanes
    busy = np.zeros(len(lanes), np.int64)
    count = np.zeros(len(lanes), np.int64)
    for sl in _slices(graph.n):  # (exact: a slice's per-lane sums of int64 ns stay far below 2**53)
        lane, took = graph.lane[sl], sched.finish[sl] - sched.start[sl]
        on_lane = lane >= 0
        if not on_lane.all():  # (every node of a trace's graph is on a lane: no index copies)
            lane, took = lane[on_lane], took[on_lane]
        busy += np.bincount(lane, weights=took, minlength=len(lanes)).astype(np.int64)
        count += np.bincount(lane, minlength=len(lanes))
    holders = np.flatnonzero(graph.hold_lane >= 0)
    held = sched.finish[graph.hold_until[holders]] - sched.start[holders]
    busy += np.bincount(graph.hold_lane[holders], weights=np.maximum(held, 0), minlength=len(lanes)).astype(np.int64)
    count = count + np.bincount(graph.hold_lane[holders], minlength=len(lanes))
    pools = np.zeros(len(lanes), bool)
    pools[graph.hold_lane[holders]] = True
    size = sched.lane_servers[: len(lanes)].astype(np.int64)
    quotient = None if makespan <= 0 else busy.astype(np.float64) / (size * int(makespan)).astype(np.float64)
    return LaneUsage(lanes.names, lanes.type.copy(), lanes.rank.copy(), lanes.servers.copy(), count, busy, quotient,
                     pools, size)


def resource_usage(graph: OpGraph, sched: Schedule, makespan: int) -> list[dict[str, Any]]:
    """The rows of :func:`lane_usage`: per lane ``name``, ``type``, ``rank``, ``servers``,
    ``ops``, ``busy_ns``, ``utilization`` and, for a pool, ``peak_servers``."""
    return lane_usage(graph, sched, makespan).rows()


def setup_metrics(graph: OpGraph, sched: Schedule, windowed: bool = False) -> dict[str, Any]:
    """One-time setup of the replayed span (``{"rule", "setup_ns", "span_ns", "share"}``): the
    rule of :func:`fastrack_core.setup_time.setup_split` on the replayed entry times of the ops the
    trace recorded (nodes a protocol added neither start nor end a setup), over the makespan."""
    from fastrack_core.setup_time import computes, setup_split

    entered = entry_times(graph, sched)
    origin, last = int(entered.min()), int(sched.finish.max())
    ours = np.flatnonzero(graph.captured_start >= 0)
    kind = graph.kind[ours]
    return setup_split(entered[ours], sched.finish[ours], graph.step[ours], computes(kind, graph.copy_dir[ours]),
                       windowed=windowed, origin=origin, last=last)


def kind_counts(graph: OpGraph) -> dict[str, int]:
    vals, counts = np.unique(graph.kind, return_counts=True)
    return {graph.kind_label(int(v)): int(c) for v, c in zip(vals, counts)}


__all__ = ["ReplayResult", "summarize", "setup_metrics", "critical_path", "resource_usage", "lane_usage", "LaneUsage", "step_spans", "kind_counts",
           "BOUND_RELEASE", "OpKind"]
