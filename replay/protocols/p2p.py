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
  reads the chunk's IVs and tags (32 B per 4 KiB page) before decrypting it, and verifies each
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

from .cc import copy_in_edges
from .collectives import Collectives, Messages, find, messages, require_link_model
from .copies import chunk
from .editor import GraphEditor, lanes_required
from .kinds import DerivedKind

PAGE_BYTES = 4096  # one IV and one 16 B tag per 4 KiB page (open-gpu-kernel-modules uvm_conf_computing.h)
META_BYTES_PER_PAGE = 32  # 16 B tag + IV, 16 B aligned (same file)
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
    M = col.node
    g = add_proxy_lanes(g, g.rank[M])
    group = g.group.copy()
    group[M] = -1
    g = g.replace(group=group)
    ed = GraphEditor(g)

    sM, dM = M[msg.src], M[msg.dst]  # anchors: sender's and receiver's collective node
    sR, dR = g.rank[sM].astype(np.int64), g.rank[dM].astype(np.int64)
    ce_s = model.lane_index(g, sR, LaneType.COPY_ENGINE)
    ce_d = model.lane_index(g, dR, LaneType.COPY_ENGINE)
    out_l = model.lane_index(g, sR, LaneType.PCIE_D2H)
    in_l = model.lane_index(g, dR, LaneType.PCIE_H2D)
    auth_l = model.lane_index(g, dR, LaneType.GPU_AUTH)
    px_s = model.lane_index(g, sR, LaneType.SUBMIT)
    px_d = model.lane_index(g, dR, LaneType.SUBMIT)
    for lane, what in ((ce_s, "copy-engine"), (ce_d, "copy-engine"), (out_l, "PCIe D2H"), (in_l, "PCIe H2D"),
                       (auth_l, "GPU authentication"), (px_s, PROXY)):
        lanes_required(lane, what)

    # priority on shared lanes (the engine serves a lane in visiting order): one key per instance
    # for all its ranks (its earliest member's), plus the step, so that step s of every rank goes
    # before step s+1 of any rank
    inst_key = np.full(len(col), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(inst_key, col.inst, g.order[M])
    key_m = inst_key[msg.inst] + msg.step

    ch = chunk(msg.nbytes, model.bounce_slot_bytes)
    c, j = ch.copy, ch.j
    nb = ch.nbytes
    K = len(ch)
    Mn = len(msg)
    lat_out = np.int64(model.pcie_latency_ns(CopyDir.D2H))
    lat_in = np.int64(model.pcie_latency_ns(CopyDir.H2D))
    sub_ns = np.int64(np.asarray(model.submit_ns(int(OpKind.MEMCPY))).item())
    D = DepKind.DATA

    # --- encrypted CE commands: per chunk and side (unbatched) or per message and side (batched);
    # created interleaved (sender, receiver) so a rank's proxy serves them in message order
    unit_of_chunk = c if opts.batched_meta else np.arange(K, dtype=np.int64)
    unit_msg = np.arange(Mn, dtype=np.int64) if opts.batched_meta else c
    anchors = np.stack([sM[unit_msg], dM[unit_msg]], axis=1).ravel()
    lanes = np.stack([px_s[unit_msg], px_d[unit_msg]], axis=1).ravel()
    subs = ed.add_nodes(DerivedKind.P2P_SUBMIT, anchors, lanes, sub_ns, order=np.repeat(key_m[unit_msg], 2))
    sub_s, sub_r = subs[0::2], subs[1::2]
    copy_in_edges(ed, anchors, subs)  # a command can be pushed once the collective is launched

    # --- key rotation share, on the sender's copy engine before the message's first encryption
    key = np.full(Mn, -1, np.int64)
    if not opts.keymgmt:
        kdur = np.asarray(model.key_rotation_ns(msg.nbytes, np.maximum(1, -(-msg.nbytes // PAGE_BYTES))), np.int64)
        has = np.flatnonzero(kdur > 0)
        key[has] = ed.add_nodes(DerivedKind.KEY_ROTATION, sM[has], ce_s[has], kdur[has], msg.nbytes[has],
                                order=key_m[has])
        first_unit = unit_of_chunk[ch.first[has]]
        ed.add_edges(sub_s[first_unit], key[has], D, 0)

    def stage(kind, anchor_m, lane_m, dur):
        return ed.add_nodes(kind, anchor_m[c], lane_m[c], dur, nb, order=key_m[c])

    enc = stage(DerivedKind.CE_ENCRYPT, sM, ce_s, model.ce_crypto_ns(nb))
    out = stage(DerivedKind.PCIE, sM, out_l, model.pcie_ns(nb, CopyDir.D2H))
    meta = np.full(K, -1, np.int64)
    if not opts.batched_meta:
        pages = np.maximum(1, -(-nb // PAGE_BYTES))
        meta = stage(DerivedKind.P2P_META, dM, in_l, model.pcie_ns(pages * META_BYTES_PER_PAGE, CopyDir.H2D))
    inp = stage(DerivedKind.PCIE, dM, in_l, model.pcie_ns(nb, CopyDir.H2D))
    dec = stage(DerivedKind.CE_DECRYPT, dM, ce_d, model.ce_crypto_ns(nb))
    if opts.batched_meta:  # one authentication per message
        auth_m = ed.add_nodes(DerivedKind.GPU_AUTH, dM, auth_l, model.auth_ns(msg.nbytes, opts.parallel_auth),
                              msg.nbytes, order=key_m)
        recv_done = auth_m
    else:
        auth = stage(DerivedKind.GPU_AUTH, dM, auth_l, model.auth_ns(nb, opts.parallel_auth))
        recv_done = auth[ch.last_of_copy()]

    prev = np.where(j > 0, np.arange(K) - 1, -1)
    last = ch.last_of_copy()[c]
    nz = np.flatnonzero(j > 0)

    def chain(x):
        ed.add_edges(x[prev[nz]], x[nz], D, 0)

    def after(dst, src, lag=0):  # chunk j of dst after chunk j of src (overlap) or src's last chunk
        ed.add_edges(src if opts.overlap else src[last], dst, D, lag)

    # sender: command -> (key) -> encrypt -> D2H
    ed.add_edges(sub_s[unit_of_chunk], enc, D, 0)
    first_chunk = ch.first
    kh = np.flatnonzero(key >= 0)
    ed.add_edges(key[kh], enc[first_chunk[kh]], D, 0)
    chain(enc)
    after(out, enc)
    chain(out)
    # receiver: command -> (IV/tag read) -> H2D -> decrypt -> authenticate
    ed.add_edges(sub_r[unit_of_chunk], inp, D, 0)
    after(inp, out, lat_out)
    chain(inp)
    if not opts.batched_meta:
        ed.add_edges(sub_r[unit_of_chunk], meta, D, 0)
        after(meta, out, lat_out)
        ed.add_edges(meta, dec, D, lat_in)
    after(dec, inp, lat_in)
    chain(dec)
    if opts.batched_meta:
        ed.add_edges(dec[ch.last_of_copy()], auth_m, D, 0)
    else:
        after(auth, dec)
        chain(auth)

    # a message is forwarded only after what it carries was received and verified
    ed.add_edges(recv_done[msg.pre_msg], enc[first_chunk[msg.pre_of]], D, 0)
    # the collective completes on a rank when its receipts are verified and its sends have left
    ed.add_edges(recv_done, dM, D, 0)
    ed.add_edges(out[ch.last_of_copy()], sM, D, lat_out)
    ed.dur[M] = 0
    if plan is not None:
        plan.append(P2PPlan(collectives=col, messages=msg, chunks=K))
    return ed.build()


__all__ = ["P2POptions", "P2PPlan", "transform_p2p", "add_proxy_lanes", "PAGE_BYTES", "META_BYTES_PER_PAGE"]
