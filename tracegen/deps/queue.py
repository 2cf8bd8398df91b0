"""Launch calls blocked on a full launch queue: their blocking part waits for a GPU op.

A CUDA launch returns at once while the launch queue has room; when it is full, the call blocks
until an earlier op completes and frees a slot. A launching call (not otherwise blocking) that
lasted more than ``BLOCKED_LAUNCH_MIN_NS`` and returned at most ``WAIT_GAP_MAX_NS`` after a GPU op
of its rank ended (``TIMESTAMP_TOL_NS`` before, for coarse timestamps) waited for that op. It is
split like a blocking call: a ``runtime`` op of the typical duration of that call on its rank
(median over the rank's launching calls of that name), then a ``sync`` op that depends on the GPU
op it waited for (that op must have been issued before the split, which keeps the graph acyclic). The
replay then returns from the call when that op completes, whenever that is.
"""

from __future__ import annotations

import numpy as np

from fastrack_core.schema import OpKind
from tracegen.deps.held import TIMESTAMP_TOL_NS, WAIT_GAP_MAX_NS
from tracegen.deps.hosts import HostCalls
from tracegen.deps.launches import GpuOps
from tracegen.deps.raw import RawOps
from tracegen.deps.search import EMPTY, distinct, group_ids

# A launching call longer than this (ns) may have blocked on a full queue. Unblocked launch calls
# on the real traces take 3-28 us at the median and at most 76 us (cudaLaunchKernel, A100).
BLOCKED_LAUNCH_MIN_NS = 100_000


def _group_median(rank: np.ndarray, name: np.ndarray, dur: np.ndarray, names: np.ndarray) -> np.ndarray:
    """Per call, the median ``dur`` of the calls of its (rank, name code), truncated to int (the
    mean of the two middle values for an even count, as pandas' groupby median)."""
    if (name < 0).any():  # a missing name: pandas' grouping (which leaves such calls out) decides
        import pandas as pd

        return pd.Series(dur).groupby([rank, names]).transform("median").to_numpy(np.int64)
    o = np.lexsort((dur, name, rank))
    key = group_ids(rank, name)[o]
    n = len(o)
    first = np.ones(n, bool)
    first[1:] = key[1:] != key[:-1]
    lo = np.flatnonzero(first)
    size = np.diff(np.append(lo, n))
    d = dur[o].astype(np.float64)
    med = (d[lo + (size - 1) // 2] + d[lo + size // 2]) / 2.0
    out = np.empty(n, np.int64)
    out[o] = med.astype(np.int64)[np.cumsum(first) - 1]
    return out


def blocked_launches(c: HostCalls, g: GpuOps, r: RawOps) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(calls, split points, GPU op each waited for) of the launching calls blocked on a full queue."""
    launched = distinct(g.launch[g.launch >= 0])
    if not launched.size:
        return EMPTY, EMPTY, EMPTY
    dur = c.end - c.start
    typical = _group_median(c.rank[launched], r.name_code[c.raw[launched]], dur[launched], r.names[c.raw[launched]])
    long_ = (dur[launched] > BLOCKED_LAUNCH_MIN_NS) & ~c.blocking[launched] & (c.kind[launched] == OpKind.RUNTIME)
    cand, typical = launched[long_], typical[long_]
    if not cand.size:
        return EMPTY, EMPTY, EMPTY
    split_at = c.start[cand] + np.minimum(dur[cand], np.maximum(typical, 1))
    # issued no later than: its call's start (real launch), else its own start
    issued = np.where(g.launch >= 0, c.start[np.maximum(g.launch, 0)], g.start)
    by_end = np.lexsort((g.end, g.rank))
    ranks, ends = g.rank[by_end], g.end[by_end]
    calls, at, awaited = [], [], []
    for k, i in enumerate(cand.tolist()):
        lo, hi = np.searchsorted(ranks, c.rank[i], "left"), np.searchsorted(ranks, c.rank[i], "right")
        p = lo + np.searchsorted(ends[lo:hi], c.end[i] + TIMESTAMP_TOL_NS, side="right") - 1
        while p >= lo and ends[p] >= c.end[i] - WAIT_GAP_MAX_NS:
            j = by_end[p]
            if issued[j] < split_at[k] and g.launch[j] != i:
                calls.append(i)
                at.append(int(split_at[k]))
                awaited.append(j)
                break
            p -= 1
    return np.array(calls, np.int64), np.array(at, np.int64), np.array(awaited, np.int64)
