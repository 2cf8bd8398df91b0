"""The replay engine: list scheduling of an OpGraph on in-order servers, in integer ns.

Scheduling rule (exact for CUDA streams, host threads and any other in-order server):

    ready[i]  = max(release[i], max over deps j of  finish[j] + lag   (start[j] + lag for LAUNCH))
    start[i]  = max(ready[i], earliest free server of lane[i])
    finish[i] = start[i] + dur[i]

Nodes are visited in one topological order; among the nodes whose prerequisites are all
visited, the one with the smallest ``order`` key (captured start time, then node index) goes
first. That visiting order is also the order in which a lane serves its nodes: a shared lane
(PCIe link, crypto engine, copy engine) is a FIFO in *issue order*, not a work-conserving
server that lets a later-issued ready node overtake an earlier one still waiting for its
inputs. This is deterministic and cheap (O(E + V log V)); docs/architecture.md explains the
choice. A multi-server lane gives each node the server that frees first (lowest index on ties).

Barrier groups (one collective on all its ranks) are visited together and start together, at
the latest of their members' individual start times.

If a node has an explicit STREAM edge from the node just before it on its (single-server) lane,
that edge, with its lag, replaces the lane constraint: this lets a STREAM edge with a negative lag
reproduce the measured overlap of consecutive kernels.

The loops are compiled with numba (cached on disk); ``FASTRACK_NO_JIT=1`` runs them as plain
Python, which gives the same results more slowly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastrack.errors import GraphError
from fastrack.schema import DepKind
from replay.graph import NO_LANE, OpGraph

from fastrack.jit import njit

# How a node's start was bound (the ``bound_by`` result).
BOUND_RELEASE = -1  # by its release time (or time 0)
BOUND_LANE = -2  # by its lane being busy with the previous node
BOUND_GROUP = -3  # by another member of its barrier group
# values >= 0 are DepKind codes: bound by that edge from ``crit_pred``

_LAUNCH = int(DepKind.LAUNCH)
_STREAM = int(DepKind.STREAM)


@dataclass(frozen=True)
class Schedule:
    """The replay's result for every node of a graph (indices as in the graph)."""

    start: np.ndarray  # int64 ns
    finish: np.ndarray  # int64 ns
    crit_pred: np.ndarray  # int64: node whose finish/start bound this node's start, or -1
    bound_by: np.ndarray  # int8: BOUND_* or the DepKind of the binding edge
    order: np.ndarray  # int64: the visiting order

    @property
    def makespan(self) -> int:
        return int(self.finish.max() - min(0, int(self.start.min()))) if self.finish.size else 0


@njit(cache=True)
def _heap_push(hk, hi, size, key, idx):
    pos = size
    hk[pos] = key
    hi[pos] = idx
    while pos > 0:
        parent = (pos - 1) >> 1
        if hk[parent] < hk[pos] or (hk[parent] == hk[pos] and hi[parent] < hi[pos]):
            break
        hk[parent], hk[pos] = hk[pos], hk[parent]
        hi[parent], hi[pos] = hi[pos], hi[parent]
        pos = parent
    return size + 1


@njit(cache=True)
def _heap_pop(hk, hi, size):
    idx = hi[0]
    size -= 1
    hk[0] = hk[size]
    hi[0] = hi[size]
    pos = 0
    while True:
        left = 2 * pos + 1
        if left >= size:
            break
        best = left
        right = left + 1
        if right < size and (hk[right] < hk[left] or (hk[right] == hk[left] and hi[right] < hi[left])):
            best = right
        if hk[pos] < hk[best] or (hk[pos] == hk[best] and hi[pos] < hi[best]):
            break
        hk[pos], hk[best] = hk[best], hk[pos]
        hi[pos], hi[best] = hi[best], hi[pos]
        pos = best
    return idx, size


@njit(cache=True)
def _topo_order(n, rep, mem_ptr, mem_idx, out_ptr, out_dst, key):
    """Kahn's algorithm over super-nodes (barrier groups contracted to their representative).
    Returns (order of nodes, number of nodes placed)."""
    indeg = np.zeros(n, np.int64)
    for e in range(out_dst.shape[0]):
        indeg[rep[out_dst[e]]] += 1
    hk = np.empty(n, np.int64)
    hi = np.empty(n, np.int64)
    size = 0
    for i in range(n):
        if rep[i] == i and indeg[i] == 0:
            size = _heap_push(hk, hi, size, key[i], i)
    order = np.empty(n, np.int64)
    placed = 0
    while size > 0:
        r, size = _heap_pop(hk, hi, size)
        for m in range(mem_ptr[r], mem_ptr[r + 1]):
            node = mem_idx[m]
            order[placed] = node
            placed += 1
            for e in range(out_ptr[node], out_ptr[node + 1]):
                t = rep[out_dst[e]]
                indeg[t] -= 1
                if indeg[t] == 0:
                    size = _heap_push(hk, hi, size, key[t], t)
    return order, placed


@njit(cache=True)
def _schedule(order, rep, mem_ptr, mem_idx, lane, srv_ptr, dur, release, dep_ptr, dep_src, dep_kind, dep_lag,
              launch_code, stream_code):
    n = order.shape[0]
    start = np.zeros(n, np.int64)
    finish = np.zeros(n, np.int64)
    pred = np.full(n, -1, np.int64)
    bound = np.full(n, -1, np.int8)
    free = np.zeros(srv_ptr[-1], np.int64)  # per server: time it frees
    last = np.full(srv_ptr.shape[0] - 1, -1, np.int64)  # per lane: last node served
    chosen = np.zeros(n, np.int64)  # server picked per node
    pos = 0
    while pos < n:
        node0 = order[pos]
        r = rep[node0]
        first = mem_ptr[r]
        count = mem_ptr[r + 1] - first
        gstart = np.int64(-(1 << 62))
        gbind = -1
        for k in range(count):
            i = order[pos + k]
            t = release[i]
            p = np.int64(-1)
            b = np.int8(-1)
            ln = lane[i]
            explicit = False
            for e in range(dep_ptr[i], dep_ptr[i + 1]):
                s = dep_src[e]
                if dep_kind[e] == launch_code:
                    c = start[s] + dep_lag[e]
                else:
                    c = finish[s] + dep_lag[e]
                if c > t or p < 0 and c == t:
                    t = c
                    p = s
                    b = np.int8(dep_kind[e])
                if dep_kind[e] == stream_code and ln >= 0 and s == last[ln] and srv_ptr[ln + 1] - srv_ptr[ln] == 1:
                    explicit = True
            if ln >= 0:
                best = srv_ptr[ln]
                for sv in range(srv_ptr[ln] + 1, srv_ptr[ln + 1]):
                    if free[sv] < free[best]:
                        best = sv
                chosen[i] = best
                if not explicit and free[best] > t:
                    t = free[best]
                    p = last[ln]
                    b = np.int8(-2)
            start[i] = t
            pred[i] = p
            bound[i] = b
            if t > gstart:
                gstart = t
                gbind = i
        for k in range(count):
            i = order[pos + k]
            if count > 1 and start[i] < gstart:
                start[i] = gstart
                pred[i] = gbind
                bound[i] = np.int8(-3)
            finish[i] = start[i] + dur[i]
            ln = lane[i]
            if ln >= 0:
                sv = chosen[i]
                if finish[i] > free[sv]:
                    free[sv] = finish[i]
                last[ln] = i
        pos += count
    return start, finish, pred, bound


def _groups(graph: OpGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """rep[i] (representative node of i's group), members CSR (mem_ptr by rep, mem_idx)."""
    n = graph.n
    rep = np.arange(n, dtype=np.int64)
    grouped = np.flatnonzero(graph.group >= 0)
    if grouped.size:
        gids = graph.group[grouped]
        order = np.lexsort((grouped, gids))
        g_sorted = gids[order]
        nodes_sorted = grouped[order]
        first_of = np.r_[True, g_sorted[1:] != g_sorted[:-1]]
        first_idx = np.maximum.accumulate(np.where(first_of, np.arange(g_sorted.size), 0))
        rep[nodes_sorted] = nodes_sorted[first_idx]
    counts = np.bincount(rep, minlength=n)
    mem_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=mem_ptr[1:])
    mem_idx = np.argsort(rep, kind="stable").astype(np.int64)
    return rep, mem_ptr, mem_idx


def topological_order(graph: OpGraph) -> np.ndarray:
    """The engine's visiting order; raises GraphError naming the ops of a cycle."""
    n = graph.n
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(graph.dep_ptr))
    src = graph.dep_src.astype(np.int64)
    rep, mem_ptr, mem_idx = _groups(graph)
    same = rep[src] == rep[dst]
    if np.any(same):
        e = int(np.flatnonzero(same)[0])
        raise GraphError(
            f"cycle: {graph.node_label(int(src[e]))} and {graph.node_label(int(dst[e]))} "
            "are in the same collective group but one depends on the other"
        )
    by_src = np.argsort(src, kind="stable")
    out_dst = dst[by_src]
    out_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=out_ptr[1:])
    order, placed = _topo_order(n, rep, mem_ptr, mem_idx, out_ptr, out_dst, graph.order.astype(np.int64))
    if placed < n:
        _raise_cycle(graph, order[:placed])
    return order


def _raise_cycle(graph: OpGraph, placed: np.ndarray) -> None:
    import networkx as nx

    left = np.ones(graph.n, bool)
    left[placed] = False
    nodes = np.flatnonzero(left)
    g = nx.DiGraph()
    for i in nodes:
        for s in graph.deps_of(int(i)):
            if left[s]:
                g.add_edge(int(s), int(i))
    try:
        cycle = nx.find_cycle(g)
        ops = [graph.node_label(u) for u, _ in cycle[:6]]
        more = f" (+{len(cycle) - 6} more)" if len(cycle) > 6 else ""
        raise GraphError(f"dependency cycle through {len(cycle)} op(s): {' -> '.join(ops)}{more}")
    except nx.NetworkXNoCycle:  # a group spans nodes that wait on each other
        raise GraphError(f"{nodes.size} op(s) can never start, first {graph.node_label(int(nodes[0]))}") from None


def schedule(graph: OpGraph) -> Schedule:
    """Replay a graph. Deterministic: the same graph always gives the same schedule."""
    graph.validate()
    order = topological_order(graph)
    rep, mem_ptr, mem_idx = _groups(graph)  # members of a group are contiguous in ``order``
    lane_servers = graph.lanes.servers.astype(np.int64)
    srv_ptr = np.zeros(len(graph.lanes) + 1, np.int64)
    np.cumsum(lane_servers, out=srv_ptr[1:])
    start, finish, pred, bound = _schedule(
        order,
        rep,
        mem_ptr,
        mem_idx,
        graph.lane.astype(np.int64),
        srv_ptr,
        graph.dur.astype(np.int64),
        graph.release.astype(np.int64),
        graph.dep_ptr.astype(np.int64),
        graph.dep_src.astype(np.int64),
        graph.dep_kind.astype(np.int64),
        graph.dep_lag.astype(np.int64),
        _LAUNCH,
        _STREAM,
    )
    return Schedule(start=start, finish=finish, crit_pred=pred, bound_by=bound, order=order)


__all__ = ["njit", "Schedule", "schedule", "topological_order", "BOUND_GROUP", "BOUND_LANE", "BOUND_RELEASE", "NO_LANE"]
