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
from .bounce import add_ring
from .collectives import price_plain
from .copies import Chunks, Copies, chunk, host_copies, launch_edges, launchers
from .editor import GraphEditor, copy_in_edges, lanes_required
from .kinds import DerivedKind
from .submit import add_submission, redirect_program


def pool_positions(ed: GraphEditor, cp: Copies) -> np.ndarray:
    """Per copy: its position in a topological order of the trace graph plus the host-synchronous
    waits (copy -> program successors of its launching call). Protocol-independent."""
    g = ed.g
    n = g.n
    dst = ed.edge_dst
    prog = np.flatnonzero(g.dep_kind == DepKind.PROGRAM)
    has_l = cp.launcher >= 0
    extra_src = np.zeros(0, np.int64)
    extra_dst = np.zeros(0, np.int64)
    if prog.size and has_l.any():
        p_src = g.dep_src[prog]
        o = np.argsort(p_src, kind="stable")
        p_src, p_dst = p_src[o], dst[prog][o]
        L = cp.launcher[has_l]
        M = cp.node[has_l]
        lo = np.searchsorted(p_src, L, "left")
        hi = np.searchsorted(p_src, L, "right")
        cnt = hi - lo
        if cnt.sum():
            offs = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
            extra_src = np.repeat(M, cnt)
            extra_dst = p_dst[np.repeat(lo, cnt) + offs]
    if extra_src.size:
        all_dst = np.concatenate([dst, extra_dst])
        all_src = np.concatenate([g.dep_src, extra_src])
        o, ptr = edges_by_dependent(all_dst, n)
        aug = g.replace(dep_ptr=ptr, dep_src=all_src[o],
                        dep_kind=np.concatenate([g.dep_kind, np.full(extra_src.size, DepKind.SYNC, np.uint8)])[o],
                        dep_lag=np.zeros(all_src.size, np.int64))
    else:
        aug = g
    try:
        order = topological_order(aug)
    except GraphError as exc:
        raise GraphError(f"under CC, host<->GPU copies are host-synchronous, and that creates a cycle: {exc}") from None
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n, dtype=np.int64)
    return pos[cp.node]


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
        _copies(ed, model, cp, tail, opts)
    redirect_program(ed, tail)
    return ed.build()


def _copies(ed: GraphEditor, model, cp: Copies, tail: np.ndarray, opts: CCOptions) -> None:
    """Replace every host<->GPU copy of ``cp`` by its CC data path (see the module docstring).
    ``tail`` (per existing node, the host node that now ends it) is advanced past the waits."""
    path = _DataPath.of(ed.g, model, cp, opts)
    stages = _add_stages(ed, model, path, opts)
    host_prev = _host_chain(path, stages.wait, tail)
    link = _Links(ed, path.ch, opts.overlap)
    _cpu_crypto_edges(ed, path, stages, host_prev, int(model.cpu_crypto_threads))
    _h2d_edges(ed, path, stages, link)
    _d2h_edges(ed, path, stages, link)
    _host_sync_edges(ed, path, stages, host_prev, int(model.cpu_crypto_threads))
    _bounce_ring(ed, path, stages, cp, int(model.bounce_slots), opts.overlap)


@dataclass(frozen=True)
class _DataPath:
    """What the data path of each copy (per copy) and each of its chunks (per chunk) needs."""

    ch: Chunks
    node: np.ndarray  # per copy: the copy's node
    launcher: np.ndarray  # per copy: the host call that issued it, or -1
    direct: np.ndarray  # per copy: carries data already encrypted end to end (no CPU crypto, no slot)
    chunk_node: np.ndarray  # per chunk: its copy's node (the anchor of its stages)
    h2d: np.ndarray  # per chunk
    staged: np.ndarray  # per chunk: goes through CPU crypto and a bounce slot
    latency: np.ndarray  # per chunk: PCIe latency of its direction, ns
    pcie_lane: np.ndarray  # per copy: PCIe lane of its direction
    ce_lane: np.ndarray  # per copy
    auth_lane: np.ndarray  # per copy
    host_lane: np.ndarray  # per copy: the launching call's thread (the crypto pool without one)
    cpu_lane: np.ndarray  # per copy: where its CPU crypto runs
    host_order: np.ndarray  # per copy: priority of its CPU crypto (the launching call's order key)

    @property
    def d2h(self) -> np.ndarray:
        return ~self.h2d

    @property
    def first_chunk(self) -> np.ndarray:
        return self.ch.j == 0

    @property
    def final_chunk(self) -> np.ndarray:
        return self.ch.j == self.ch.k - 1

    @property
    def launched(self) -> np.ndarray:
        """Per chunk: its copy has a launching call."""
        return self.launcher[self.ch.copy] >= 0

    @staticmethod
    def of(g: OpGraph, model, cp: Copies, opts: CCOptions) -> "_DataPath":
        ch = chunk(cp.nbytes, model.bounce_slot_bytes)
        h2d_copy = cp.direction == CopyDir.H2D
        direct = (np.asarray(model.direct_eligible(cp.direction, g.host_mem[cp.node], cp.nbytes), bool)
                  if opts.direct else np.zeros(len(cp), bool))
        pcie_lane = np.where(h2d_copy, model.lane_index(g, cp.rank, LaneType.PCIE_H2D),
                             model.lane_index(g, cp.rank, LaneType.PCIE_D2H))
        ce_lane = model.lane_index(g, cp.rank, LaneType.COPY_ENGINE)
        auth_lane = model.lane_index(g, cp.rank, LaneType.GPU_AUTH)
        crypto_lane = model.lane_index(g, cp.rank, LaneType.CPU_CRYPTO)
        for lane, what in ((pcie_lane, "PCIe"), (ce_lane, "copy-engine"), (auth_lane, "GPU authentication"),
                           (crypto_lane, "CPU crypto")):
            lanes_required(lane, what)
        has_launcher = cp.launcher >= 0
        call = np.maximum(cp.launcher, 0)
        host_lane = np.where(has_launcher, g.lane[call], crypto_lane)
        inline = (int(model.cpu_crypto_threads) == 1) & has_launcher  # crypto in the calling thread
        latency = np.where(h2d_copy, model.pcie_latency_ns(CopyDir.H2D),
                           model.pcie_latency_ns(CopyDir.D2H)).astype(np.int64)
        return _DataPath(
            ch=ch, node=cp.node, launcher=cp.launcher, direct=direct, chunk_node=cp.node[ch.copy],
            h2d=h2d_copy[ch.copy], staged=~direct[ch.copy], latency=latency[ch.copy], pcie_lane=pcie_lane,
            ce_lane=ce_lane, auth_lane=auth_lane, host_lane=host_lane,
            cpu_lane=np.where(inline, host_lane, crypto_lane),
            host_order=np.where(has_launcher, g.order[call], g.order[cp.node]))


@dataclass(frozen=True)
class _Stages:
    """Node index of every stage of every chunk (-1 where a chunk has no such stage), and the
    calling thread's wait per copy (-1 for copies without a launching call)."""

    cpu_encrypt: np.ndarray
    ce_encrypt: np.ndarray
    pcie: np.ndarray
    ce_decrypt: np.ndarray
    auth: np.ndarray
    cpu_decrypt: np.ndarray
    wait: np.ndarray  # per copy

    def cpu(self, h2d: np.ndarray) -> np.ndarray:
        """Per chunk: its CPU crypto node (encrypt for H2D, decrypt for D2H)."""
        return np.where(h2d, self.cpu_encrypt, self.cpu_decrypt)


def _add_stages(ed: GraphEditor, model, path: _DataPath, opts: CCOptions) -> _Stages:
    """Create the stage nodes (stage-major) and the waits; the copy node keeps 0 ns on its stream."""
    ch, nb, h2d, d2h = path.ch, path.ch.nbytes, path.h2d, path.d2h
    every = np.ones(len(ch), bool)
    pcie_ns = np.where(h2d, model.pcie_ns(nb, CopyDir.H2D), model.pcie_ns(nb, CopyDir.D2H))

    def stage(kind, mask, lane, dur, order=None):
        idx = np.full(len(ch), -1, np.int64)
        sel = np.flatnonzero(mask)
        copy = ch.copy[sel]
        idx[sel] = ed.add_nodes(kind, path.chunk_node[sel], lane[copy], dur[sel], nb[sel],
                                None if order is None else order[copy])
        return idx

    cpu_encrypt = stage(DerivedKind.CPU_ENCRYPT, h2d & path.staged, path.cpu_lane, model.cpu_encrypt_ns(nb),
                        path.host_order)
    ce_encrypt = stage(DerivedKind.CE_ENCRYPT, d2h, path.ce_lane, model.ce_crypto_ns(nb))
    pcie = stage(DerivedKind.PCIE, every, path.pcie_lane, pcie_ns)
    ce_decrypt = stage(DerivedKind.CE_DECRYPT, h2d, path.ce_lane, model.ce_crypto_ns(nb))
    auth = stage(DerivedKind.GPU_AUTH, every, path.auth_lane, model.auth_ns(nb, opts.parallel_auth))
    cpu_decrypt = stage(DerivedKind.CPU_DECRYPT, d2h & path.staged, path.cpu_lane, model.cpu_decrypt_ns(nb))
    launched = np.flatnonzero(path.launcher >= 0)
    wait = np.full(len(path.node), -1, np.int64)
    wait[launched] = ed.add_nodes(DerivedKind.SYNC_WAIT, path.node[launched], path.host_lane[launched], 0)
    ed.dur[path.node] = 0  # the copy node now only marks completion on its stream
    return _Stages(cpu_encrypt=cpu_encrypt, ce_encrypt=ce_encrypt, pcie=pcie, ce_decrypt=ce_decrypt, auth=auth,
                   cpu_decrypt=cpu_decrypt, wait=wait)


def _host_chain(path: _DataPath, wait: np.ndarray, tail: np.ndarray) -> np.ndarray:
    """Per copy: the host node its CPU work follows on the calling thread (the call's tail for its
    first copy, the previous copy's wait for the others; -1 without a call). Advances ``tail``."""
    host_prev = np.full(len(path.node), -1, np.int64)
    launched = np.flatnonzero(path.launcher >= 0)
    if launched.size:
        call = path.launcher
        o = launched[np.lexsort((path.node[launched], call[launched]))]
        first = np.r_[True, call[o][1:] != call[o][:-1]]
        host_prev[o] = np.where(first, tail[call[o]], np.r_[-1, wait[o][:-1]])
        last = np.r_[first[1:], True]
        tail[call[o][last]] = wait[o][last]
    return host_prev


class _Links:
    """DATA edges between the stages of the chunks of each copy."""

    def __init__(self, ed: GraphEditor, ch: Chunks, overlap: bool):
        self.ed, self.ch, self.overlap = ed, ch, overlap
        self.prev = np.where(ch.j > 0, np.arange(len(ch)) - 1, -1)  # previous chunk of the same copy
        self.last = ch.last_of_copy()[ch.copy]  # last chunk of the same copy

    def chain(self, stage: np.ndarray, mask: np.ndarray) -> None:
        """Chunk j of ``stage`` after chunk j-1 of the same stage (same copy)."""
        sel = np.flatnonzero(mask & (self.ch.j > 0))
        self.ed.add_edges(stage[self.prev[sel]], stage[sel], DepKind.DATA, 0)

    def after(self, dst: np.ndarray, src: np.ndarray, mask: np.ndarray, lag: np.ndarray | int = 0) -> None:
        """Chunk j of ``dst`` after chunk j of ``src`` (overlap) or after the copy's last ``src`` chunk."""
        sel = np.flatnonzero(mask)
        src_chunk = sel if self.overlap else self.last[sel]
        self.ed.add_edges(src[src_chunk], dst[sel], DepKind.DATA, lag if np.isscalar(lag) else lag[sel])


def _cpu_crypto_edges(ed: GraphEditor, path: _DataPath, stages: _Stages, host_prev: np.ndarray, threads: int) -> None:
    """CPU crypto follows the calling thread: in sequence in the thread itself, or all chunks at
    once on the crypto workers. An H2D copy without a call encrypts once its prerequisites are met."""
    ch, cpu = path.ch, stages.cpu(path.h2d)
    staged = np.flatnonzero(path.staged)
    if threads == 1:
        later = staged[ch.j[staged] > 0]
        ed.add_edges(cpu[later - 1], cpu[later], DepKind.PROGRAM, 0)
        first = staged[ch.j[staged] == 0]
        ed.add_edges(host_prev[ch.copy[first]], cpu[first], DepKind.PROGRAM, 0)
    else:
        ed.add_edges(host_prev[ch.copy[staged]], cpu[staged], DepKind.PROGRAM, 0)
    unlaunched = np.flatnonzero(path.h2d & path.staged & path.first_chunk & ~path.launched)
    copy_in_edges(ed, path.chunk_node[unlaunched], stages.cpu_encrypt[unlaunched])


def _h2d_edges(ed: GraphEditor, path: _DataPath, stages: _Stages, link: _Links) -> None:
    """H2D: encrypt_j -> PCIe_j -> CE decrypt -> authenticate -> the copy node."""
    h2d = path.h2d
    staged = np.flatnonzero(h2d & path.staged)
    ed.add_edges(stages.cpu_encrypt[staged], stages.pcie[staged], DepKind.DATA, 0)
    link.chain(stages.pcie, h2d)
    head = np.flatnonzero(h2d & path.first_chunk)
    copy_in_edges(ed, path.chunk_node[head], stages.pcie[head])
    link.after(stages.ce_decrypt, stages.pcie, h2d, path.latency)
    link.chain(stages.ce_decrypt, h2d)
    link.after(stages.auth, stages.ce_decrypt, h2d)
    link.chain(stages.auth, h2d)
    done = np.flatnonzero(h2d & path.final_chunk)
    ed.add_edges(stages.auth[done], path.chunk_node[done], DepKind.DATA, 0)


def _d2h_edges(ed: GraphEditor, path: _DataPath, stages: _Stages, link: _Links) -> None:
    """D2H: CE encrypt_j -> authenticate -> PCIe_j -> the copy node; PCIe -> CPU decrypt."""
    d2h = path.d2h
    head = np.flatnonzero(d2h & path.first_chunk)
    copy_in_edges(ed, path.chunk_node[head], stages.ce_encrypt[head])
    link.chain(stages.ce_encrypt, d2h)
    link.after(stages.auth, stages.ce_encrypt, d2h)
    link.chain(stages.auth, d2h)
    link.after(stages.pcie, stages.auth, d2h)
    link.chain(stages.pcie, d2h)
    done = np.flatnonzero(d2h & path.final_chunk)
    ed.add_edges(stages.pcie[done], path.chunk_node[done], DepKind.DATA, path.latency[done])
    link.after(stages.cpu_decrypt, stages.pcie, d2h & path.staged, path.latency)


def _host_sync_edges(ed: GraphEditor, path: _DataPath, stages: _Stages, host_prev: np.ndarray, threads: int) -> None:
    """The calling thread waits for the copy (host-synchronous) after its own crypto work."""
    launched = np.flatnonzero(path.launcher >= 0)
    ed.add_edges(path.node[launched], stages.wait[launched], DepKind.SYNC, 0)
    mine = path.staged & path.launched
    if threads == 1:
        mine &= path.final_chunk  # its chunks run in sequence: the last one ends the crypto work
    own = np.flatnonzero(mine)
    ed.add_edges(stages.cpu(path.h2d)[own], stages.wait[path.ch.copy[own]], DepKind.PROGRAM, 0)
    direct = launched[path.direct[launched]]
    ed.add_edges(host_prev[direct], stages.wait[direct], DepKind.PROGRAM, 0)


def _bounce_ring(ed: GraphEditor, path: _DataPath, stages: _Stages, cp: Copies, slots: int, overlap: bool) -> None:
    """Per rank, staged chunks take slots of the bounce-buffer ring: H2D from CPU encryption to
    the PCIe transfer, D2H from the PCIe transfer to CPU decryption."""
    staged = np.flatnonzero(path.staged)
    if staged.size == 0:
        return
    copy, h2d = path.ch.copy[staged], path.h2d[staged]
    pos = pool_positions(ed, cp)
    acquire = np.where(h2d, stages.cpu_encrypt[staged], stages.pcie[staged])
    free = np.where(h2d, stages.pcie[staged], stages.cpu_decrypt[staged])
    # without overlap, a D2H transfer is decrypted only once all of it landed: it needs all
    # its slots at once, so the pool grows to hold it (the driver doubles the pool on demand)
    need = np.where(~h2d & (not overlap), np.maximum(path.ch.k[staged], slots), slots)
    add_ring(ed, cp.rank[copy].astype(np.int64), pos[copy], path.ch.j[staged], path.chunk_node[staged], acquire,
             free, need)


class CCProtocol(Protocol):
    """H100 CC data path with a selection of Fastrack's fixes (see the module docstring)."""

    def __init__(self, name: str, description: str, *, direct: bool = False, parallel_auth: bool = False,
                 overlap: bool = False):
        self.name = name
        self.description = description
        self.options = CCOptions(direct=direct, parallel_auth=parallel_auth, overlap=overlap)

    def apply(self, graph: OpGraph, model) -> OpGraph:
        return transform_cc(graph, model, self.options)

    def parallel_auth_modes(self) -> frozenset[bool]:
        return frozenset({self.options.parallel_auth})
