"""The confidential-computing data path as a graph transform, with Fastrack's three fixes as switches.

Every H2D/D2H copy ``M`` (launched by host call ``R`` on thread lane ``T``, on stream ``S``) is
cut into bounce-slot-sized chunks ``0..k-1`` and becomes (lanes in brackets)::

  H2D  R -> submit[T] -> encrypt_0..k-1[T] -> ... -> sync_wait[T] -> R's program successors
                          |  (slot)           PCIe_0..k-1[pcie_h2d] -> CE decrypt_j[copy engines]
                          '--------------->   -> authenticate_j[gpu_auth] -> M (0 ns, on S) --SYNC--> sync_wait
  D2H  CE encrypt_j[copy engines] -> authenticate_j[gpu_auth] -> PCIe_j[pcie_d2h] (slot) -> M
       R -> submit[T] -> CPU decrypt_0..k-1[T] (after PCIe) -> sync_wait[T] (after M)

``M`` stays on its stream with zero duration: it marks the copy's completion for the stream and
everything that waited on the copy. The first GPU-side stage inherits ``M``'s prerequisites
(stream order, events, the launch edge). The switches:

* ``direct`` (Fastrack fix 1): copies the model marks ``direct_eligible`` carry data already
  encrypted end to end: no CPU encryption (H2D) or decryption (D2H), no bounce slot;
* ``parallel_auth`` (fix 2): authentication at the model's parallel rate instead of serial;
* ``overlap`` (fix 3): stage ``j`` of a transfer waits only for stage ``j`` of the previous step
  (chunk pipeline). Without it (the baseline) the GPU decrypts only after the whole transfer
  arrived and authenticates only after all of it is decrypted (H2D); the GPU encrypts all, then
  tags all, then sends (D2H), and the CPU decrypts once the whole transfer landed (so such a
  transfer holds all its bounce slots at once: the pool grows to fit it, as the driver's pool
  doubles on demand).

CPU crypto runs in the calling thread (on its host lane) when the model has one crypto thread,
or on the rank's CPU_CRYPTO lane (a pool of workers, the caller waiting) otherwise. H2D/D2H copies
are host-synchronous in every CC protocol: the caller blocks until the copy and all earlier work
on its stream finish. Every launched GPU op pays the model's encrypted-submission cost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastrack.errors import GraphError
from fastrack.schema import CopyDir, DepKind
from replay.engine import topological_order
from replay.graph import LaneType, OpGraph, edges_by_dependent

from .base import Protocol
from .bounce import add_pool_holds
from .collectives import price_plain
from .copies import Copies, chunk, host_copies, launch_edges, launchers
from .editor import GraphEditor, lanes_required
from .kinds import DerivedKind
from .submit import add_submission, redirect_program


def copy_in_edges(ed: GraphEditor, node: np.ndarray, head: np.ndarray) -> None:
    """Give each ``head[i]`` a copy of every prerequisite edge of ``node[i]`` (current lags)."""
    g = ed.g
    lo, hi = g.dep_ptr[node], g.dep_ptr[node + 1]
    cnt = hi - lo
    if cnt.sum() == 0:
        return
    rep_head = np.repeat(head, cnt)
    offs = np.arange(int(cnt.sum()), dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    e = np.repeat(lo, cnt) + offs
    kinds = g.dep_kind[e]
    src = ed.edge_src[e]
    lag = ed.edge_lag[e]
    for k in np.unique(kinds):
        sel = kinds == k
        ed.add_edges(src[sel], rep_head[sel], int(k), lag[sel])


@dataclass(frozen=True)
class CCOptions:
    direct: bool = False
    parallel_auth: bool = False
    overlap: bool = False


def transform_cc(graph: OpGraph, model, opts: CCOptions) -> OpGraph:
    g = model.add_lanes(price_plain(graph, model))  # collectives: plaintext on the topology (multi-GPU: .p2p)
    ed = GraphEditor(g)
    le = launch_edges(g, ed.edge_dst)
    tail = add_submission(ed, model, le)
    cp = host_copies(g, launchers(g, ed.edge_dst, le))
    if len(cp):
        check_host_sync(ed, cp)
        _copies(ed, model, cp, tail, opts)
    redirect_program(ed, tail)
    return ed.build()


def check_host_sync(ed: GraphEditor, cp: Copies) -> None:
    """Raise GraphError if making the copies host-synchronous creates a cycle: the trace graph
    plus an edge from each copy to the program successors of its launching call must be acyclic
    (the transformed graph's only new cycles would come from those waits)."""
    g = ed.g
    dst = ed.edge_dst
    prog = np.flatnonzero(g.dep_kind == DepKind.PROGRAM)
    has_l = cp.launcher >= 0
    if not (prog.size and has_l.any()):
        return
    p_src = g.dep_src[prog]
    o = np.argsort(p_src, kind="stable")
    p_src, p_dst = p_src[o], dst[prog][o]
    L, M = cp.launcher[has_l], cp.node[has_l]
    lo = np.searchsorted(p_src, L, "left")
    cnt = np.searchsorted(p_src, L, "right") - lo
    if not cnt.sum():
        return
    offs = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    all_dst = np.concatenate([dst, p_dst[np.repeat(lo, cnt) + offs]])
    all_src = np.concatenate([g.dep_src, np.repeat(M, cnt)])
    o, ptr = edges_by_dependent(all_dst, g.n)
    aug = g.replace(dep_ptr=ptr, dep_src=all_src[o],
                    dep_kind=np.concatenate([g.dep_kind, np.full(all_src.size - g.dep_src.size, DepKind.SYNC,
                                                                 np.uint8)])[o],
                    dep_lag=np.zeros(all_src.size, np.int64))
    try:
        topological_order(aug)
    except GraphError as exc:
        raise GraphError(f"under CC, host<->GPU copies are host-synchronous, and that creates a cycle: {exc}") from None


def _copies(ed: GraphEditor, model, cp: Copies, tail: np.ndarray, opts: CCOptions) -> None:
    g = ed.g
    threads = int(model.cpu_crypto_threads)
    ch = chunk(cp.nbytes, model.bounce_slot_bytes)
    C = len(cp)
    c = ch.copy
    M = cp.node
    Mc = M[c]
    L = cp.launcher
    h2d_copy = cp.direction == CopyDir.H2D
    direct = (np.asarray(model.direct_eligible(cp.direction, g.host_mem[M], cp.nbytes), bool)
              if opts.direct else np.zeros(C, bool))
    h2d = h2d_copy[c]
    d2h = ~h2d
    staged = ~direct[c]  # chunk goes through the CPU and a bounce slot

    # lanes per copy
    pcie_lane = np.where(h2d_copy, model.lane_index(g, cp.rank, LaneType.PCIE_H2D),
                         model.lane_index(g, cp.rank, LaneType.PCIE_D2H))
    ce_lane = model.lane_index(g, cp.rank, LaneType.COPY_ENGINE)
    auth_lane = model.lane_index(g, cp.rank, LaneType.GPU_AUTH)
    crypto_lane = model.lane_index(g, cp.rank, LaneType.CPU_CRYPTO)
    for lane, what in ((pcie_lane, "PCIe"), (ce_lane, "copy-engine"), (auth_lane, "GPU authentication"),
                       (crypto_lane, "CPU crypto")):
        lanes_required(lane, what)
    host_lane = np.where(L >= 0, g.lane[np.maximum(L, 0)], crypto_lane)
    inline = (threads == 1) & (L >= 0)  # crypto in the calling thread
    cpu_lane = np.where(inline, host_lane, crypto_lane)
    host_order = np.where(L >= 0, g.order[np.maximum(L, 0)], g.order[M])

    lat = np.where(h2d_copy, model.pcie_latency_ns(CopyDir.H2D), model.pcie_latency_ns(CopyDir.D2H)).astype(np.int64)
    nb = ch.nbytes
    pcie_dur = np.where(h2d, model.pcie_ns(nb, CopyDir.H2D), model.pcie_ns(nb, CopyDir.D2H))

    # ---------------------------------------------------------------- nodes (stage-major)
    def stage(kind, mask, lane, dur, order=None):
        idx = np.full(len(ch), -1, np.int64)
        sel = np.flatnonzero(mask)
        idx[sel] = ed.add_nodes(kind, Mc[sel], lane[c[sel]], dur[sel], nb[sel],
                                None if order is None else order[c[sel]])
        return idx

    enc = stage(DerivedKind.CPU_ENCRYPT, h2d & staged, cpu_lane, model.cpu_encrypt_ns(nb), host_order)
    genc = stage(DerivedKind.CE_ENCRYPT, d2h, ce_lane, model.ce_crypto_ns(nb))
    pcie = stage(DerivedKind.PCIE, np.ones(len(ch), bool), pcie_lane, pcie_dur)
    dec = stage(DerivedKind.CE_DECRYPT, h2d, ce_lane, model.ce_crypto_ns(nb))
    auth = stage(DerivedKind.GPU_AUTH, np.ones(len(ch), bool), auth_lane, model.auth_ns(nb, opts.parallel_auth))
    cdec = stage(DerivedKind.CPU_DECRYPT, d2h & staged, cpu_lane, model.cpu_decrypt_ns(nb))
    has_l = np.flatnonzero(L >= 0)
    wait = np.full(C, -1, np.int64)
    wait[has_l] = ed.add_nodes(DerivedKind.SYNC_WAIT, M[has_l], host_lane[has_l], 0)
    ed.dur[M] = 0  # the copy node now only marks completion on its stream

    # ---------------------------------------------------------------- host chain per launcher
    host_prev = np.full(C, -1, np.int64)
    if has_l.size:
        o = has_l[np.lexsort((M[has_l], L[has_l]))]
        first = np.r_[True, L[o][1:] != L[o][:-1]]
        host_prev[o] = np.where(first, tail[L[o]], np.r_[-1, wait[o][:-1]])
        last = np.r_[first[1:], True]
        tail[L[o][last]] = wait[o][last]

    j, k = ch.j, ch.k
    prev = np.where(j > 0, np.arange(len(ch)) - 1, -1)  # previous chunk of the same copy
    last_chunk = ch.last_of_copy()[c]
    ov = opts.overlap
    D, P = DepKind.DATA, DepKind.PROGRAM
    cl = lat[c]

    def chain(stage_idx, mask):  # stage_j after stage_{j-1} (same copy)
        s = np.flatnonzero(mask & (j > 0))
        ed.add_edges(stage_idx[prev[s]], stage_idx[s], D, 0)

    def after(dst_idx, src_idx, mask, lag=0, whole=None):  # dst_j after src_j (overlap) or src_whole
        s = np.flatnonzero(mask)
        src_j = s if ov else (last_chunk[s] if whole is None else whole[s])
        ed.add_edges(src_idx[src_j], dst_idx[s], D, lag if np.isscalar(lag) else lag[s])

    first_chunk = j == 0
    # --- CPU crypto (host side): in the calling thread in sequence, or on workers in parallel
    cpu = np.where(h2d, enc, cdec)
    s = np.flatnonzero(staged)
    if threads == 1:
        seq = s[j[s] > 0]
        ed.add_edges(cpu[prev[seq]], cpu[seq], P, 0)
        s0 = s[j[s] == 0]
        ed.add_edges(host_prev[c[s0]], cpu[s0], P, 0)
    else:
        ed.add_edges(host_prev[c[s]], cpu[s], P, 0)
    # an H2D copy without a launching call encrypts once its own prerequisites are met
    nol = np.flatnonzero(h2d & staged & first_chunk & (L[c] < 0))
    copy_in_edges(ed, Mc[nol], enc[nol])

    # --- H2D: encrypt_j -> PCIe_j -> decrypt -> authenticate -> M
    hm = h2d
    hs = np.flatnonzero(hm & staged)
    ed.add_edges(enc[hs], pcie[hs], D, 0)
    chain(pcie, hm)
    head = np.flatnonzero(hm & first_chunk)
    copy_in_edges(ed, Mc[head], pcie[head])
    after(dec, pcie, hm, cl)
    chain(dec, hm)
    after(auth, dec, hm)
    chain(auth, hm)
    h_last = np.flatnonzero(hm & (j == k - 1))
    ed.add_edges(auth[h_last], Mc[h_last], D, 0)

    # --- D2H: CE encrypt_j -> authenticate -> PCIe_j -> M ; PCIe -> CPU decrypt
    dm = d2h
    head = np.flatnonzero(dm & first_chunk)
    copy_in_edges(ed, Mc[head], genc[head])
    chain(genc, dm)
    after(auth, genc, dm)
    chain(auth, dm)
    after(pcie, auth, dm)
    chain(pcie, dm)
    d_last = np.flatnonzero(dm & (j == k - 1))
    ed.add_edges(pcie[d_last], Mc[d_last], D, cl[d_last])
    after(cdec, pcie, dm & staged, cl)

    # --- the calling thread waits for the copy (host-synchronous) after its own crypto work
    w = np.flatnonzero(L >= 0)
    ed.add_edges(M[w], wait[w], DepKind.SYNC, 0)
    if threads == 1:
        ls = np.flatnonzero(staged & (j == k - 1) & (L[c] >= 0))
        ed.add_edges(cpu[ls], wait[c[ls]], P, 0)
    else:
        ls = np.flatnonzero(staged & (L[c] >= 0))
        ed.add_edges(cpu[ls], wait[c[ls]], P, 0)
    nd = w[direct[w]]
    ed.add_edges(host_prev[nd], wait[nd], P, 0)

    # --- bounce slots (a pool per rank): H2D slot from encrypt to PCIe; D2H from PCIe to CPU decrypt
    s = np.flatnonzero(staged)
    if s.size:
        acq = np.where(h2d[s], enc[s], pcie[s])
        fre = np.where(h2d[s], pcie[s], cdec[s])
        # without overlap, a D2H transfer is decrypted only once all of it landed: it holds all
        # its slots at once, so its rank's pool grows to hold it whatever the maximum
        need = np.where(d2h[s] & (not ov), k[s], 1)
        add_pool_holds(ed, cp.rank[c[s]], acq, fre, int(model.bounce_slots), int(model.bounce_max_slots), need)


class CCProtocol(Protocol):
    """H100 CC data path with a selection of Fastrack's fixes (see the module docstring)."""

    def __init__(self, name: str, description: str, *, direct: bool = False, parallel_auth: bool = False,
                 overlap: bool = False):
        self.name = name
        self.description = description
        self.options = CCOptions(direct=direct, parallel_auth=parallel_auth, overlap=overlap)

    def apply(self, graph: OpGraph, model) -> OpGraph:
        return transform_cc(graph, model, self.options)
