"""Encrypted GPU-to-GPU messages (multi-GPU confidential computing), as a graph transform.

Encrypted GPU-to-GPU traffic is **not a shipped H100 configuration** through driver R580 (shipped:
one GPU per confidential VM, or PPCIe with NVLink in plaintext; docs/sources.md [S22]). What this
module models is the design NVIDIA describes [S23] and the data-parallel study [S2] emulates: the
sending GPU's copy engine (CE) encrypts the message out of protected memory into a peer-to-peer
bounce buffer in **unprotected video memory**, the ciphertext crosses the GPU-to-GPU link (NVLink,
or PCIe peer-to-peer where ``topology.link = "pcie"``), and the receiving CE decrypts it into
protected memory and verifies its tags **in the same operation** ([S4]: no separate
authentication stage). No host-memory hop.

Each collective instance (:mod:`.collectives`) is expanded into its point-to-point messages
(ring sub-steps, tree edges, ...). Message ``m`` from rank ``a`` to rank ``b`` is cut into staging
chunks of ``p2p.chunk_bytes``; per chunk ``j`` (lanes in brackets)::

  a: push encrypt_j[a: proxy_send] -> (key share[a: secure out]) -> CE encrypt_j[a: secure out]
     -> sync_j[a: proxy_send] -> push send_j[a: proxy_send] -> link_j[a: link_out]
     (-> IV/tag transfer_j[a: link_out], unbatched) -> (link latency)
  b: sync_j[b: proxy_recv] -> push decrypt_j[b: proxy_recv] -> CE decrypt+verify_j[b: secure in]

As the single-GPU path (:mod:`.cc`) the chunks are pipelined: each stage takes a message's chunks
in order (one secure channel per direction, IV order [S6]), chunk ``j+1`` is encrypted while
chunk ``j`` is synchronised, sent and decrypted. The secure lanes are the model's secure-copy
channels (``GPU_CRYPTO`` key 1 out of protected memory, key 0 into it), shared with host copies;
a model without them uses its copy-engine lane.

The per-message costs are those the kernel-mode driver shows for every CE operation [S9]: each
push is an encrypted submission (``model.submit_ns`` of a copy: the single-GPU submission cost);
the host learns that the encrypt finished (and, at the receiver, that the ciphertext landed) by
decrypting an encrypted semaphore (``p2p.sync_ns``); one IV and one 16 B tag per 4 KiB page
travel with the ciphertext (``p2p.meta_bytes_per_page`` [S3][S7]); and every message spends
``bytes/16 + invocations`` of its key's usage budget, charged as the expected share of a
rotation stall (``keys.rotation_stall_ns``, ``model.key_rotation_ns`` [S25]). The host side of
each GPU is two proxy threads (lanes ``p2p_proxy_send`` and ``p2p_proxy_recv``), each serialising
its pushes and waits; encrypt pushes are made ahead, before the data is ready.

A message is encrypted only after its sender received (decrypted and verified) what it forwards
(the previous ring step, the children in a tree). The collective's kernel node on each rank stays
on its stream with zero duration and completes when the rank's receipts are verified and its
sends have left; the barrier group is dropped (the message DAG synchronises the ranks).

Switches (:class:`P2POptions`):

* ``overlap`` (Fastrack fix 3 on this path, as in :mod:`.cc`: page-grained instead of
  chunk-grained): the host leaves the data path (every push made ahead, GPU-side hand-offs: no
  ``sync`` nodes); chunk ``j``'s encryption, transfer and decryption start together once chunk
  ``j-1`` is done and stream page by page; a chunk is done at the latest of its decryption, its
  transfer + latency + one page of decryption, and its encryption + one page through link and CE;
* ``split`` (Fastrack fix 2 where it applies: there is no separate authentication here, so the
  parallelism is in the CE operation): each chunk's AES-GCM spread over ``model.ce_split_parts``
  engines, partial tags combined [S6];
* ``batched_meta`` (option ``batched-meta``): one encrypt push per message instead of one per
  chunk (with ``overlap`` also one send and one decrypt push), and the IVs/tags inside the data
  transfer instead of a transfer of their own per chunk;
* ``keymgmt`` (option ``keymgmt``): next key derived and installed ahead, switched at a message
  boundary: no rotation stall on the data path.

Fastrack's fix 1 (direct communication) does not apply: the CPU never re-encrypts GPU-to-GPU data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastrack_core.errors import PluginError
from fastrack_core.schema import DepKind, OpKind
from replay.graph import NO_LANE, LaneType, OpGraph, check_node_budget
from replay.protocols.copies import NODES_PER_CHUNK

from .collectives import Collectives, Messages, find, messages, require_link_model
from .editor import GraphEditor, copy_in_edges, lanes_required
from .kinds import DerivedKind

PROXY = "p2p_proxy"
PROXY_KEY = 80  # keys of the proxy threads' SUBMIT lanes (send: 80, receive: 81; distinct from a model's own)
LINK_NAME = "link_out"
# keys of the models' secure-copy channel lanes (LaneType.GPU_CRYPTO): into protected memory (decrypt,
# as H2D) and out of it (encrypt, as D2H); without them the copy-engine lane serves both
SECURE_IN, SECURE_OUT = 0, 1
# what the transform needs of a model beyond the link prices (docs/multi-gpu.md section 6)
P2P_METHODS = ("p2p_chunk_bytes", "p2p_meta_bytes", "p2p_sync_ns", "key_rotation_ns", "crypto_page_bytes",
               "ce_crypto_ns", "submit_ns")


@dataclass(frozen=True)
class P2POptions:
    overlap: bool = False
    split: bool = False
    batched_meta: bool = False
    keymgmt: bool = False


@dataclass(frozen=True)
class P2PPlan:
    """What a transform did (for tests and reports)."""

    collectives: Collectives
    messages: Messages
    chunks: int


def has_collectives(graph: OpGraph) -> bool:
    return bool(np.any(graph.kind == OpKind.COLLECTIVE))


def _add_rank_lanes(graph: OpGraph, ranks, typ: LaneType, key: int, name: str) -> OpGraph:
    lanes = graph.lanes
    ranks = np.unique(np.asarray(list(ranks) if not isinstance(ranks, np.ndarray) else ranks, np.int64))
    new = ranks[lanes.find_many(ranks, typ, key) == NO_LANE]
    if new.size == 0:
        return graph
    lanes, _ = lanes.extend(new, int(typ), key, [f"rank{int(r)}/{name}" for r in new.tolist()], 1)
    return graph.replace(lanes=lanes)


def _require_p2p_model(model, protocol: str) -> None:
    require_link_model(model, protocol)
    missing = [m for m in P2P_METHODS if not hasattr(model, m)]
    if missing:
        raise PluginError(f"protocol '{protocol}' encrypts GPU-to-GPU messages and needs a hardware model with "
                          f"{', '.join(missing)}; model '{model.name}' has none of these")


def transform_p2p(graph: OpGraph, model, opts: P2POptions, protocol: str = "baseline",
                  plan: list | None = None) -> OpGraph:
    """Encrypt every GPU-to-GPU message of ``graph``'s collectives (see the module docstring).
    ``plan``: a list that receives the :class:`P2PPlan` (optional)."""
    if not has_collectives(graph):
        return graph
    _require_p2p_model(model, protocol)
    g = model.add_lanes(graph)
    col = find(g, model)
    msg = messages(col) if len(col) else None
    if msg is None or len(msg) == 0:
        return g
    ranks = g.rank[col.node]
    g = _add_rank_lanes(g, ranks, LaneType.SUBMIT, PROXY_KEY, PROXY + "_send")
    g = _add_rank_lanes(g, ranks, LaneType.SUBMIT, PROXY_KEY + 1, PROXY + "_recv")
    g = _add_rank_lanes(g, ranks, LaneType.LINK, 0, LINK_NAME)
    g = _without_barriers(g, col.node)
    ed = GraphEditor(g)
    ends = _Ends.of(g, model, col, msg)
    ch = _Chunks.of(msg.nbytes, model.p2p_chunk_bytes, g.n)
    priority = _priorities(g, col, msg, ch)
    gpus = col.n[msg.inst]  # per message: GPUs of its collective (which link it takes)
    latency = np.zeros(len(msg), np.int64)
    for k in np.unique(gpus).tolist():
        latency[gpus == k] = model.link_latency_ns(int(k))
    nodes = _add_nodes(ed, model, msg, ends, priority, ch, gpus, opts)
    _add_edges(ed, msg, ends, ch, nodes, latency, _Pages.of(model, ch, gpus, opts), opts)
    ed.set_dur(col.node, 0)
    if plan is not None:
        plan.append(P2PPlan(collectives=col, messages=msg, chunks=len(ch.msg)))
    return ed.build()


def _without_barriers(graph: OpGraph, members: np.ndarray) -> OpGraph:
    """The collective members leave their barrier groups: the message DAG synchronises the ranks."""
    group = graph.group.copy()
    group[members] = -1
    return graph.replace(group=group)


def _link_ns(model, nbytes: np.ndarray, gpus: np.ndarray) -> np.ndarray:
    """Link occupancy of ``nbytes`` per entry, on the link of a collective of ``gpus`` GPUs."""
    out = np.zeros(nbytes.shape[0], np.int64)
    for k in np.unique(gpus).tolist():
        sel = gpus == k
        out[sel] = np.asarray(model.link_ns(nbytes[sel], int(k)), np.int64)
    return out


@dataclass(frozen=True)
class _Chunks:
    """Staging chunks of every message (in message order, chunk order within)."""

    msg: np.ndarray  # per chunk: its message
    j: np.ndarray  # per chunk: index within its message
    nbytes: np.ndarray  # per chunk
    first: np.ndarray  # per message: its first chunk
    last: np.ndarray  # per message: its last chunk

    @staticmethod
    def of(nbytes: np.ndarray, chunk_bytes: int, graph_nodes: int = 0) -> "_Chunks":
        nbytes = np.asarray(nbytes, np.int64)
        count = np.maximum(1, -(-nbytes // np.int64(chunk_bytes)))
        check_node_budget(graph_nodes, NODES_PER_CHUNK * int(count.sum()), f"cutting {count.size:,} messages into {chunk_bytes:,}-byte chunks")
        first = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.int64)
        msg = np.repeat(np.arange(nbytes.size, dtype=np.int64), count)
        j = np.arange(msg.size, dtype=np.int64) - first[msg]
        size = np.where(j < count[msg] - 1, np.int64(chunk_bytes), nbytes[msg] - (count[msg] - 1) * chunk_bytes)
        return _Chunks(msg=msg, j=j, nbytes=size.astype(np.int64), first=first, last=first + count - 1)

    def groups(self, per_message: bool) -> tuple[np.ndarray, np.ndarray]:
        """(group of every chunk, message of every group): one group per chunk, or per message."""
        if per_message:
            return self.msg, np.arange(self.first.size, dtype=np.int64)
        return np.arange(self.msg.size, dtype=np.int64), self.msg


@dataclass(frozen=True)
class _Ends:
    """Per message: the collective node (the anchor) and the lanes of its sender and its receiver."""

    send_node: np.ndarray
    recv_node: np.ndarray
    send_ce: np.ndarray
    recv_ce: np.ndarray
    send_link: np.ndarray
    send_proxy: np.ndarray
    recv_proxy: np.ndarray

    @staticmethod
    def of(g: OpGraph, model, col: Collectives, msg: Messages) -> "_Ends":
        send_node, recv_node = col.node[msg.src], col.node[msg.dst]
        send_rank, recv_rank = g.rank[send_node].astype(np.int64), g.rank[recv_node].astype(np.int64)

        def lane(ranks, typ, key=0):
            return g.lanes.find_many(ranks, typ, key).astype(np.int64)

        def secure(ranks, key):  # the secure-copy channel lane of a direction, or the copy engines
            ch = lane(ranks, LaneType.GPU_CRYPTO, key)
            return np.where(ch >= 0, ch, model.lane_index(g, ranks, LaneType.COPY_ENGINE)).astype(np.int64)

        ends = _Ends(
            send_node=send_node, recv_node=recv_node,
            send_ce=secure(send_rank, SECURE_OUT), recv_ce=secure(recv_rank, SECURE_IN),
            send_link=lane(send_rank, LaneType.LINK),
            send_proxy=lane(send_rank, LaneType.SUBMIT, PROXY_KEY),
            recv_proxy=lane(recv_rank, LaneType.SUBMIT, PROXY_KEY + 1))
        for ln, what in ((ends.send_ce, "copy-engine"), (ends.recv_ce, "copy-engine"), (ends.send_link, LINK_NAME),
                         (ends.send_proxy, PROXY + "_send"), (ends.recv_proxy, PROXY + "_recv")):
            lanes_required(ln, what)
        return ends


# Order of the stages of one chunk on shared lanes (added to the chunk's order key).
_STAGE = {name: i for i, name in enumerate(("push_encrypt", "key", "encrypt", "sync_send", "push_send", "link", "meta",
                                            "sync_recv", "push_decrypt", "decrypt"))}


def _priorities(g: OpGraph, col: Collectives, msg: Messages, ch: "_Chunks") -> np.ndarray:
    """Per chunk: its order key on shared lanes (the engine serves a lane in visiting order, a
    FIFO): one key per instance for all its ranks (its earliest member's), then by step, chunk
    and stage (``+ _STAGE[...]``), so that step s of every rank goes before step s+1 of any rank
    and a message's chunks go through each stage in order."""
    inst_key = np.full(len(col), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(inst_key, col.inst, g.order[col.node])
    per_step = int((ch.last - ch.first).max(initial=0)) + 1
    return inst_key[msg.inst[ch.msg]] + (msg.step[ch.msg] * per_step + ch.j) * len(_STAGE)


@dataclass(frozen=True)
class _Nodes:
    """Host-side nodes per push or sync group, engine and link nodes per chunk, key share per message."""

    push_encrypt: np.ndarray  # per encrypt-push group, sender's send proxy
    encrypt_group: np.ndarray  # per chunk: its encrypt push
    push_send: np.ndarray  # per send-push group
    push_decrypt: np.ndarray  # per decrypt-push group (receiver's receive proxy)
    other_group: np.ndarray  # per chunk: its send and decrypt pushes
    sync_send: np.ndarray  # per chunk (-1 with overlap: no host synchronisation on the data path)
    sync_recv: np.ndarray  # per chunk (-1 with overlap)
    key: np.ndarray  # per message (-1 without a stall)
    encrypt: np.ndarray  # per chunk
    link: np.ndarray  # per chunk
    meta: np.ndarray  # per chunk (zero-time with batched metadata)
    decrypt: np.ndarray  # per chunk

    def landed(self, batched: bool) -> np.ndarray:
        """Per chunk: the transfer after which it is usable (its IV/tag transfer, zero-time when batched)."""
        return self.meta


def _add_nodes(ed: GraphEditor, model, msg: Messages, ends: _Ends, priority: np.ndarray, ch: _Chunks,
               gpus: np.ndarray, opts: P2POptions) -> _Nodes:
    submit = np.int64(np.asarray(model.submit_ns(int(OpKind.MEMCPY))).item())
    sync = np.int64(model.p2p_sync_ns())
    m, nb = ch.msg, ch.nbytes

    def host(kind, stage, anchor, lane, dur, group_msg, key):  # one node per group (``group_msg``: its message)
        return ed.add_nodes(kind, anchor[group_msg], lane[group_msg], dur, order=key + _STAGE[stage])

    # one push per chunk and stage; a push merged into its message's first (batched metadata) stays
    # as a zero-time node, so that an option changes durations only, never the graph's shape.
    # Encrypt pushes are made ahead (a message's pushes all go first); send and decrypt pushes
    # follow the chunk's host synchronisation (chunk-grained pipeline), so batching can merge them
    # only with overlap (no host on the data path: every push made ahead)
    enc_group, enc_msg = ch.groups(False)
    first = ch.j == 0
    merged = np.where(first | ~np.bool_(opts.batched_meta), submit, 0)
    push_encrypt = host(DerivedKind.P2P_SUBMIT, "push_encrypt", ends.send_node, ends.send_proxy, merged, enc_msg,
                        priority[ch.first[enc_msg]])
    copy_in_edges(ed, ends.send_node[enc_msg], push_encrypt)  # pushed once the collective is launched
    oth_group, oth_msg = ch.groups(False)
    other = np.where(first | ~np.bool_(opts.batched_meta and opts.overlap), submit, 0)
    push_send = host(DerivedKind.P2P_SUBMIT, "push_send", ends.send_node, ends.send_proxy, other, oth_msg, priority)
    push_decrypt = host(DerivedKind.P2P_SUBMIT, "push_decrypt", ends.recv_node, ends.recv_proxy, other, oth_msg,
                        priority)
    copy_in_edges(ed, ends.recv_node[oth_msg], push_decrypt)
    sync_send = sync_recv = np.full(ch.msg.size, -1, np.int64)
    if not opts.overlap:
        sync_send = host(DerivedKind.P2P_SYNC, "sync_send", ends.send_node, ends.send_proxy, sync, m, priority)
        sync_recv = host(DerivedKind.P2P_SYNC, "sync_recv", ends.recv_node, ends.recv_proxy, sync, m, priority)

    # key shares (zero-time with key management off the data path: same graph, no stall)
    key = np.full(len(msg), -1, np.int64)
    pages = np.maximum(1, -(-msg.nbytes // np.int64(model.crypto_page_bytes)))
    stall = np.asarray(model.key_rotation_ns(msg.nbytes, pages), np.int64)
    has = np.flatnonzero(stall > 0)
    key[has] = ed.add_nodes(DerivedKind.KEY_ROTATION, ends.send_node[has], ends.send_ce[has],
                            0 if opts.keymgmt else stall[has], msg.nbytes[has],
                            order=priority[ch.first[has]] + _STAGE["key"])

    meta_nb = np.asarray(model.p2p_meta_bytes(nb), np.int64)
    parts = int(getattr(model, "ce_split_parts", 1)) if opts.split else 1
    crypto = np.asarray(model.ce_crypto_ns(nb, parts) if parts > 1 else model.ce_crypto_ns(nb), np.int64)

    def stage(kind, name, anchor, lane, dur, nbytes):
        return ed.add_nodes(kind, anchor[m], lane[m], dur, nbytes, order=priority + _STAGE[name])

    encrypt = stage(DerivedKind.CE_ENCRYPT, "encrypt", ends.send_node, ends.send_ce, crypto, nb)
    # batched: the IVs/tags inside the data transfer (their own transfer stays, zero-time)
    wire = nb + meta_nb if opts.batched_meta else nb
    link = stage(DerivedKind.P2P_LINK, "link", ends.send_node, ends.send_link, _link_ns(model, wire, gpus[m]), nb)
    meta = stage(DerivedKind.P2P_META, "meta", ends.send_node, ends.send_link,
                 0 if opts.batched_meta else _link_ns(model, meta_nb, gpus[m]), 0 if opts.batched_meta else meta_nb)
    decrypt = stage(DerivedKind.CE_DECRYPT, "decrypt", ends.recv_node, ends.recv_ce, crypto, nb)
    return _Nodes(push_encrypt=push_encrypt, encrypt_group=enc_group, push_send=push_send, push_decrypt=push_decrypt,
                  other_group=oth_group, sync_send=sync_send, sync_recv=sync_recv, key=key, encrypt=encrypt,
                  link=link, meta=meta, decrypt=decrypt)


@dataclass(frozen=True)
class _Pages:
    """Per chunk: one crypto page through the copy engine and through the link (streaming lags)."""

    ce: np.ndarray
    link: np.ndarray

    @staticmethod
    def of(model, ch: _Chunks, gpus: np.ndarray, opts: P2POptions) -> "_Pages":
        page = np.minimum(ch.nbytes, np.int64(model.crypto_page_bytes))
        parts = int(getattr(model, "ce_split_parts", 1)) if opts.split else 1
        ce = np.asarray(model.ce_crypto_ns(page, parts) if parts > 1 else model.ce_crypto_ns(page), np.int64)
        return _Pages(ce=ce, link=_link_ns(model, page, gpus[ch.msg]))


def _add_edges(ed: GraphEditor, msg: Messages, ends: _Ends, ch: _Chunks, n: _Nodes, latency: np.ndarray,
               pages: _Pages, opts: P2POptions) -> None:
    """Baseline (chunk-grained): encrypt_j -> sync -> push -> link_j (-> IV/tags_j) -> latency -> sync
    -> push -> decrypt_j; the chunks of a stage in order. With ``overlap`` (page-grained, no host on
    the data path): encrypt_j, link_j and decrypt_j start together once chunk j-1 is done and
    stream page by page; a chunk is done at the latest of its stages plus one page of the later ones."""
    data = DepKind.DATA
    later = np.flatnonzero(ch.j > 0)
    prev = later - 1
    landed = n.landed(opts.batched_meta)
    lat = latency[ch.msg]
    ed.add_edges(n.push_encrypt[n.encrypt_group], n.encrypt, data, 0)
    ed.add_edges(n.push_send[n.other_group], n.link, data, 0)
    ed.add_edges(n.push_decrypt[n.other_group], n.decrypt, data, 0)
    ed.add_edges(n.link, n.meta, data, 0)  # the chunk's IVs/tags, a transfer of their own
    # a message is encrypted only after what it forwards was received (decrypted and verified)
    rotated = np.flatnonzero(n.key >= 0)
    ed.add_edges(n.push_encrypt[n.encrypt_group[ch.first[rotated]]], n.key[rotated], data, 0)
    ed.add_edges(n.key[rotated], n.encrypt[ch.first[rotated]], data, 0)
    start = [n.encrypt] if not opts.overlap else [n.encrypt, n.link, n.decrypt]
    for st in start:
        _received_edges(ed, ch, n, pages, lat, msg.pre_msg, st[ch.first[msg.pre_of]], opts)
    if not opts.overlap:
        for st in (n.encrypt, n.link, n.decrypt):  # each stage takes the chunks in order
            ed.add_edges(st[prev], st[later], data, 0)
        ed.add_edges(n.encrypt, n.sync_send, data, 0)
        ed.add_edges(n.sync_send, n.push_send[n.other_group], data, 0)
        ed.add_edges(landed, n.sync_recv, data, lat)
        ed.add_edges(n.sync_recv, n.push_decrypt[n.other_group], data, 0)
    else:  # chunk j's three stages start once chunk j-1 is done (the channels' IV order)
        for st in (n.encrypt, n.link, n.decrypt):
            _received_edges(ed, ch, n, pages, lat, None, st[later], opts, chunks=prev)
        for st in (n.link, n.decrypt):  # the streams start together, after the key share
            ed.add_edges(n.key[rotated], st[ch.first[rotated]], data, 0)
    # the collective completes on a rank when its receipts are verified and its sends have left
    _received_edges(ed, ch, n, pages, lat, np.arange(len(msg)), ends.recv_node, opts)
    ed.add_edges(landed[ch.last], ends.send_node, data, latency)
    if opts.overlap:
        ed.add_edges(n.encrypt[ch.last], ends.send_node, data, pages.link[ch.last] + latency)


def _received_edges(ed: GraphEditor, ch: _Chunks, n: _Nodes, pages: _Pages, lat: np.ndarray, messages_: np.ndarray | None,
                    dst: np.ndarray, opts: P2POptions, chunks: np.ndarray | None = None) -> None:
    """``dst[i]`` waits until chunk ``chunks[i]`` (default: the last chunk of message ``messages_[i]``)
    is decrypted and verified: its decrypt node, and with ``overlap`` (streaming) also its link
    transfer + latency + one page of decryption and its encryption + one page through link and CE."""
    c = ch.last[messages_] if chunks is None else chunks
    data = DepKind.DATA
    ed.add_edges(n.decrypt[c], dst, data, 0)
    if opts.overlap:
        landed = n.landed(opts.batched_meta)
        ed.add_edges(landed[c], dst, data, lat[c] + pages.ce[c])
        ed.add_edges(n.encrypt[c], dst, data, pages.link[c] + lat[c] + pages.ce[c])


__all__ = ["P2POptions", "P2PPlan", "transform_p2p", "has_collectives", "PROXY", "P2P_METHODS"]
