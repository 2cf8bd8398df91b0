"""Encrypted GPU-to-GPU messages under H100 confidential computing, as a graph transform.

With CC on, H100 has no peer access (nvtrust #22): every message of a collective is encrypted by
the *sending* GPU's copy engine into a staging area in unprotected host memory and decrypted and
verified by the *receiving* GPU (HCC whitepaper Fig. 12 via nvtrust #24; Gu et al. App. B). Each
collective instance (:mod:`.collectives`) is expanded into its point-to-point messages
(ring steps, tree edges, ...); message ``m`` from rank ``a`` to rank ``b`` is cut into staging
chunks of ``bounce.slot_bytes`` and becomes (lanes in brackets)::

  submit[a: p2p_proxy] -> key_rotation[a: CE] -> CE encrypt_j[a: CE] -> PCIe D2H_j[a: pcie_d2h]
      -> (latency) -> PCIe H2D_j[b: pcie_h2d] -> (latency) -> CE decrypt_j[b: CE] -> authenticate_j[b: gpu_auth]
  submit[b: p2p_proxy] -> PCIe H2D_j        (unbatched metadata: -> IV/tag read_j[b: pcie_h2d] -> decrypt_j)

Message ``m`` of step ``s`` is encrypted only after its sender received (decrypted and verified)
what it forwards (its prerequisite messages: the previous ring step, the children in a tree).
The collective's kernel node on each rank stays on its stream with zero duration and completes
when the rank's last receipt is verified and its last send has left; the barrier group is
dropped (the message DAG synchronises the ranks). Every price comes from the model: submission
``submit.copy_ns`` (nvtrust #42: ~1.6 us per encrypted CE command), copy-engine AES-GCM, PCIe per
direction with latency, GPU authentication serial or parallel, key rotation
(``model.key_rotation_ns``).

Switches (:class:`P2POptions`), each a mitigation that can be selected alone:

* ``batched_meta``: IVs and tags travel in one batch per message: one CE command per message
  and side (instead of one per staging chunk), no separate IV/tag read per chunk, one
  authentication per message (its fixed cost paid once). Unmitigated, every 2 MiB staging chunk
  is its own CE command on each side (its method carries the chunk's IVs/tags), the receiver
  reads the chunk's IVs and tags (32 B per crypto page, ``model.crypto_page_bytes``: 4 KiB on
  H100) before decrypting it, and verifies each
  chunk on its own;
* ``keymgmt``: keys rotated off the data path (next key derived and installed ahead, switched at
  a message boundary) and IV counters per message batch: no stall. Unmitigated, every message
  pays its share of a rotation stall (``keys.rotation_stall_ns`` over a key's lifetime of
  ``keys.usage_limit`` / ``keys.ivs_per_key``; expected value, not one discrete stall);
* ``parallel_auth`` (Fastrack fix 2 where it applies): parallel GPU authentication;
* ``overlap`` (Fastrack fix 3): stages pipelined chunk by chunk (decryption of chunk j overlaps
  the transfer of chunk j+1) instead of each stage waiting for the whole message.

Fastrack's fix 1 (direct communication) does not apply: the CPU never re-encrypts GPU-to-GPU data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastrack.schema import CopyDir, DepKind, OpKind
from replay.graph import NO_LANE, LaneType, OpGraph

from .collectives import Collectives, Messages, find, messages, require_link_model
from .copies import Chunks, chunk
from .editor import GraphEditor, copy_in_edges, lanes_required
from .kinds import DerivedKind

META_BYTES_PER_PAGE = 32  # per crypto page: 16 B tag + IV, 16 B aligned (open-gpu-kernel-modules uvm_conf_computing.h)
PROXY = "p2p_proxy"


@dataclass(frozen=True)
class P2POptions:
    batched_meta: bool = False
    keymgmt: bool = False
    parallel_auth: bool = False
    overlap: bool = False


@dataclass(frozen=True)
class P2PPlan:
    """What a transform did (for tests and reports)."""

    collectives: Collectives
    messages: Messages
    chunks: int


def add_proxy_lanes(graph: OpGraph, ranks) -> OpGraph:
    lanes = graph.lanes
    changed = False
    for r in sorted(set(int(x) for x in ranks)):
        if lanes.find(r, LaneType.SUBMIT, 0) == NO_LANE:
            lanes, _ = lanes.add(r, LaneType.SUBMIT, 0, f"rank{r}/{PROXY}")
            changed = True
    return graph.replace(lanes=lanes) if changed else graph


def transform_p2p(graph: OpGraph, model, opts: P2POptions, protocol: str = "cc-multi",
                  plan: list | None = None) -> OpGraph:
    """Encrypt every GPU-to-GPU message of ``graph``'s collectives (see the module docstring).
    ``plan``: a list that receives the :class:`P2PPlan` (optional)."""
    if not np.any(graph.kind == OpKind.COLLECTIVE):
        return graph
    require_link_model(model, protocol)
    g = model.add_lanes(graph)
    col = find(g, model)
    msg = messages(col) if len(col) else None
    if msg is None or len(msg) == 0:
        return g
    g = _without_barriers(add_proxy_lanes(g, g.rank[col.node]), col.node)
    ed = GraphEditor(g)
    ends = _Ends.of(g, model, col, msg)
    priority = _priorities(g, col, msg)
    ch = chunk(msg.nbytes, model.bounce_slot_bytes)
    cmd = _add_commands(ed, model, ends, priority, ch, opts.batched_meta)
    key = _add_key_rotation(ed, model, msg, ends, priority, ch, cmd, opts.keymgmt)
    stages = _add_stages(ed, model, msg, ends, priority, ch, opts)
    latency_out = np.int64(model.pcie_latency_ns(CopyDir.D2H))
    _link_stages(ed, ch, cmd, key, stages, opts, latency_out, np.int64(model.pcie_latency_ns(CopyDir.H2D)))
    # a message is forwarded only after what it carries was received and verified
    ed.add_edges(stages.received[msg.pre_msg], stages.encrypt[ch.first[msg.pre_of]], DepKind.DATA, 0)
    # the collective completes on a rank when its receipts are verified and its sends have left
    ed.add_edges(stages.received, ends.recv_node, DepKind.DATA, 0)
    ed.add_edges(stages.send[ch.last_of_copy()], ends.send_node, DepKind.DATA, latency_out)
    ed.dur[col.node] = 0
    if plan is not None:
        plan.append(P2PPlan(collectives=col, messages=msg, chunks=len(ch)))
    return ed.build()


def _without_barriers(graph: OpGraph, members: np.ndarray) -> OpGraph:
    """The collective members leave their barrier groups: the message DAG synchronises the ranks."""
    group = graph.group.copy()
    group[members] = -1
    return graph.replace(group=group)


def _pages(nbytes: np.ndarray, page_bytes: int) -> np.ndarray:
    """Crypto pages (one IV and tag each) of every size, at least one."""
    return np.maximum(1, -(-nbytes // page_bytes))


@dataclass(frozen=True)
class _Ends:
    """Per message: the collective node (the anchor) and the lanes of its sender and its receiver."""

    send_node: np.ndarray
    recv_node: np.ndarray
    send_ce: np.ndarray
    recv_ce: np.ndarray
    send_pcie: np.ndarray  # the sender's PCIe D2H lane
    recv_pcie: np.ndarray  # the receiver's PCIe H2D lane
    recv_auth: np.ndarray
    send_proxy: np.ndarray
    recv_proxy: np.ndarray

    @staticmethod
    def of(g: OpGraph, model, col: Collectives, msg: Messages) -> "_Ends":
        send_node, recv_node = col.node[msg.src], col.node[msg.dst]
        send_rank, recv_rank = g.rank[send_node].astype(np.int64), g.rank[recv_node].astype(np.int64)
        ends = _Ends(
            send_node=send_node, recv_node=recv_node,
            send_ce=model.lane_index(g, send_rank, LaneType.COPY_ENGINE),
            recv_ce=model.lane_index(g, recv_rank, LaneType.COPY_ENGINE),
            send_pcie=model.lane_index(g, send_rank, LaneType.PCIE_D2H),
            recv_pcie=model.lane_index(g, recv_rank, LaneType.PCIE_H2D),
            recv_auth=model.lane_index(g, recv_rank, LaneType.GPU_AUTH),
            send_proxy=model.lane_index(g, send_rank, LaneType.SUBMIT),
            recv_proxy=model.lane_index(g, recv_rank, LaneType.SUBMIT))
        for lane, what in ((ends.send_ce, "copy-engine"), (ends.recv_ce, "copy-engine"), (ends.send_pcie, "PCIe D2H"),
                           (ends.recv_pcie, "PCIe H2D"), (ends.recv_auth, "GPU authentication"),
                           (ends.send_proxy, PROXY)):
            lanes_required(lane, what)
        return ends


def _priorities(g: OpGraph, col: Collectives, msg: Messages) -> np.ndarray:
    """Per message: its order key on shared lanes (the engine serves a lane in visiting order):
    one key per instance for all its ranks (its earliest member's) plus the step, so that step s
    of every rank goes before step s+1 of any rank."""
    inst_key = np.full(len(col), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(inst_key, col.inst, g.order[col.node])
    return inst_key[msg.inst] + msg.step


@dataclass(frozen=True)
class _Commands:
    """The encrypted CE commands: one per chunk and side (unbatched) or per message and side."""

    of_chunk: np.ndarray  # per chunk: index of its command (into sender/receiver)
    sender: np.ndarray  # node per command, on the sender's proxy
    receiver: np.ndarray  # node per command, on the receiver's proxy


def _add_commands(ed: GraphEditor, model, ends: _Ends, priority: np.ndarray, ch: Chunks,
                  batched: bool) -> _Commands:
    """Created interleaved (sender, receiver) so a rank's proxy serves them in message order; a
    command can be pushed once the collective is launched."""
    of_chunk = ch.copy if batched else np.arange(len(ch), dtype=np.int64)
    message = np.arange(len(ch.first), dtype=np.int64) if batched else ch.copy  # per command
    anchors = np.stack([ends.send_node[message], ends.recv_node[message]], axis=1).ravel()
    lanes = np.stack([ends.send_proxy[message], ends.recv_proxy[message]], axis=1).ravel()
    submit_ns = np.int64(np.asarray(model.submit_ns(int(OpKind.MEMCPY))).item())
    nodes = ed.add_nodes(DerivedKind.P2P_SUBMIT, anchors, lanes, submit_ns, order=np.repeat(priority[message], 2))
    copy_in_edges(ed, anchors, nodes)
    return _Commands(of_chunk=of_chunk, sender=nodes[0::2], receiver=nodes[1::2])


def _add_key_rotation(ed: GraphEditor, model, msg: Messages, ends: _Ends, priority: np.ndarray, ch: Chunks,
                      cmd: _Commands, managed: bool) -> np.ndarray:
    """Per message: its share of a key-rotation stall, on the sender's copy engine after its first
    command (-1 where it has none, or with key management off the data path)."""
    key = np.full(len(msg), -1, np.int64)
    if managed:
        return key
    stall = np.asarray(model.key_rotation_ns(msg.nbytes, _pages(msg.nbytes, model.crypto_page_bytes)), np.int64)
    has = np.flatnonzero(stall > 0)
    key[has] = ed.add_nodes(DerivedKind.KEY_ROTATION, ends.send_node[has], ends.send_ce[has], stall[has],
                            msg.nbytes[has], order=priority[has])
    ed.add_edges(cmd.sender[cmd.of_chunk[ch.first[has]]], key[has], DepKind.DATA, 0)
    return key


@dataclass(frozen=True)
class _Stages:
    """Node per chunk of each stage (``meta``: -1 with batched IVs/tags) and, per message, the node
    that completes its receipt (its last authentication, or its one authentication when batched)."""

    encrypt: np.ndarray
    send: np.ndarray  # PCIe D2H on the sender
    meta: np.ndarray  # IV/tag read on the receiver
    receive: np.ndarray  # PCIe H2D on the receiver
    decrypt: np.ndarray
    auth: np.ndarray  # per chunk (unbatched) or per message (batched)
    received: np.ndarray  # per message


def _add_stages(ed: GraphEditor, model, msg: Messages, ends: _Ends, priority: np.ndarray, ch: Chunks,
                opts: P2POptions) -> _Stages:
    copy, nb = ch.copy, ch.nbytes

    def stage(kind, anchor, lane, dur):
        return ed.add_nodes(kind, anchor[copy], lane[copy], dur, nb, order=priority[copy])

    encrypt = stage(DerivedKind.CE_ENCRYPT, ends.send_node, ends.send_ce, model.ce_crypto_ns(nb))
    send = stage(DerivedKind.PCIE, ends.send_node, ends.send_pcie, model.pcie_ns(nb, CopyDir.D2H))
    meta = np.full(len(ch), -1, np.int64)
    if not opts.batched_meta:
        meta_bytes = _pages(nb, model.crypto_page_bytes) * META_BYTES_PER_PAGE
        meta = stage(DerivedKind.P2P_META, ends.recv_node, ends.recv_pcie, model.pcie_ns(meta_bytes, CopyDir.H2D))
    receive = stage(DerivedKind.PCIE, ends.recv_node, ends.recv_pcie, model.pcie_ns(nb, CopyDir.H2D))
    decrypt = stage(DerivedKind.CE_DECRYPT, ends.recv_node, ends.recv_ce, model.ce_crypto_ns(nb))
    if opts.batched_meta:  # one authentication per message
        auth = ed.add_nodes(DerivedKind.GPU_AUTH, ends.recv_node, ends.recv_auth,
                            model.auth_ns(msg.nbytes, opts.parallel_auth), msg.nbytes, order=priority)
        received = auth
    else:
        auth = stage(DerivedKind.GPU_AUTH, ends.recv_node, ends.recv_auth, model.auth_ns(nb, opts.parallel_auth))
        received = auth[ch.last_of_copy()]
    return _Stages(encrypt=encrypt, send=send, meta=meta, receive=receive, decrypt=decrypt, auth=auth,
                   received=received)


def _link_stages(ed: GraphEditor, ch: Chunks, cmd: _Commands, key: np.ndarray, stages: _Stages, opts: P2POptions,
                 latency_out: np.int64, latency_in: np.int64) -> None:
    """DATA edges of each message: sender command -> (key) -> encrypt -> D2H; receiver command ->
    (IV/tag read) -> H2D -> decrypt -> authenticate."""
    data = DepKind.DATA
    later = np.flatnonzero(ch.j > 0)  # chunks after the first of their message
    last = ch.last_of_copy()[ch.copy]

    def chain(stage):  # chunk j after chunk j-1 of the same stage
        ed.add_edges(stage[later - 1], stage[later], data, 0)

    def after(dst, src, lag=0):  # chunk j of dst after chunk j of src (overlap) or after src's last chunk
        ed.add_edges(src if opts.overlap else src[last], dst, data, lag)

    ed.add_edges(cmd.sender[cmd.of_chunk], stages.encrypt, data, 0)
    rotated = np.flatnonzero(key >= 0)
    ed.add_edges(key[rotated], stages.encrypt[ch.first[rotated]], data, 0)
    chain(stages.encrypt)
    after(stages.send, stages.encrypt)
    chain(stages.send)
    ed.add_edges(cmd.receiver[cmd.of_chunk], stages.receive, data, 0)
    after(stages.receive, stages.send, latency_out)
    chain(stages.receive)
    if not opts.batched_meta:
        ed.add_edges(cmd.receiver[cmd.of_chunk], stages.meta, data, 0)
        after(stages.meta, stages.send, latency_out)
        ed.add_edges(stages.meta, stages.decrypt, data, latency_in)
    after(stages.decrypt, stages.receive, latency_in)
    chain(stages.decrypt)
    if opts.batched_meta:
        ed.add_edges(stages.decrypt[ch.last_of_copy()], stages.auth, data, 0)
    else:
        after(stages.auth, stages.decrypt)
        chain(stages.auth)


__all__ = ["P2POptions", "P2PPlan", "transform_p2p", "add_proxy_lanes", "META_BYTES_PER_PAGE"]
