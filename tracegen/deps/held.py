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

from fastrack.schema import DepKind
from tracegen.deps.edges import Edges
from tracegen.deps.launches import GpuOps
from tracegen.deps.search import group_ids

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
    key = group_ids(g.rank, g.device)
    by_end = np.lexsort((g.end, key))
    k_sorted, e_sorted = key[by_end], g.end[by_end]
    found_dst, found_src = [], []
    for i in held.tolist():
        lo = np.searchsorted(k_sorted, key[i], side="left")
        p = lo + np.searchsorted(e_sorted[lo:np.searchsorted(k_sorted, key[i], side="right")],
                                 g.start[i] + TIMESTAMP_TOL_NS, side="right") - 1
        floor = max(g.start[i] - WAIT_GAP_MAX_NS, ready[i])
        while p >= lo and e_sorted[p] >= floor:
            j = by_end[p]
            if g.stream[j] != g.stream[i] and g.issue[j] < g.issue[i] and g.start[j] < g.start[i]:
                found_dst.append(i)
                found_src.append(j)
                break
            p -= 1
    if found_dst:
        edges.add(gpu_base + np.array(found_dst, np.int64), gpu_base + np.array(found_src, np.int64),
                  DepKind.EVENT)
    return len(found_dst)
