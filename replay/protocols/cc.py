"""The confidential-computing data path as the H100 driver implements it, as a graph transform,
with Fastrack's three fixes as switches (docs/protocols.md; sources in docs/sources.md).

Every H2D/D2H copy ``M`` (launched by host call ``R`` on thread lane ``T``, on stream ``S``) is
cut into staging-buffer chunks ``0..k-1`` (``bounce.slot_bytes``, 2 MiB [S7]). Per chunk ``j``:

  H2D  cpu_encrypt_j [T, takes a bounce slot]   4 KiB AES-GCM calls in the calling thread [S5][S18]
       pcie_j [pcie_h2d] and ce_decrypt_j [ce_secure_h2d] both start once chunk j is encrypted:
       ONE copy-engine secure copy reads the ciphertext over PCIe and decrypts and verifies it
       page by page [S4][S5]; chunk j is done at
           max(ce_j finish, pcie_j finish + latency + one page of CE decryption + op overhead),
       and the channel's next operation starts only then (IV order, one channel per direction
       [S6]). M (0 ns, on S) follows the last chunk; the thread's sync_wait follows M.
  D2H  ce_encrypt_j [ce_secure_d2h] and pcie_j [pcie_d2h] start together (the CE writes the
       ciphertext onto PCIe as it encrypts); chunk j has landed at
           max(pcie_j finish, ce_j finish + one page at PCIe rate) + latency;
       cpu_decrypt_j [T] follows its landing; the call returns after the last chunk is decrypted.

CPU encryption of chunk ``j+1`` overlaps the CE operation of chunk ``j`` (the driver submits per
block and moves on [S5][S9]). There is no separate authentication stage: the copy engine checks
the tag inside the decrypting copy [S4].

The switches:

* ``direct`` (Fastrack fix 1): copies the model marks ``direct_eligible`` carry data that arrived
  encrypted (from a client or storage): the CE decrypts them with that key, no CPU pass and no
  bounce slot. Without the fix such a copy costs TWO CPU passes per chunk (a ``cpu_recrypt`` node
  decrypts the client's ciphertext before the encryption for the GPU; D2H: re-encrypts for the
  client after the decryption) [S1];
* ``parallel_auth`` (fix 2): each chunk's CE operation spreads its AES-GCM over
  ``model.ce_split_parts`` engines, partial tags combined [S6]: its crypto time divides;
* ``overlap`` (fix 3): page-grained instead of chunk-grained pipelining: the PCIe transfer and CE
  operation of a chunk (D2H: its CPU decryption) start with the chunk's previous stage instead of
  after it, and the chunk completes one page after its slowest stage (one-page lags on edges).

Pageable copies that skip the bounce buffer (direct copies) keep the driver's pageable staging
copy (``host_staging``, as under :mod:`.notee`); copies through the bounce buffer do not pay it
twice (the CPU encryption is their staging). H2D/D2H copies are host-synchronous in every CC
protocol [S11] (``model.copy_blocks_host``; with ``"d2h"`` an H2D copy releases its thread once
encrypted). Every host submission call pays one push (:mod:`.submit`). The driver path adds, per
copy (docs/model.md "The driver path"): the fixed crossing cost ``model.crossing_ns()`` as a
``p2p_sync`` node on the direction's secure channel before chunk 0's PCIe and CE stages (no node
when 0), and, after the thread's ``sync_wait``, the completion wait ``model.completion_ns()`` (the
CPU decrypts the encrypted semaphore) as a ``p2p_sync`` node on the thread.

The channel lock (docs/model.md "Channels and serialisation"): where host threads of a rank share a
direction's secure channel (crypto in the calling thread, that direction's CPU stages on more than
one lane), each chunk's CPU encryption (H2D) or decryption (D2H) holds one server of the rank's lock
pool of that direction (``ce.secure_channels_per_direction`` servers) for its duration; an H2D chunk
then takes its bounce slot first, in a 0 ns ``sync_wait`` on its thread. Nothing changes for one
thread.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastrack_core.errors import GraphError
from fastrack_core.schema import CopyDir, DepKind, HostMem
from replay.pipeline.engine import is_acyclic, topological_order
from replay.graph import LOCK_KEYS, NO_LANE, LaneType, OpGraph, edges_by_dependent, stable_argsort

from .base import Protocol
from .bounce import add_pool_holds
from .collectives import price_plain
from .copies import Chunks, Copies, chunk, dependents, host_copies, launch_edges_with_dependents, launchers
from .editor import GraphEditor, copy_in_edges, lanes_required
from .kinds import DerivedKind
from .submit import add_submission, redirect_program, scale_host_work

@dataclass(frozen=True)
class CCOptions:
    direct: bool = False
    parallel_auth: bool = False
    overlap: bool = False


def transform_cc(graph: OpGraph, model, opts: CCOptions) -> OpGraph:
    g = model.add_lanes(price_plain(graph, model))  # collectives: plaintext on the topology (multi-GPU: .p2p)
    ed = GraphEditor(g)
    scale_host_work(ed, model)  # the CPU TEE's own cost on host work (tee.host_work_ratio)
    le, le_dst = launch_edges_with_dependents(g)
    tail = add_submission(ed, model, le, le_dst)
    cp = host_copies(g, launchers(g, None, le, le_dst))
    if len(cp):
        check_host_sync(ed, cp)
        _copies(ed, model, cp, tail, opts)
    redirect_program(ed, tail)
    del le, le_dst, tail, cp  # (memory: the build's peak holds the input and the output graph; nothing else)
    return ed.build()


def check_host_sync(ed: GraphEditor, cp: Copies) -> None:
    """Raise GraphError if making the copies host-synchronous creates a cycle: the trace graph
    plus an edge from each copy to the program successors of its launching call must be acyclic
    (the transformed graph's only new cycles would come from those waits)."""
    g = ed.g
    prog = np.flatnonzero(g.dep_kind == DepKind.PROGRAM)
    has_l = cp.launcher >= 0
    if not (prog.size and has_l.any()):
        return
    p_src = g.dep_src[prog]
    o = stable_argsort(p_src)
    p_src, p_dst = p_src[o], dependents(g, prog)[o]
    L, M = cp.launcher[has_l], cp.node[has_l]
    lo = np.searchsorted(p_src, L, "left")
    cnt = np.searchsorted(p_src, L, "right") - lo
    if not cnt.sum():
        return
    offs = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    extra_dst = p_dst[np.repeat(lo, cnt) + offs]
    extra_src = np.repeat(M, cnt)
    if is_acyclic(g, extra_src, extra_dst):  # the usual case, in linear time; else the error below
        return
    all_dst = np.concatenate([ed.edge_dst, extra_dst])
    all_src = np.concatenate([g.dep_src, extra_src])
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
    """Replace every host<->GPU copy of ``cp`` by its CC data path (see the module docstring).
    ``tail`` (per existing node, the host node that now ends it) is advanced past the waits."""
    threads = int(model.cpu_crypto_threads)
    path = _DataPath.of(ed.g, model, cp, opts)
    stages = _add_stages(ed, model, path, opts, _shared_channel(path, cp.rank, threads))
    host_prev = _host_chain(path, stages.done, tail)
    _crossings(ed, model, path, stages, opts.overlap)
    _cpu_edges(ed, path, stages, host_prev, threads)
    gate = _cpu_gate(path, stages, host_prev, threads, opts.overlap)
    _h2d_edges(ed, path, stages, gate, opts.overlap)
    _d2h_edges(ed, path, stages, opts.overlap)
    _host_sync_edges(ed, path, stages, host_prev, threads, opts.overlap)
    _bounce_holds(ed, model, path, stages, cp, opts.overlap)
    _channel_locks(ed, path, stages, cp.rank, opts.overlap)


def _lane_with_key(g: OpGraph, ranks: np.ndarray, typ: LaneType, key: int) -> np.ndarray:
    """Lane of type ``typ`` and key ``key`` for each rank (NO_LANE where missing)."""
    return g.lanes.find_many(ranks, typ, key)


@dataclass(frozen=True)
class _DataPath:
    """What the data path of each copy (per copy) and each of its chunks (per chunk) needs."""

    ch: Chunks
    node: np.ndarray  # per copy: the copy's node
    launcher: np.ndarray  # per copy: the host call that issued it, or -1
    direct: np.ndarray  # per copy: goes the direct way (fix 1 on a qualifying copy): no CPU crypto, no slot
    two_pass: np.ndarray  # per copy: qualifying data on a path without fix 1: two CPU passes per chunk
    chunk_node: np.ndarray  # per chunk: its copy's node (the anchor of its stages)
    h2d: np.ndarray  # per chunk
    crypto: np.ndarray  # per chunk: goes through CPU crypto and a bounce slot
    cpu: np.ndarray  # per chunk: has a CPU stage (crypto, or the pageable staging copy of a direct copy)
    latency: np.ndarray  # per chunk: PCIe latency of its direction, ns
    page_ce: np.ndarray  # per chunk: CE time of one page (no op overhead)
    page_pcie: np.ndarray  # per chunk: PCIe time of one page
    page_cpu: np.ndarray  # per chunk: CPU time of one page (its CPU stage's rate)
    ce_overhead: int  # ns per CE operation
    pcie_lane: np.ndarray  # per copy: PCIe lane of its direction
    ce_lane: np.ndarray  # per copy: the secure-copy channel of its direction
    host_lane: np.ndarray  # per copy: the launching call's thread (the crypto pool without one)
    cpu_lane: np.ndarray  # per copy: where its CPU stage runs
    host_order: np.ndarray  # per copy: priority of its CPU stage (the launching call's order key)
    blocks: np.ndarray  # per copy: the calling thread waits for its completion (model.copy_blocks_host)

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
        ch = chunk(cp.nbytes, model.bounce_slot_bytes, g.n)
        h2d_copy = cp.direction == CopyDir.H2D
        qualifies = np.asarray(model.direct_eligible(cp.direction, g.host_mem[cp.node], cp.nbytes), bool)
        direct = qualifies & opts.direct
        pageable = g.host_mem[cp.node] == HostMem.PAGEABLE
        pcie_lane = np.where(h2d_copy, model.lane_index(g, cp.rank, LaneType.PCIE_H2D),
                             model.lane_index(g, cp.rank, LaneType.PCIE_D2H))
        ce_h2d = _lane_with_key(g, cp.rank, LaneType.GPU_CRYPTO, 0)
        ce_d2h = _lane_with_key(g, cp.rank, LaneType.GPU_CRYPTO, 1)
        if np.any(ce_h2d == NO_LANE) or np.any(ce_d2h == NO_LANE):  # a model without secure channels
            ce_h2d = ce_d2h = model.lane_index(g, cp.rank, LaneType.COPY_ENGINE)
        ce_lane = np.where(h2d_copy, ce_h2d, ce_d2h)
        crypto_lane = model.lane_index(g, cp.rank, LaneType.CPU_CRYPTO)
        for lane, what in ((pcie_lane, "PCIe"), (ce_lane, "copy-engine"), (crypto_lane, "CPU crypto")):
            lanes_required(lane, what)
        has_launcher = cp.launcher >= 0
        call = np.maximum(cp.launcher, 0)
        host_lane = np.where(has_launcher, g.lane[call], crypto_lane)
        inline = (int(model.cpu_crypto_threads) == 1) & has_launcher  # crypto in the calling thread
        latency = np.where(h2d_copy, model.pcie_latency_ns(CopyDir.H2D),
                           model.pcie_latency_ns(CopyDir.D2H)).astype(np.int64)
        h2d = h2d_copy[ch.copy]
        crypto = ~direct[ch.copy]
        page = np.minimum(ch.nbytes, np.int64(model.crypto_page_bytes))
        parts = _parts(model, opts)
        overhead = int(np.asarray(_ce_ns(model, 0, parts)).item())
        page_cpu = np.where(h2d, model.cpu_encrypt_ns(page), model.cpu_decrypt_ns(page))
        page_cpu = np.where(crypto, page_cpu, _staging_ns(model, page))
        return _DataPath(
            ch=ch, node=cp.node, launcher=cp.launcher, direct=direct, two_pass=qualifies & ~direct,
            chunk_node=cp.node[ch.copy], h2d=h2d, crypto=crypto, cpu=crypto | (direct & pageable)[ch.copy],
            latency=latency[ch.copy], page_ce=np.asarray(_ce_ns(model, page, parts), np.int64) - overhead,
            page_pcie=np.where(h2d, model.pcie_ns(page, CopyDir.H2D), model.pcie_ns(page, CopyDir.D2H)),
            page_cpu=np.asarray(page_cpu, np.int64), ce_overhead=overhead, pcie_lane=pcie_lane, ce_lane=ce_lane,
            host_lane=host_lane, cpu_lane=np.where(inline, host_lane, crypto_lane),
            host_order=np.where(has_launcher, g.order[call], g.order[cp.node]),
            blocks=np.where(h2d_copy, _blocks(model, CopyDir.H2D), _blocks(model, CopyDir.D2H)))


def _blocks(model, direction: CopyDir) -> bool:
    f = getattr(model, "copy_blocks_host", None)
    return True if f is None else bool(f(direction))


def _parts(model, opts: CCOptions) -> int:
    """Engines one secure copy's AES-GCM is spread over: Fastrack fix 2 uses every copy engine."""
    return int(getattr(model, "ce_split_parts", 1)) if opts.parallel_auth else 1


def _ce_ns(model, nbytes, parts: int):
    return model.ce_crypto_ns(nbytes, parts) if parts > 1 else model.ce_crypto_ns(nbytes)


def _staging_ns(model, nbytes):
    f = getattr(model, "staging_copy_ns", None)
    return np.zeros(np.shape(nbytes), np.int64) if f is None else f(nbytes)


@dataclass(frozen=True)
class _Stages:
    """Node index of every stage of every chunk (-1 where a chunk has no such stage), and the
    calling thread's wait per copy (-1 for copies without a launching call)."""

    cpu: np.ndarray  # CPU stage: encrypt (H2D) / decrypt (D2H) / pageable staging copy (direct copies)
    extra: np.ndarray  # the second CPU pass of client data: decrypt before (H2D) / encrypt after (D2H) ``cpu``
    pcie: np.ndarray
    ce: np.ndarray  # the CE secure-copy operation: decrypt+verify (H2D) / encrypt+tag (D2H)
    wait: np.ndarray  # per copy
    done: np.ndarray  # per copy: the host node that ends the copy on the calling thread (the completion wait, or ``wait``)
    # per chunk: its CPU crypto stage holds its direction's channel lock (host threads share the
    # channel, :func:`_channel_locks`)
    locked: np.ndarray
    # per chunk: the 0 ns ``sync_wait`` node on the thread that takes the bounce slot before a locked H2D
    # chunk's encryption locks the channel (-1 elsewhere: the encryption takes the slot itself)
    take: np.ndarray

    @property
    def cpu_first(self) -> np.ndarray:
        """Per chunk: its first CPU node on the thread (the client-data decryption of an H2D chunk,
        else the slot take of a locked H2D chunk)."""
        first = np.where(self.take >= 0, self.take, self.cpu)
        return np.where(self.extra >= 0, np.minimum(self.extra, self.cpu), first)

    @property
    def cpu_last(self) -> np.ndarray:
        """Per chunk: its last CPU node on the thread (the client-data encryption of a D2H chunk)."""
        return np.maximum(self.extra, self.cpu)


def _add_stages(ed: GraphEditor, model, path: _DataPath, opts: CCOptions, locked: np.ndarray) -> _Stages:
    """Create the stage nodes (stage-major) and the waits; the copy node keeps 0 ns on its stream.
    ``locked``: per chunk, whether its CPU crypto stage takes its direction's channel lock."""
    ch, nb, h2d = path.ch, path.ch.nbytes, path.h2d
    every = np.ones(len(ch), bool)

    def stage(kind, mask, lane, dur, order=None):
        idx = np.full(len(ch), -1, np.int64)
        sel = np.flatnonzero(mask)
        copy = ch.copy[sel]
        idx[sel] = ed.add_nodes(kind, path.chunk_node[sel], lane[copy], np.asarray(dur)[sel], nb[sel],
                                None if order is None else order[copy])
        return idx

    enc, dec = np.asarray(model.cpu_encrypt_ns(nb), np.int64), np.asarray(model.cpu_decrypt_ns(nb), np.int64)
    two = path.two_pass[ch.copy] & path.crypto
    # H2D client data: the CPU first decrypts the client's ciphertext (created before the encryption, so
    # node order follows thread order), then encrypts for the GPU
    pre = stage(DerivedKind.CPU_RECRYPT, h2d & two, path.cpu_lane, dec, path.host_order)
    cpu = np.full(len(ch), -1, np.int64)
    for kind, mask, dur in (
            (DerivedKind.CPU_ENCRYPT, h2d & path.crypto, enc),
            (DerivedKind.CPU_DECRYPT, ~h2d & path.crypto, dec),
            (DerivedKind.HOST_STAGING, path.cpu & ~path.crypto, _staging_ns(model, nb))):
        part = stage(kind, mask, path.cpu_lane, dur, path.host_order)
        cpu = np.where(mask, part, cpu)
    # D2H client-bound data: after decrypting, the CPU re-encrypts it for the client
    post = stage(DerivedKind.CPU_RECRYPT, ~h2d & two, path.cpu_lane, enc, path.host_order)
    extra = np.where(h2d, pre, post)
    pcie_ns = np.where(h2d, model.pcie_ns(nb, CopyDir.H2D), model.pcie_ns(nb, CopyDir.D2H))
    pcie = stage(DerivedKind.PCIE, every, path.pcie_lane, pcie_ns)
    ce_ns = np.asarray(_ce_ns(model, nb, _parts(model, opts)), np.int64)
    ce = np.where(h2d, stage(DerivedKind.CE_DECRYPT, h2d, path.ce_lane, ce_ns),
                  stage(DerivedKind.CE_ENCRYPT, ~h2d, path.ce_lane, ce_ns))
    launched = np.flatnonzero(path.launcher >= 0)
    wait = np.full(len(path.node), -1, np.int64)
    wait[launched] = ed.add_nodes(DerivedKind.SYNC_WAIT, path.node[launched], path.host_lane[launched], 0)
    done = wait.copy()
    # a blocking copy ends when the thread has decrypted its encrypted completion semaphore
    # (model.completion_ns; a p2p_sync node, the same hand-off as between the GPU-to-GPU engines)
    fin = np.asarray(getattr(model, "completion_ns", lambda: 0)(), np.int64)
    sem = launched[path.blocks[launched]] if int(fin) > 0 else launched[:0]
    done[sem] = ed.add_nodes(DerivedKind.P2P_SYNC, path.node[sem], path.host_lane[sem], int(fin))
    ed.add_edges(wait[sem], done[sem], DepKind.PROGRAM, 0)
    ed.set_dur(path.node, 0)  # the copy node now only marks completion on its stream
    # a locked H2D chunk takes its bounce slot first (a 0 ns sync_wait on the thread: the thread blocks
    # until it has one), then the channel lock for its encryption: the driver allocates the staging
    # buffer before it begins the push [S37]
    take = np.full(len(ch), -1, np.int64)
    sel = np.flatnonzero(locked & h2d)
    take[sel] = ed.add_nodes(DerivedKind.SYNC_WAIT, path.chunk_node[sel], path.cpu_lane[ch.copy[sel]], 0, 0,
                             path.host_order[ch.copy[sel]])
    return _Stages(cpu=cpu, extra=extra, pcie=pcie, ce=ce, wait=wait, done=done, locked=np.asarray(locked, bool),
                   take=take)


def _crossings(ed: GraphEditor, model, path: _DataPath, stages: _Stages, overlap: bool) -> None:
    """The fixed cost of each host<->GPU crossing (``model.crossing_ns``): one node per copy on its
    direction's secure channel, after the copy's own prerequisites; the copy's first chunk (PCIe
    transfer, CE operation and, streaming D2H, its CPU decryption) starts after it. On a channel of
    one server, one context's crossings serialise. No node when the cost is 0."""
    cost = int(getattr(model, "crossing_ns", lambda: 0)())
    if cost <= 0:
        return
    ch = path.ch
    toll = ed.add_nodes(DerivedKind.P2P_SYNC, path.node, path.ce_lane, cost)
    copy_in_edges(ed, path.node, toll)
    head = np.flatnonzero(path.first_chunk)
    for st in (stages.pcie, stages.ce):
        ed.add_edges(toll[ch.copy[head]], st[head], DepKind.DATA, 0)
    if overlap:
        first = head[path.d2h[head] & path.cpu[head]]
        ed.add_edges(toll[ch.copy[first]], stages.cpu[first], DepKind.DATA, 0)


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


def _cpu_edges(ed: GraphEditor, path: _DataPath, stages: _Stages, host_prev: np.ndarray, threads: int) -> None:
    """CPU stages follow the calling thread: in sequence in the thread itself, or all chunks at
    once on the crypto workers. An H2D copy without a call starts once its prerequisites are met."""
    ch, first_of, last_of = path.ch, stages.cpu_first, stages.cpu_last
    mine = np.flatnonzero(path.cpu)
    two = mine[stages.extra[mine] >= 0]  # the two passes of a chunk, in order
    taken = np.flatnonzero(stages.take >= 0)  # (H2D) the slot take, then the encryption
    into = last_of.copy()
    into[taken] = stages.take[taken]
    ed.add_edges(first_of[two], into[two], DepKind.PROGRAM, 0)
    ed.add_edges(stages.take[taken], stages.cpu[taken], DepKind.PROGRAM, 0)
    if threads == 1:
        later = mine[ch.j[mine] > 0]
        ed.add_edges(last_of[later - 1], first_of[later], DepKind.PROGRAM, 0)
        first = mine[ch.j[mine] == 0]
        ed.add_edges(host_prev[ch.copy[first]], first_of[first], DepKind.PROGRAM, 0)
    else:
        ed.add_edges(host_prev[ch.copy[mine]], first_of[mine], DepKind.PROGRAM, 0)
    unlaunched = np.flatnonzero(path.h2d & path.cpu & path.first_chunk & ~path.launched)
    copy_in_edges(ed, path.chunk_node[unlaunched], first_of[unlaunched])


def _cpu_gate(path: _DataPath, stages: _Stages, host_prev: np.ndarray, threads: int, overlap: bool) -> np.ndarray:
    """Per H2D chunk: the node whose finish lets its PCIe transfer and CE operation start: its CPU
    stage (chunk-grained pipeline), or, with ``overlap``, what its CPU stage itself waits for (the
    three stages then start together and stream page by page); -1 for none."""
    if not overlap:
        return np.where(path.cpu, stages.cpu, -1)
    ch = path.ch
    prev_cpu = np.where(ch.j > 0, stages.cpu_last[np.maximum(np.arange(len(ch)) - 1, 0)], -1)
    pred = np.where((threads == 1) & (ch.j > 0), prev_cpu, host_prev[ch.copy])
    # with a client-data decryption first, the GPU encryption (and so the stream) starts after it
    pred = np.where(stages.extra >= 0, stages.extra, pred)
    return np.where(path.cpu, pred, -1)


def _done_edges(ed: GraphEditor, path: _DataPath, stages: _Stages, chunks: np.ndarray, dst: np.ndarray,
                overlap: bool) -> None:
    """H2D: ``dst`` waits for the CE operation of each chunk in ``chunks`` to complete: the later of
    the CE node and the last byte's arrival + one page of decryption (+ the op overhead); with
    ``overlap`` also its CPU stage + one page through PCIe and the CE."""
    if chunks.size == 0:
        return
    tail_ce = path.page_ce[chunks] + path.ce_overhead
    ed.add_edges(stages.ce[chunks], dst, DepKind.DATA, 0)
    ed.add_edges(stages.pcie[chunks], dst, DepKind.DATA, path.latency[chunks] + tail_ce)
    if overlap:
        ed.add_edges(stages.cpu[chunks], dst, DepKind.DATA,
                     path.page_pcie[chunks] + path.latency[chunks] + tail_ce)


def _landed_edges(ed: GraphEditor, path: _DataPath, stages: _Stages, chunks: np.ndarray, dst: np.ndarray,
                  extra: np.ndarray | int = 0) -> None:
    """D2H: ``dst`` waits until each chunk in ``chunks`` has landed in host memory: the later of its
    PCIe transfer and its CE operation + one page through PCIe, plus the latency (+ ``extra``)."""
    if chunks.size == 0:
        return
    ed.add_edges(stages.pcie[chunks], dst, DepKind.DATA, path.latency[chunks] + extra)
    ed.add_edges(stages.ce[chunks], dst, DepKind.DATA, path.page_pcie[chunks] + path.latency[chunks] + extra)


def _h2d_edges(ed: GraphEditor, path: _DataPath, stages: _Stages, gate: np.ndarray, overlap: bool) -> None:
    """H2D: chunk j's PCIe transfer and CE operation start after its gate; the channel takes the
    chunks in order (each CE operation after the previous one completed); M after the last."""
    ch = path.ch
    h2d = np.flatnonzero(path.h2d)
    for st in (stages.pcie, stages.ce):
        ed.add_edges(gate[h2d], st[h2d], DepKind.DATA, 0)
    head = h2d[ch.j[h2d] == 0]
    copy_in_edges(ed, path.chunk_node[head], stages.pcie[head])
    copy_in_edges(ed, path.chunk_node[head], stages.ce[head])
    later = h2d[ch.j[h2d] > 0]
    ed.add_edges(stages.pcie[later - 1], stages.pcie[later], DepKind.DATA, 0)
    _done_edges(ed, path, stages, later - 1, stages.ce[later], overlap)
    done = h2d[path.final_chunk[h2d]]
    _done_edges(ed, path, stages, done, path.chunk_node[done], overlap)


def _d2h_edges(ed: GraphEditor, path: _DataPath, stages: _Stages, overlap: bool) -> None:
    """D2H: chunk j's CE operation and PCIe transfer start together, after the previous chunk's CE
    operation (the channel's IV order); the CPU decrypts a chunk once it landed (with ``overlap``:
    as it lands, page by page); M after the last chunk landed."""
    ch = path.ch
    d2h = np.flatnonzero(path.d2h)
    head = d2h[ch.j[d2h] == 0]
    later = d2h[ch.j[d2h] > 0]
    for st in (stages.ce, stages.pcie):
        copy_in_edges(ed, path.chunk_node[head], st[head])
        ed.add_edges(stages.ce[later - 1], st[later], DepKind.DATA, 0)
    ed.add_edges(stages.pcie[later - 1], stages.pcie[later], DepKind.DATA, 0)
    done = d2h[path.final_chunk[d2h]]
    _landed_edges(ed, path, stages, done, path.chunk_node[done])
    mine = d2h[path.cpu[d2h]]
    if not overlap:
        _landed_edges(ed, path, stages, mine, stages.cpu[mine])
        return
    first = mine[ch.j[mine] == 0]
    copy_in_edges(ed, path.chunk_node[first], stages.cpu[first])
    nxt = mine[ch.j[mine] > 0]
    ed.add_edges(stages.ce[nxt - 1], stages.cpu[nxt], DepKind.DATA, 0)


def _host_sync_edges(ed: GraphEditor, path: _DataPath, stages: _Stages, host_prev: np.ndarray, threads: int,
                     overlap: bool) -> None:
    """The calling thread waits for the copy (host-synchronous) after its own CPU stages."""
    launched = np.flatnonzero(path.launcher >= 0)
    waits = launched[path.blocks[launched]]  # host-synchronous copies (model.copy_blocks_host)
    ed.add_edges(path.node[waits], stages.wait[waits], DepKind.SYNC, 0)
    mine = path.cpu & path.launched
    if threads == 1:
        mine &= path.final_chunk  # its chunks run in sequence: the last one ends the CPU work
    own = np.flatnonzero(mine)
    ed.add_edges(stages.cpu_last[own], stages.wait[path.ch.copy[own]], DepKind.PROGRAM, 0)
    if overlap:  # the last page is decrypted (or copied out) after it landed
        last = np.flatnonzero(path.d2h & path.cpu & path.launched & path.final_chunk)
        _landed_edges(ed, path, stages, last, stages.wait[path.ch.copy[last]], path.page_cpu[last])
    copy_has_cpu = np.zeros(len(path.node), bool)
    copy_has_cpu[path.ch.copy[path.cpu]] = True
    bare = launched[~copy_has_cpu[launched]]
    ed.add_edges(host_prev[bare], stages.wait[bare], DepKind.PROGRAM, 0)


def _bounce_holds(ed: GraphEditor, model, path: _DataPath, stages: _Stages, cp: Copies, overlap: bool) -> None:
    """Every crypto chunk holds one slot of its rank's bounce pool (.bounce): H2D from the CPU
    encryption that fills it to the PCIe transfer that drains it; D2H from the PCIe transfer that
    fills it to the CPU decryption that empties it (each chunk is decrypted once it landed, so a
    chunk never needs more than its own slot). With ``overlap`` the stages stream page by page and
    the emptying stage does not wait for the filling one to finish: a start-to-start edge (LAUNCH,
    lag 0) keeps it from starting before the slot is filled at all (the engine needs the emptying
    node to depend on the holder)."""
    staged = np.flatnonzero(path.crypto)
    if staged.size == 0:
        return
    h2d = path.h2d[staged]
    fill = np.where(stages.take[staged] >= 0, stages.take[staged], stages.cpu[staged])
    holder = np.where(h2d, fill, stages.pcie[staged])
    until = np.where(h2d, stages.pcie[staged], stages.cpu[staged])
    if overlap:
        ed.add_edges(holder, until, DepKind.LAUNCH, 0)
    add_pool_holds(ed, cp.rank[path.ch.copy[staged]], holder, until, int(model.bounce_slots),
                   int(model.bounce_max_slots))


def _shared_channel(path: _DataPath, rank: np.ndarray, threads: int) -> np.ndarray:
    """Per chunk: whether its CPU crypto stage takes its direction's channel lock: the CPU stages
    that encrypt for (H2D) or decrypt from (D2H) a secure channel run in the calling thread
    (``cpu_crypto.threads`` = 1) and, on its rank, that direction's stages run on more than one
    lane (several host threads, or a thread and the crypto lane of copies without a call). One lane
    serves one stage at a time: a lock only it takes never binds, so it is left out."""
    crypto = path.crypto & path.cpu
    if threads != 1 or not crypto.any():
        return np.zeros(len(path.ch), bool)
    sel = np.flatnonzero(crypto)
    r = rank[path.ch.copy[sel]].astype(np.int64)
    key = r * 2 + path.h2d[sel]  # (rank, direction)
    lane = path.cpu_lane[path.ch.copy[sel]].astype(np.int64) + 1  # (>= 0)
    span = int(lane.max()) + 1
    pairs = np.unique(key * span + lane)  # the distinct (rank, direction, lane)
    groups, lanes_per = np.unique(pairs // span, return_counts=True)
    shared_keys = groups[lanes_per > 1]
    out = np.zeros(len(path.ch), bool)
    out[sel[np.isin(key, shared_keys)]] = True
    return out


def _channel_locks(ed: GraphEditor, path: _DataPath, stages: _Stages, rank: np.ndarray, overlap: bool) -> None:
    """The channel lock (docs/model.md "The driver path", "Channels and serialisation"): a CPU
    crypto stage marked ``locked`` holds one server of its rank's lock pool of its direction
    (``ce.secure_channels_per_direction`` servers, as many as the direction's secure-channel lane,
    never growing) for its own duration: the driver encrypts into the staging buffer inside a push
    that has the channel locked, and decrypts under the channel's CSL lock [S37], so at most that
    many threads encrypt (or decrypt) for one direction at once; the others wait, longest-waiting
    first. With ``overlap`` an H2D chunk's PCIe transfer and CE operation start no earlier than its
    encryption does (start-to-start edges: they stream what it writes)."""
    sel = np.flatnonzero(stages.locked)
    if sel.size == 0:
        return
    copy = path.ch.copy[sel]
    h2d = path.h2d[sel]
    r = rank[copy].astype(np.int64)
    lanes = ed.lanes
    pool = np.empty(sel.size, np.int32)
    for direction in (True, False):
        mask = h2d == direction
        if not mask.any():
            continue
        ranks, inv = np.unique(r[mask], return_inverse=True)
        found = lanes.find_many(ranks, LaneType.BOUNCE_POOL, LOCK_KEYS[direction])
        new = np.flatnonzero(found == NO_LANE)
        if new.size:
            # one lock per channel: as many servers as the rank's secure-channel lane of this direction
            ce = np.zeros(ranks.size, np.int64)
            ce[inv] = path.ce_lane[copy[mask]]
            servers = lanes.servers[ce[new]]
            label = "csl_h2d" if direction else "csl_d2h"
            lanes, first = lanes.extend(ranks[new], int(LaneType.BOUNCE_POOL), LOCK_KEYS[direction],
                                        [f"rank{int(x)}/{label}" for x in ranks[new].tolist()], servers,
                                        max_servers=servers)
            found[new] = first + np.arange(new.size, dtype=np.int32)
        pool[mask] = found[inv]
    ed.lanes = lanes
    cpu = stages.cpu[sel]
    ed.add_holds(cpu, cpu, pool)
    if overlap:
        streamed = sel[h2d]
        for st in (stages.pcie, stages.ce):
            ed.add_edges(stages.cpu[streamed], st[streamed], DepKind.LAUNCH, 0)


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
