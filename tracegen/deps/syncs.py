"""Synchronization: ``sync`` edges of blocking calls and ``event`` edges of stream waits.

* ``sync``: the sync half of a split call depends on the GPU ops of its call (of a launch blocked
  on a full queue: on the GPU op it waited for). Stream scope: last
  op issued on that stream before the call (stream unknown: the stream of the last GPU op the
  same thread launched before the call); device scope: last op issued before the call on every
  stream of the rank (of the call's device when known); event scope: last op issued on the record
  stream before the matching cudaEventRecord (record call found by ``event_corr``; record stream
  from the hints, else the stream of the last GPU op the recording thread launched before the
  record, as HTA does; without a record call the sync call's start bounds the record).
* ``event``: stream waits: the op the event captured (as for event syncs) -> the first op issued
  on the waiting stream after the wait call (waiting stream unknown: the stream of the first GPU
  op the same thread launches after the wait). No edge when both streams are the same.
"""

from __future__ import annotations

import numpy as np

from fastrack_core.schema import DepKind, OpKind
from tracegen.deps.edges import Edges
from tracegen.deps.hosts import CorrMap, HostOps
from tracegen.deps.launches import GpuOps
from tracegen.deps.raw import SCOPE_CODES
from tracegen.deps.search import group_ids, join
from tracegen.deps.streams import GpuLookup


def sync_half_edges(x: HostOps, g: GpuOps, gpu_base: int, edges: Edges) -> None:
    """The sync half of each split call depends on the GPU ops its call launched; the half of a
    launch blocked on a full queue on the GPU op that freed the slot."""
    launched = g.launched
    if not x.n_halves:
        return
    queued = x.awaits >= 0
    if launched.any():
        half_of_call = np.full(x.n_calls, -1, np.int64)
        own = ~queued
        half_of_call[x.split_calls[own]] = x.n_calls + np.flatnonzero(own)
        gl = np.flatnonzero(launched)
        edges.add(half_of_call[g.launch[gl]], gpu_base + gl, DepKind.SYNC)
    if queued.any():
        qi = np.flatnonzero(queued)
        edges.add(x.n_calls + qi, gpu_base + x.awaits[qi], DepKind.SYNC)


def _record_info(rows: np.ndarray, x: HostOps, corr_map: CorrMap, find: GpuLookup):
    """(time bound, record stream, event known) of the event each host op of ``rows`` waits on."""
    ec = x.event_corr[rows]
    t = x.start[rows].copy()
    rs = x.record_stream[rows].copy()
    rec = np.full(len(rows), -1, np.int64)
    if (ec >= 0).any() and len(corr_map):
        rec = corr_map.find(x.rank[rows], ec)
    has = rec >= 0
    t[has] = x.start[rec[has]]
    take = has & (rs < 0)
    rs[take] = x.record_stream[rec[take]]
    inf = has & (rs < 0)
    if inf.any():
        ii = np.flatnonzero(inf)
        gi = find.by_thread(x.rank[rows][ii], x.thread[rec[ii]], x.start[rec[ii]])
        rs[ii] = find.stream_of(gi)
    return t, rs, (ec >= 0) | (x.record_stream[rows] >= 0)


def sync_edges(x: HostOps, g: GpuOps, corr_map: CorrMap, find: GpuLookup, gpu_base: int,
               edges: Edges) -> None:
    """``sync`` edges of the blocking calls, by scope (stream, event, device)."""
    syn = np.flatnonzero((x.kind == OpKind.SYNC) & (x.scope > 0))
    if not len(syn):
        return
    sc = x.scope[syn]
    r = syn[sc == SCOPE_CODES["stream"]]
    if len(r):
        ss = x.sync_stream[r].copy()
        unk = ss < 0
        if unk.any():
            gi = find.by_thread(x.rank[r][unk], x.thread[r][unk], x.start[r][unk])
            ss[unk] = find.stream_of(gi)
        tgt = find.last_on_stream(x.rank[r], ss, x.start[r])
        edges.add(r, np.where((ss >= 0) & (tgt >= 0), gpu_base + tgt, -1), DepKind.SYNC)
    r = syn[sc == SCOPE_CODES["event"]]
    if len(r):
        t, rs, known = _record_info(r, x, corr_map, find)
        tgt = find.last_on_stream(x.rank[r], rs, t)
        edges.add(r, np.where(known & (rs >= 0) & (tgt >= 0), gpu_base + tgt, -1), DepKind.SYNC)
    # device scope: last op on every stream of the rank (device filtered when known)
    r = syn[sc == SCOPE_CODES["device"]]
    if len(r):
        _, one = np.unique(group_ids(g.rank, g.device, g.stream), return_index=True)  # (rank, device, stream)s
        qi, si = join(g.rank[one], x.rank[r])
        keep = (x.device[r][qi] < 0) | (x.device[r][qi] == g.device[one][si])
        qi, si = qi[keep], one[si[keep]]
        if len(qi):
            qr = r[qi]
            tgt = find.last_on_device_stream(g.rank[si], g.device[si], g.stream[si], x.start[qr])
            edges.add(qr, np.where(tgt >= 0, gpu_base + tgt, -1), DepKind.SYNC)


def event_edges(x: HostOps, corr_map: CorrMap, find: GpuLookup, gpu_base: int, edges: Edges) -> None:
    """``event`` edges of the stream waits (cudaStreamWaitEvent)."""
    waits = np.flatnonzero((x.kind != OpKind.SYNC) & ~x.half & ((x.wait_stream >= 0) | (x.event_corr >= 0)))
    if not len(waits):
        return
    t, rs, known = _record_info(waits, x, corr_map, find)
    src = find.last_on_stream(x.rank[waits], rs, t)
    ws = x.wait_stream[waits].copy()
    unk = ws < 0
    if unk.any():
        gi = find.by_thread(x.rank[waits][unk], x.thread[waits][unk], x.start[waits][unk], after=True)
        ws[unk] = find.stream_of(gi)
    dst = find.first_on_stream(x.rank[waits], ws, x.start[waits])
    ok = known & (rs >= 0) & (ws >= 0) & (ws != rs) & (src >= 0) & (dst >= 0)
    edges.add(np.where(ok, gpu_base + dst, -1), np.where(ok, gpu_base + src, -1), DepKind.EVENT)
