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

from fastrack.schema import DepKind, OpKind
from replay import engine
from replay.engine import BOUND_GROUP, BOUND_LANE, BOUND_RELEASE, Schedule
from replay.graph import Category, LaneType, OpGraph
from replay.keys import sorted_codes

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
    resources: list[dict[str, Any]]
    captured_span_ns: int
    model: dict[str, Any] | None = None  # model name, preset, params, digest
    notes: list[str] = field(default_factory=list)
    scales: dict[str, float] = field(default_factory=dict)  # what-if duration factors applied
    calibration: dict[str, Any] | None = None  # what the graph builder derived (replay.causal)

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


def entry_times(graph: OpGraph, sched: Schedule) -> np.ndarray:
    """When each node was reached: its start, except for a blocking call (``sync`` op): the time
    its thread reached the call (its release and every prerequisite other than the GPU work it
    waits for). The wait between the two belongs to the call's span, as it does in a trace."""
    sy = np.flatnonzero(graph.kind == OpKind.SYNC)
    if not sy.size:
        return sched.start
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
    out = sched.start.copy()
    out[sy] = np.minimum(sched.start[sy], entry)
    return out


def summarize(graph: OpGraph, sched: Schedule, protocol: str, trace_ops: int) -> ReplayResult:
    rank = graph.rank
    entered = entry_times(graph, sched)
    ur, (s0, s1) = _group_reduce(rank, (entered, "min"), (sched.finish, "max"))
    ranks = [int(r) for r in ur]
    # the measured nodes (every node of a captured replay: then no index copies)
    measured = graph.captured_start >= 0
    whole = bool(measured.all())
    cap = None if whole else np.flatnonzero(measured)
    del measured
    c_rank = rank if whole else rank[cap]
    c_start = graph.captured_start if whole else graph.captured_start[cap]
    c_end = c_start + (graph.captured_dur if whole else graph.captured_dur[cap])
    cr, (c0, c1) = _group_reduce(c_rank, (c_start, "min"), (c_end, "max"))
    cap_span = dict(zip(cr.tolist(), (c1 - c0).tolist()))
    per_rank = [RankSpan(rank=int(r), makespan_ns=int(b - a), captured_span_ns=int(cap_span.get(int(r), 0)))
                for r, a, b in zip(ur.tolist(), s0, s1)]
    makespan = int(sched.finish.max() - entered.min())
    # captured span of the whole job: ranks' clocks aligned by the same shifts as the replay
    if not c_start.size:
        captured_span = 0
    elif graph.rank_shift.size > int(rank.max()) and graph.rank_shift.any():
        shift = graph.rank_shift[c_rank]
        captured_span = int((c_end + shift).max() - (c_start + shift).min())
    else:  # no shift (or no shift per rank): as measured
        captured_span = int(c_end.max() - c_start.min())
    del c_rank, c_start, c_end, cap
    return ReplayResult(
        protocol=protocol,
        makespan_ns=makespan,
        ops=trace_ops,
        nodes=graph.n,
        ranks=ranks,
        per_rank=per_rank,
        steps=step_spans(graph, sched, entered),
        critical_path_ns=critical_path(graph, sched),
        resources=resource_usage(graph, sched, makespan),
        captured_span_ns=captured_span,
    )


def _group_reduce(keys: np.ndarray, *cols: tuple[np.ndarray, str]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Unique keys (ascending, int64) and, per key, the min or max of each column, in linear time:
    integer keys (non-negative) index a table directly when they are dense (ranks), else are
    hashed (:func:`replay.keys.sorted_codes`) and only the distinct keys are sorted."""
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
    """Replayed and captured span of every (rank, step) the trace marks."""
    valid = graph.step >= 0
    every = bool(valid.all())  # (then no index copies)
    has = None if every else np.flatnonzero(valid)
    del valid
    if has is not None and not has.size:
        return []
    entered = entry_times(graph, sched) if entered is None else entered

    def pick(a, idx):
        return a if every and idx is has else a[idx]

    keys = pick(graph.rank, has).astype(np.int64)
    keys <<= 32
    keys |= pick(graph.step, has)
    uk, (s0, s1) = _group_reduce(keys, (pick(entered, has), "min"), (pick(sched.finish, has), "max"))
    measured = pick(graph.captured_start, has) >= 0
    cap = has if measured.all() else (np.flatnonzero(measured) if has is None else has[measured])
    ckeys = keys if cap is has else keys[measured]
    c_start = pick(graph.captured_start, cap)
    cuk, (c0, c1) = _group_reduce(ckeys, (c_start, "min"), (c_start + pick(graph.captured_dur, cap), "max"))
    cap_span = dict(zip(cuk.tolist(), (c1 - c0).tolist()))
    return [{"rank": int(k >> 32), "step": int(k & 0xFFFFFFFF), "makespan_ns": int(b - a),
             "captured_span_ns": int(cap_span.get(int(k), 0))} for k, a, b in zip(uk.tolist(), s0, s1)]


_EDGE_CAT = np.array([int(EDGE_CATEGORY[DepKind(k)]) for k in range(len(DepKind))], np.int64)


def path_totals(graph: OpGraph, sched: Schedule, node: int, t_end: int, t_stop: int,
                node_code: np.ndarray | None = None, edge_code: np.ndarray | None = None,
                ncode: int | None = None, other_code: int | None = None, wait_code: int | None = None) -> np.ndarray:
    """Nanoseconds of the critical path that leads to ``node`` (from ``t_end`` back to ``t_stop``)
    per code. By default the codes are the :class:`Category` values (``critical_path``); callers
    may pass their own per-node and per-edge-kind codes (``replay.serving`` splits by mechanism).
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
        from replay.engine_numba import walk_path

        return walk_path(sched.start, sched.finish, sched.crit_pred, sched.bound_by, sched.slot_wait, *args,
                         node_code, edge_code, int(ncode), *codes)
    c = np.ascontiguousarray
    node_code = c(node_code, np.int8 if np.asarray(node_code).dtype == np.int8 else np.int64)
    totals = np.zeros(int(ncode), np.int64)
    core.walk_path(c(sched.start, np.int64), c(sched.finish, np.int64), c(sched.crit_pred, np.int64),
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


def resource_usage(graph: OpGraph, sched: Schedule, makespan: int) -> list[dict[str, Any]]:
    """Busy time and utilisation of every lane (busy / (servers x makespan)).

    A pool lane (bounce slots) counts holds: ``ops`` is the number of holds, ``busy_ns`` the sum of
    (finish of the releasing node - start of the holder), ``peak_servers`` the size the pool grew
    to, and utilisation is relative to that size."""
    lanes = graph.lanes
    on_lane = graph.lane >= 0
    if on_lane.all():  # (every node of a trace's graph: no index copies)
        lane, took = graph.lane, sched.finish - sched.start
    else:
        lane, took = graph.lane[on_lane], (sched.finish - sched.start)[on_lane]
    busy = np.bincount(lane, weights=took, minlength=len(lanes)).astype(np.int64)
    count = np.bincount(lane, minlength=len(lanes))
    del lane, took
    holders = np.flatnonzero(graph.hold_lane >= 0)
    held = sched.finish[graph.hold_until[holders]] - sched.start[holders]
    busy += np.bincount(graph.hold_lane[holders], weights=np.maximum(held, 0), minlength=len(lanes)).astype(np.int64)
    count = count + np.bincount(graph.hold_lane[holders], minlength=len(lanes))
    pools = np.zeros(len(lanes), bool)
    pools[graph.hold_lane[holders]] = True
    out = []
    for li in range(len(lanes)):
        servers = int(lanes.servers[li])
        size = int(sched.lane_servers[li])
        row = {
            "name": lanes.names[li],
            "type": LaneType(int(lanes.type[li])).label,
            "rank": int(lanes.rank[li]),
            "servers": servers,
            "ops": int(count[li]),
            "busy_ns": int(busy[li]),
            "utilization": round(float(busy[li]) / (size * makespan), 6) if makespan > 0 else 0.0,
        }
        if pools[li]:
            row["peak_servers"] = size
        out.append(row)
    return out


def kind_counts(graph: OpGraph) -> dict[str, int]:
    vals, counts = np.unique(graph.kind, return_counts=True)
    return {graph.kind_label(int(v)): int(c) for v, c in zip(vals, counts)}


__all__ = ["ReplayResult", "summarize", "critical_path", "resource_usage", "step_spans", "kind_counts",
           "BOUND_RELEASE", "OpKind"]
