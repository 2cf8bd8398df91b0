"""Cross-stream waits the trace does not name, inferred from the timeline (``event`` edges).

A GPU op was *ready* once its stream predecessor had finished, its launching call had been
issued and every cross-stream event already derived had fired. One that started more than
``HELD_MIN_NS`` after that was held by something else. When an op on another stream of the same
(rank, device), issued strictly before it, finished at most ``WAIT_GAP_MAX_NS`` before it
started (and after it was ready; ``TIMESTAMP_TOL_NS`` after it for coarse timestamps), that op is what it waited for: an ``event`` edge. This is the
signature of a stream wait whose record call the profiler did not keep (c10d ``work.wait()`` in
older Kineto traces, NCCL streams waiting for the compute stream, pageable copies waiting for
the kernels that produce their data). Strictly earlier issue keeps the graph acyclic (every
other edge goes forward in issue order). Ops held with no such candidate stay as they are; the
replay reports them as unexplained instead of pinning them.
"""

from __future__ import annotations

import numpy as np

from fastrack_core.schema import DepKind
from tracegen.deps.edges import Edges
from tracegen.deps.launches import GpuOps
from tracegen.deps.search import Ordered, group_ids

# A GPU op starting more than this (ns) after it was ready was held by something. Above the
# spread of launch latencies on the real traces (5-20 us launch-to-start on idle streams).
HELD_MIN_NS = 20_000
# Largest gap (ns) between the end of an op on another stream and the start of the held op for the
# first to count as what the second waited for: an event wait resolves within a few microseconds
# (about the GPU's back-to-back dispatch gap).
WAIT_GAP_MAX_NS = 10_000
# Integer-microsecond timestamps of older profilers put an end up to a microsecond or two past the
# start that follows it; an end this far (ns) after the held op's start still counts.
TIMESTAMP_TOL_NS = 2_000


def held_edges(g: GpuOps, gpu_base: int, edges: Edges) -> int:
    """Add inferred ``event`` edges for held GPU ops; returns how many were added."""
    n = g.n
    if n < 2:
        return 0
    ready = np.where(g.issuer >= 0, g.issue, np.iinfo(np.int64).min)
    dst, src = edges.between(gpu_base, gpu_base + n, (DepKind.STREAM, DepKind.EVENT))
    if dst.size:
        np.maximum.at(ready, dst - gpu_base, g.end[src - gpu_base])
    held = np.flatnonzero((ready > np.iinfo(np.int64).min) & (g.start - ready > HELD_MIN_NS))
    if not held.size:
        return 0
    # per held op: the last op of its (rank, device) by end that ended by its start (+ tolerance),
    # then back through earlier ends (Python ints: the walk is short, numpy scalars cost more)
    key = group_ids(g.rank, g.device)
    by_end = Ordered(key, g.end)
    last = by_end.last_before(key[held], g.start[held] + TIMESTAMP_TOL_NS, inclusive=True)
    pos = np.empty(n, np.int64)
    pos[by_end.order] = np.arange(n)
    k = by_end.key
    first = np.ones(n, bool)
    first[1:] = k[1:] != k[:-1]
    group_lo = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    at = np.where(last >= 0, pos[np.maximum(last, 0)], -1)
    lows = np.where(last >= 0, group_lo[np.maximum(at, 0)], 0)
    floors = np.maximum(g.start[held] - WAIT_GAP_MAX_NS, ready[held])
    ends, order = by_end.t.tolist(), by_end.order.tolist()
    stream, issue, start = g.stream.tolist(), g.issue.tolist(), g.start.tolist()
    found_dst, found_src = [], []
    for i, p, lo, floor in zip(held.tolist(), at.tolist(), lows.tolist(), floors.tolist()):
        while p >= lo and ends[p] >= floor:
            j = order[p]
            if stream[j] != stream[i] and issue[j] < issue[i] and start[j] < start[i]:
                found_dst.append(i)
                found_src.append(j)
                break
            p -= 1
    if found_dst:
        edges.add(gpu_base + np.array(found_dst, np.int64), gpu_base + np.array(found_src, np.int64),
                  DepKind.EVENT)
    return len(found_dst)
