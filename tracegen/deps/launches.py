"""GPU ops and their launches: which call launched each GPU op, and when it was issued.

* ``launch``: call -> GPU op(s) with its correlation (CUDA graphs: many). A GPU op whose
  correlation id is below that of every call recorded on its rank was launched before the
  profiler started: no launch. Other GPU ops without a call get an inferred launch from the
  latest ``runtime`` op started at or before the GPU op on the rank's main launching thread (most
  launches; ties: lowest thread id).
* Issue order: a GPU op is *issued* at the start of its (real or inferred) launching call. A GPU
  op with no call at all started before any call the rank's main launching thread made, so it
  was queued before the profiler saw its launch: it is issued at the earlier of its own start
  and 1 ns before the rank's first host call (so that a sync call made before it ran waits for it).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fastrack_core.schema import DepKind, OpKind
from tracegen.deps.edges import Edges
from tracegen.deps.hosts import CorrMap, HostOps
from tracegen.deps.raw import RawOps
from tracegen.deps.search import EMPTY, I64_MIN, Ordered, key_ids


@dataclasses.dataclass
class GpuOps:
    """GPU ops sorted by (rank, start, raw row); ``issuer``/``issue``/``launch_thread`` come from
    :func:`launch_edges`."""

    raw: np.ndarray  # raw row
    rank: np.ndarray
    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    corr: np.ndarray
    launch: np.ndarray  # host call with the same correlation, or -1
    issuer: np.ndarray = dataclasses.field(default_factory=lambda: EMPTY)  # real or inferred launch, or -1
    issue: np.ndarray = dataclasses.field(default_factory=lambda: EMPTY)  # issue time
    launch_thread: np.ndarray = dataclasses.field(default_factory=lambda: EMPTY)  # thread of the issuer

    @property
    def n(self) -> int:
        return len(self.raw)

    @property
    def launched(self) -> np.ndarray:
        return self.launch >= 0


def gpu_ops(r: RawOps, corr_map: CorrMap) -> GpuOps:
    """The GPU ops of ``r`` and their real launches (``corr_map`` from the flattened host calls)."""
    G = np.flatnonzero(r.is_gpu)
    G = G[np.lexsort((G, r.start[G], r.rank[G]))]
    G_rank, G_corr = r.rank[G], r.corr[G]
    g_launch = np.full(len(G), -1, np.int64)
    if len(G) and len(corr_map):
        g_launch = corr_map.find(G_rank, G_corr)
    return GpuOps(raw=G, rank=G_rank, start=r.start[G], end=r.end[G], kind=r.kind[G], device=r.device[G],
                  stream=r.stream[G], corr=G_corr, launch=g_launch)


def _launched_before_trace(g: GpuOps, x: HostOps) -> np.ndarray:
    """GPU ops whose correlation id is below that of every call recorded on their rank: CUDA
    correlation ids grow with every API call, so their launch happened before the profiler started
    (a host running ahead of the GPU leaves a queue of them). They get no inferred launch."""
    has = x.corr >= 0
    if not has.any() or not g.n:
        return np.zeros(g.n, bool)
    bound = _rank_min(x.rank[has], x.corr[has], g.rank)
    return (g.corr >= 0) & ~np.isnan(bound) & (g.corr < np.nan_to_num(bound, nan=0.0))


def _rank_min(rank: np.ndarray, v: np.ndarray, q_rank: np.ndarray) -> np.ndarray:
    """Per query rank, the smallest ``v`` of that rank as float64 (NaN: the rank has none)."""
    ranks, inv = np.unique(rank, return_inverse=True)
    low = np.full(len(ranks), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(low, inv, v)
    at = np.minimum(np.searchsorted(ranks, q_rank), max(len(ranks) - 1, 0))
    out = np.full(len(q_rank), np.nan)
    if len(ranks):
        hit = ranks[at] == q_rank
        out[hit] = low[at[hit]].astype(np.float64)
    return out


def _main_threads(ranks: np.ndarray, threads: np.ndarray) -> dict[int, int]:
    """Per rank, the thread that appears most often (ties: lowest thread id)."""
    if not len(ranks):
        return {}
    pairs, n = np.unique(np.stack([ranks, threads], axis=1), axis=0, return_counts=True)
    p = pairs[np.lexsort((pairs[:, 1], -n, pairs[:, 0]))]
    first = np.ones(len(p), bool)
    first[1:] = p[1:, 0] != p[:-1, 0]
    return dict(zip(p[first, 0].tolist(), p[first, 1].tolist()))


def _lookup(ranks: np.ndarray, table: dict[int, int]) -> np.ndarray:
    """``table[rank]`` per rank, I64_MIN where absent, as ``pd.Series(ranks).map(table)
    .fillna(I64_MIN).to_numpy(np.int64)`` (which goes through float64 when any rank is absent)."""
    keys = np.array(list(table), np.int64)
    vals = np.array(list(table.values()), np.int64)
    o = np.argsort(keys)
    keys, vals = keys[o], vals[o]
    pos = np.minimum(np.searchsorted(keys, ranks), len(keys) - 1)
    hit = keys[pos] == ranks
    if hit.all():
        return vals[pos]
    return np.where(hit, vals[pos].astype(np.float64), float(I64_MIN)).astype(np.int64)


def launch_edges(g: GpuOps, x: HostOps, gpu_base: int, edges: Edges) -> GpuOps:
    """``launch`` edges (real and inferred); returns ``g`` with its issuers, issue times and launching threads."""
    g_launch = g.launch
    edges.add(np.arange(gpu_base, gpu_base + g.n), np.where(g_launch >= 0, g_launch, -1), DepKind.LAUNCH)
    g_issuer = g_launch.copy()
    missing = (g_launch < 0) & ~_launched_before_trace(g, x)
    if missing.any():
        rt_ops = np.flatnonzero(x.kind == OpKind.RUNTIME)
        callers = g_launch[g.launched]
        main_thread = (_main_threads(x.rank[callers], x.thread[callers]) if len(callers)
                       else _main_threads(x.rank[rt_ops], x.thread[rt_ops]))
        if main_thread and len(rt_ops):
            mi = np.flatnonzero(missing)
            q_thread = np.array([main_thread.get(int(r), I64_MIN) for r in g.rank[mi]], np.int64) if len(mi) < 64 else (
                _lookup(g.rank[mi], main_thread)
            )
            ik, qk = key_ids([x.rank[rt_ops], x.thread[rt_ops]], [g.rank[mi], q_thread])
            found = Ordered(ik, x.start[rt_ops]).last_before(qk, g.start[mi], inclusive=True)
            inf = np.where(found >= 0, rt_ops[np.maximum(found, 0)], -1)
            g_issuer[mi] = inf
            edges.add(gpu_base + mi, inf, DepKind.LAUNCH)
    if not x.n:  # no host op at all (e.g. an Nsight export without a runtime table): nothing launched them
        return dataclasses.replace(g, issuer=g_issuer, issue=g.start.copy(),
                                   launch_thread=np.full(g.n, I64_MIN, np.int64))
    return dataclasses.replace(
        g, issuer=g_issuer, issue=_issue_times(g, x, g_issuer),
        launch_thread=np.where(g_issuer >= 0, x.thread[np.maximum(g_issuer, 0)], I64_MIN),
    )


def _issue_times(g: GpuOps, x: HostOps, issuer: np.ndarray) -> np.ndarray:
    issue = np.where(issuer >= 0, x.start[np.maximum(issuer, 0)], g.start)
    none = np.flatnonzero(issuer < 0)
    if none.size and x.n:
        bound = _rank_min(x.rank, x.start, g.rank[none])  # (as float64, as it always was)
        known = ~np.isnan(bound)
        issue[none[known]] = np.minimum(issue[none[known]], bound[known].astype(np.int64) - 1)
    return issue
