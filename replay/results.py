"""What a replay reports: spans per rank and step, the critical path by category, resources.

The critical path is walked backwards from the node that finishes last, following for each node
the prerequisite that bound its start (``Schedule.crit_pred``). Every nanosecond of the makespan
is attributed to exactly one :class:`~replay.graph.Category`: a node's own time to its category,
the lag of the edge that led to it to the edge's category (launch latency, PCIe latency,
bounce-slot waits, ...), and time before the first node to ``host``. The categories therefore
add up to the makespan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fastrack.schema import DepKind, OpKind
from replay.engine import BOUND_GROUP, BOUND_LANE, BOUND_RELEASE, Schedule
from replay.graph import Category, LaneType, OpGraph

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
        }
        if self.model is not None:
            d["model"] = self.model.get("model")
            d["preset"] = self.model.get("preset")
            d["params"] = self.model.get("params")
            d["params_digest"] = self.model.get("digest")
        return d


def _rel(value: int, ref: int) -> float | None:
    return None if ref <= 0 else round((value - ref) / ref, 6)


def summarize(graph: OpGraph, sched: Schedule, protocol: str, trace_ops: int) -> ReplayResult:
    ranks = sorted(int(r) for r in np.unique(graph.rank))
    per_rank = []
    captured = graph.captured_start >= 0
    cap_end = graph.captured_start + graph.captured_dur
    for r in ranks:
        m = graph.rank == r
        mc = m & captured
        cap = int(cap_end[mc].max() - graph.captured_start[mc].min()) if np.any(mc) else 0
        per_rank.append(RankSpan(rank=r, makespan_ns=int(sched.finish[m].max() - min(0, sched.start[m].min())),
                                 captured_span_ns=cap))
    makespan = max(p.makespan_ns for p in per_rank)
    captured_span = max(p.captured_span_ns for p in per_rank)
    return ReplayResult(
        protocol=protocol,
        makespan_ns=makespan,
        ops=trace_ops,
        nodes=graph.n,
        ranks=ranks,
        per_rank=per_rank,
        steps=step_spans(graph, sched),
        critical_path_ns=critical_path(graph, sched),
        resources=resource_usage(graph, sched, makespan),
        captured_span_ns=captured_span,
    )


def step_spans(graph: OpGraph, sched: Schedule) -> list[dict[str, int]]:
    """Replayed and captured span of every (rank, step) the trace marks."""
    out = []
    has = graph.step >= 0
    if not np.any(has):
        return out
    keys = np.unique(np.stack([graph.rank[has], graph.step[has]], axis=1), axis=0)
    for r, s in keys:
        m = (graph.rank == r) & (graph.step == s)
        mc = m & (graph.captured_start >= 0)
        out.append({
            "rank": int(r),
            "step": int(s),
            "makespan_ns": int(sched.finish[m].max() - sched.start[m].min()),
            "captured_span_ns": int((graph.captured_start[mc] + graph.captured_dur[mc]).max()
                                    - graph.captured_start[mc].min()) if np.any(mc) else 0,
        })
    return out


def critical_path(graph: OpGraph, sched: Schedule) -> dict[str, int]:
    """Nanoseconds of the critical path per category; the values add up to the makespan."""
    totals = np.zeros(len(Category), np.int64)
    if graph.n == 0:
        return {c.label: 0 for c in Category}
    i = int(np.argmax(sched.finish))
    t = int(sched.finish[i])
    origin = min(0, int(sched.start.min()))
    steps = 0
    while i >= 0 and steps <= graph.n:
        steps += 1
        s = int(sched.start[i])
        own = max(0, min(int(sched.finish[i]), t) - s)
        totals[int(graph.category[i])] += own
        t = min(t, s)
        p = int(sched.crit_pred[i])
        b = int(sched.bound_by[i])
        if p < 0:
            break
        if b == int(DepKind.LAUNCH):
            anchor = int(sched.start[p])
        elif b == BOUND_GROUP:
            anchor = s  # the other member started at the same time; continue on its path
        else:
            anchor = int(sched.finish[p])
        if anchor < t:
            cat = Category.HOST if b == BOUND_LANE else EDGE_CATEGORY.get(DepKind(b), Category.HOST) if b >= 0 \
                else Category.HOST
            totals[int(cat)] += t - anchor
            t = anchor
        i = p
    totals[int(Category.HOST)] += max(0, t - origin)
    return {c.label: int(totals[int(c)]) for c in Category}


def resource_usage(graph: OpGraph, sched: Schedule, makespan: int) -> list[dict[str, Any]]:
    """Busy time and utilisation of every lane (busy / (servers x makespan))."""
    lanes = graph.lanes
    on_lane = graph.lane >= 0
    busy = np.bincount(graph.lane[on_lane], weights=(sched.finish - sched.start)[on_lane],
                       minlength=len(lanes)).astype(np.int64)
    count = np.bincount(graph.lane[on_lane], minlength=len(lanes))
    out = []
    for li in range(len(lanes)):
        servers = int(lanes.servers[li])
        out.append({
            "name": lanes.names[li],
            "type": LaneType(int(lanes.type[li])).label,
            "rank": int(lanes.rank[li]),
            "servers": servers,
            "ops": int(count[li]),
            "busy_ns": int(busy[li]),
            "utilization": round(float(busy[li]) / (servers * makespan), 6) if makespan > 0 else 0.0,
        })
    return out


def kind_counts(graph: OpGraph) -> dict[str, int]:
    vals, counts = np.unique(graph.kind, return_counts=True)
    return {graph.kind_label(int(v)): int(c) for v, c in zip(vals, counts)}


__all__ = ["ReplayResult", "summarize", "critical_path", "resource_usage", "step_spans", "kind_counts",
           "BOUND_RELEASE", "OpKind"]
