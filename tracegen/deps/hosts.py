"""Host ops: flattening the calls of each thread, splitting blocking calls, CPU gap ops, program order.

* Flattening per (rank, thread): calls sorted by start; a call contained in an earlier one is
  absorbed by the outermost call (its correlation, blocking flag and sync hints move to the outer
  call); a call that only partly overlaps the previous one is clipped to start where it ends.
* Blocking calls with a GPU op become a ``runtime`` op ``[start, s)`` and a ``sync`` half
  ``[s, end]`` (``s`` = first GPU op start clamped to ``[start + 1, end]``); launches blocked on a
  full queue (:mod:`tracegen.deps.queue`) likewise, split after their typical duration.
* CPU gap ops fill every positive gap between consecutive host ops of a thread, named after the
  innermost operator annotation enclosing the whole gap (else ``cpu``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fastrack_core.schema import DepKind, OpKind
from tracegen.deps.edges import Edges
from tracegen.deps.raw import Annotations, RawOps
from tracegen.deps.search import EMPTY, I64_MIN, distinct, enclosing, key_ids

_I64_MAX = np.iinfo(np.int64).max


@dataclasses.dataclass
class CorrMap:
    """(rank, correlation id) -> the host op of the first call (in flattening order) with that id."""

    rank: np.ndarray  # distinct (rank, corr) pairs, sorted
    corr: np.ndarray
    hop: np.ndarray

    @classmethod
    def of(cls, rank: np.ndarray, corr: np.ndarray, hop: np.ndarray) -> CorrMap:
        """From the calls in flattening order (entries with a negative correlation are left out)."""
        has = corr >= 0
        rank, corr, hop = rank[has], corr[has], hop[has]
        o = np.lexsort((np.arange(len(rank)), corr, rank))
        rank, corr, hop = rank[o], corr[o], hop[o]
        first = np.ones(len(rank), bool)
        first[1:] = (rank[1:] != rank[:-1]) | (corr[1:] != corr[:-1])
        return cls(rank[first], corr[first], hop[first])

    def __len__(self) -> int:
        return len(self.rank)

    def find(self, rank: np.ndarray, corr: np.ndarray) -> np.ndarray:
        """Host op of each (rank, corr) query, -1 where none."""
        out = np.full(len(rank), -1, np.int64)
        if not len(self.rank) or not len(rank):
            return out
        ranks = distinct(self.rank)
        ri = np.minimum(np.searchsorted(ranks, rank), len(ranks) - 1)
        ok = (ranks[ri] == rank) & (corr >= 0)
        span = max(int(self.corr.max()), int(corr.max())) + 1
        if len(ranks) * span < 2**62:  # one sorted int64 key: rank index, then corr
            keys = np.searchsorted(ranks, self.rank) * span + self.corr
            q = ri * span + np.where(ok, corr, 0)
            p = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
            hit = ok & (keys[p] == q)
            out[hit] = self.hop[p[hit]]
            return out
        for k, rv in enumerate(ranks.tolist()):
            lo, hi = np.searchsorted(self.rank, rv, "left"), np.searchsorted(self.rank, rv, "right")
            sel = np.flatnonzero(ok & (ri == k))
            p = lo + np.searchsorted(self.corr[lo:hi], corr[sel])
            pc = np.minimum(p, hi - 1)
            hit = (p < hi) & (self.corr[pc] == corr[sel])
            out[sel[hit]] = self.hop[pc[hit]]
        return out


@dataclasses.dataclass
class HostCalls:
    """Top-level host calls after flattening (one entry per call kept)."""

    raw: np.ndarray  # raw row
    rank: np.ndarray
    thread: np.ndarray
    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    scope: np.ndarray
    sync_stream: np.ndarray
    event_corr: np.ndarray
    record_stream: np.ndarray
    wait_stream: np.ndarray
    blocking: np.ndarray
    device: np.ndarray
    corr: np.ndarray
    corr_map: CorrMap  # (rank, corr) -> hop: the call a correlation id belongs to


def _group_cummax(v: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Running maximum of ``v`` restarted at every ``first`` row (groups are contiguous runs),
    as ``pd.Series(v).groupby(group id).cummax()``."""
    out = np.empty_like(v)
    bounds = np.append(np.flatnonzero(first), len(v))
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        np.maximum.accumulate(v[a:b], out=out[a:b])
    return out


def flatten_host_calls(r: RawOps) -> HostCalls:
    rank, thread, start, end, dur = r.rank, r.thread, r.start, r.end, r.dur
    h = np.flatnonzero(r.is_host)
    h = h[np.lexsort((h, -dur[h], start[h], thread[h], rank[h]))]
    nh = len(h)
    hs, he = start[h].copy(), end[h]
    newg = np.ones(nh, bool)
    if nh:
        newg[1:] = (rank[h][1:] != rank[h][:-1]) | (thread[h][1:] != thread[h][:-1])
    cm = _group_cummax(he, newg) if nh else EMPTY
    prev = np.full(nh, I64_MIN, np.int64)
    if nh:
        prev[1:] = cm[:-1]
    prev[newg] = I64_MIN
    nested = (hs < prev) & (he <= prev)
    top = ~nested
    cont = np.maximum.accumulate(np.where(top, np.arange(nh), -1)) if nh else EMPTY
    clip = top & (hs < prev)
    hs = np.where(clip, prev, hs)
    hkind = r.kind[h].copy()
    hblock = r.blocking[h].copy()
    hints = (r.scope[h].copy(), r.sync_stream[h].copy(), r.event_corr[h].copy(), r.record_stream[h].copy(),
             r.wait_stream[h].copy(), r.device[h].copy())
    if nested.any():
        ni = np.flatnonzero(nested)
        ci = cont[ni]
        np.maximum.at(hkind, ci, hkind[ni])
        np.logical_or.at(hblock, ci, hblock[ni])
        for arr, default in zip(hints, (0, -1, -1, -1, -1, -1)):
            has = arr[ni] != default
            if has.any():
                src, dst = ni[has], ci[has]
                dst_u, first = np.unique(dst, return_index=True)
                take = arr[dst_u] == default
                arr[dst_u[take]] = arr[src[first[take]]]
    # host ops from top-level calls; h-position -> host op index (nested calls map to their container)
    tpos = np.flatnonzero(top)
    hop_of_pos = np.cumsum(top) - 1
    hop_of_pos = hop_of_pos[cont] if nh else EMPTY
    cmap = CorrMap.of(rank[h], r.corr[h], hop_of_pos)
    raw_rows = h[tpos]
    scope, ss, ec, rs, ws, dev = (a[tpos] for a in hints)
    return HostCalls(raw=raw_rows, rank=rank[raw_rows], thread=thread[raw_rows], start=hs[tpos], end=he[tpos],
                     kind=hkind[tpos], scope=scope, sync_stream=ss, event_corr=ec, record_stream=rs, wait_stream=ws,
                     blocking=hblock[tpos], device=dev, corr=r.corr[raw_rows], corr_map=cmap)


@dataclasses.dataclass
class HostOps:
    """Host ops written out: calls at ``[0, n_calls)``, then the sync halves of split calls."""

    n_calls: int
    split_calls: np.ndarray  # call index of each sync half
    rank: np.ndarray
    thread: np.ndarray
    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    raw: np.ndarray
    corr: np.ndarray
    device: np.ndarray
    scope: np.ndarray  # sync hints stay with the sync half
    sync_stream: np.ndarray
    event_corr: np.ndarray
    record_stream: np.ndarray
    wait_stream: np.ndarray
    half: np.ndarray  # a sync half
    awaits: np.ndarray = dataclasses.field(default_factory=lambda: EMPTY)  # per half: GPU op a blocked launch waited for, or -1

    @property
    def n(self) -> int:
        return len(self.rank)

    @property
    def n_halves(self) -> int:
        return len(self.split_calls)


def split_blocking_calls(c: HostCalls, launch: np.ndarray, gpu_start: np.ndarray,
                         blocked: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> HostOps:
    """Split the blocking calls that launched GPU ops (``launch``: call of each GPU op or -1), and
    the launches ``blocked`` on a full queue ((calls, split points, GPU op awaited), see
    :mod:`tracegen.deps.queue`)."""
    nH = len(c.raw)
    first_gpu = np.full(nH, _I64_MAX, np.int64)
    launched = launch >= 0
    if launched.any():
        np.minimum.at(first_gpu, launch[launched], gpu_start[launched])
    has_gpu = first_gpu != _I64_MAX
    spl = c.blocking & has_gpu & ((c.end - c.start) >= 1)
    at_all = np.where(spl, np.clip(first_gpu, c.start + 1, np.maximum(c.end, c.start + 1)), 0)
    awaits_all = np.full(nH, -1, np.int64)
    if blocked is not None and len(blocked[0]):
        bi, bat, bj = blocked
        keep = ~spl[bi]
        spl[bi[keep]] = True
        at_all[bi[keep]] = bat[keep]
        awaits_all[bi[keep]] = bj[keep]
    S_of = np.flatnonzero(spl)
    nS = len(S_of)
    split_at = np.minimum(at_all[S_of], c.end[S_of]) if nS else EMPTY
    call_end = c.end.copy()
    call_kind = c.kind.copy()
    call_end[S_of] = split_at
    call_kind[S_of] = int(OpKind.RUNTIME)

    def with_halves(a: np.ndarray, halves: np.ndarray | None = None) -> np.ndarray:
        return np.concatenate([a, a[S_of] if halves is None else halves])

    return HostOps(
        n_calls=nH, split_calls=S_of,
        rank=with_halves(c.rank), thread=with_halves(c.thread),
        start=with_halves(c.start, split_at), end=with_halves(call_end, c.end[S_of]),
        kind=with_halves(call_kind, np.full(nS, int(OpKind.SYNC), np.int64)),
        raw=with_halves(c.raw), corr=with_halves(c.corr, np.full(nS, -1, np.int64)), device=with_halves(c.device),
        scope=np.concatenate([np.where(spl, 0, c.scope), c.scope[S_of]]),
        sync_stream=with_halves(c.sync_stream),
        event_corr=np.concatenate([np.where(spl, -1, c.event_corr), c.event_corr[S_of]]),
        record_stream=np.concatenate([np.where(spl, -1, c.record_stream), c.record_stream[S_of]]),
        wait_stream=with_halves(c.wait_stream, np.full(nS, -1, np.int64)),
        half=np.concatenate([np.zeros(nH, bool), np.ones(nS, bool)]),
        awaits=awaits_all[S_of],
    )


@dataclasses.dataclass
class GapOps:
    """CPU ops filling the gaps between consecutive host ops of a thread."""

    rank: np.ndarray
    thread: np.ndarray
    start: np.ndarray
    end: np.ndarray
    name_row: np.ndarray  # raw row of the annotation that names it, or -1: named "cpu"

    @property
    def n(self) -> int:
        return len(self.rank)


def gap_ops(x: HostOps, r: RawOps, ann: Annotations) -> GapOps:
    nX = x.n
    xo = np.lexsort((x.half, x.start, x.thread, x.rank))
    same = np.zeros(max(nX - 1, 0), bool)
    if nX > 1:
        same = (x.rank[xo][1:] == x.rank[xo][:-1]) & (x.thread[xo][1:] == x.thread[xo][:-1])
    gap_lo = x.end[xo][:-1] if nX > 1 else EMPTY
    gap_hi = x.start[xo][1:] if nX > 1 else EMPTY
    gsel = np.flatnonzero(same & (gap_hi > gap_lo)) if nX > 1 else EMPTY
    some = len(gsel) > 0
    P_rank = x.rank[xo][gsel] if some else EMPTY
    P_thread = x.thread[xo][gsel] if some else EMPTY
    P_start, P_end = (gap_lo[gsel], gap_hi[gsel]) if some else (EMPTY, EMPTY)
    nP = len(gsel)
    P_name_row = np.full(nP, -1, np.int64)
    op_idx = ann.operator_rows
    if nP and len(op_idx):
        ak, qk = key_ids([r.rank[op_idx], r.thread[op_idx]], [P_rank, P_thread])
        enc = enclosing(ak, r.start[op_idx], r.end[op_idx], qk, P_start, P_end)
        hit = enc >= 0
        P_name_row[hit] = op_idx[enc[hit]]
    return GapOps(rank=P_rank, thread=P_thread, start=P_start, end=P_end, name_row=P_name_row)


def program_edges(x: HostOps, gaps: GapOps, edges: Edges) -> None:
    """``program``: each host op (call, sync half, gap) depends on the previous op of its thread."""
    rank = np.concatenate([x.rank, gaps.rank]).astype(np.int64)
    thread = np.concatenate([x.thread, gaps.thread])
    start = np.concatenate([x.start, gaps.start])
    hs_ = np.lexsort((np.concatenate([x.half, np.zeros(gaps.n, bool)]), start, thread, rank))
    if len(hs_) > 1:
        same_t = (rank[hs_][1:] == rank[hs_][:-1]) & (thread[hs_][1:] == thread[hs_][:-1])
        edges.add(hs_[1:][same_t], hs_[:-1][same_t], DepKind.PROGRAM)
