"""Collectives of a multi-rank graph: which they are, how big, and what messages they send.

A *collective instance* is one barrier group of COLLECTIVE nodes (one member per rank, matched
across ranks by the importer through COLLECTIVE deps, or created by :mod:`replay.whatif.dataparallel`).
This module

* finds the instances and checks them: in a graph of several ranks a collective without
  partners, or a group with two members on one rank, is a mismatch and raises
  :class:`~fastrack_core.errors.GraphError` naming the ranks and the collective (it is never replayed
  silently as a lone kernel, and never waits forever);
* recovers each instance's type and algorithm from its kernel name (the graph has no
  ``coll_type`` column): NCCL names its kernels by primitive and algorithm
  (``ncclKernel_AllReduce_RING_LL_Sum_float``, ``ncclDevKernel_AllGather_RING_LL``), and
  record-function names are ``nccl:<type>``; NCCL runs all-to-all as grouped ``SendRecv``, so a
  SendRecv kernel on more than two ranks is an all-to-all;
* gives the plaintext time of an instance on the model's topology (:func:`plain_ns`): for a
  per-rank size ``S`` on ``N`` GPUs with link bandwidth ``bw`` and per-step latency ``lat``

  ==============  =============================  ==================
  type            bytes each GPU sends            steps (latencies)
  ==============  =============================  ==================
  all_reduce      ring: 2(N-1)/N S; tree: 2 S     2(N-1); tree 2 ceil(log2 N)
  all_gather      (N-1) S  (S = input per rank)  N-1
  reduce_scatter  (N-1)/N S                      N-1
  broadcast       S (pipelined chain)            N-1
  reduce          S (pipelined chain)            N-1
  send_recv       S                              1
  all_to_all      (N-1)/N S (all pairs at once)  1
  ==============  =============================  ==================

  time = ceil(bytes / bw) + steps x lat. Unknown types count as all-reduce;
* expands an instance into point-to-point *messages* (:func:`messages`), the unit the TEE
  protocols encrypt: ring all-reduce = 2(N-1) steps in which every GPU sends one chunk of about
  S/N to its successor, each step after the GPU received the previous one; tree = binary tree,
  up then down, S per edge; all-gather / reduce-scatter = N-1 ring steps; broadcast / reduce = a
  chain from the lowest rank; all-to-all = N-1 messages of S/N per GPU, all at once; send/recv =
  one message each way.

A collective whose trace carries no size (``bytes = 0``, e.g. Kineto traces without ``In msg
nelems`` or Nsight exports) gets the size that makes its plaintext time on the topology equal
its measured duration (``inferred``); docs/multi-gpu.md discusses what that means.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fastrack_core.errors import GraphError, PluginError
from fastrack_core.schema import OpKind
from replay.graph import OpGraph

TYPES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "send_recv", "all_to_all")
_CODE = {t: i for i, t in enumerate(TYPES)}
RING, TREE = 0, 1

_NAME_PATTERNS = (  # (substring of the lower-cased, '_'-less name, type); first match wins
    ("allreduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("reducescatter", "reduce_scatter"),
    ("alltoall", "all_to_all"),
    ("sendrecv", "send_recv"),
    ("broadcast", "broadcast"),
    ("reduce", "reduce"),
    ("send", "send_recv"),
    ("recv", "send_recv"),
)


def type_of_name(name: str) -> tuple[str, int | None]:
    """(collective type, algorithm RING/TREE or None when the name does not say) of a kernel name."""
    low = name.lower()
    flat = low.replace("_", "").replace(" ", "")
    ctype = "all_reduce"
    for pat, t in _NAME_PATTERNS:
        if pat in flat:
            ctype = t
            break
    algo = TREE if "_tree" in low else RING if "_ring" in low else None
    return ctype, algo


def require_link_model(model, protocol: str) -> None:
    """Raise unless ``model`` prices GPU-to-GPU links (:attr:`replay.model.HardwareModel.prices_links`)."""
    if not model.prices_links:
        raise PluginError(f"protocol '{protocol}' needs a hardware model that prices GPU-to-GPU links "
                          f"(link_ns, link_latency_ns, link_gb_s); model '{model.name}' does not")


@dataclass(frozen=True)
class Collectives:
    """The collective instances of a graph. Members are sorted by (instance, rank)."""

    node: np.ndarray  # int64 per member: graph node
    inst: np.ndarray  # int64 per member: instance index
    pos: np.ndarray  # int64 per member: position in its instance (0 = lowest rank)
    first: np.ndarray  # int64 per instance: index of its first member
    n: np.ndarray  # int64 per instance: members (GPUs)
    ctype: np.ndarray  # int64 per instance: index into TYPES
    algo: np.ndarray  # int64 per instance: RING or TREE
    nbytes: np.ndarray  # int64 per instance: bytes per rank (S)
    inferred: np.ndarray  # bool per instance: S was inferred from the measured duration

    def __len__(self) -> int:
        return int(self.n.shape[0])

    def type_label(self, i: int) -> str:
        return TYPES[int(self.ctype[i])]


def _empty() -> Collectives:
    z = np.zeros(0, np.int64)
    return Collectives(z, z, z, z, z, z, z, z, np.zeros(0, bool))


def wire(ctype: np.ndarray, algo: np.ndarray, n: np.ndarray, nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bytes each GPU sends, number of latency steps) per instance, by the table of the module doc."""
    ctype, algo, n, s = (np.asarray(a, np.int64) for a in (ctype, algo, n, nbytes))
    num = np.ones_like(n)
    den = np.ones_like(n)
    steps = np.ones_like(n)
    log2 = np.array([math.ceil(math.log2(max(int(k), 1))) for k in n.tolist()], np.int64)
    ar = ctype == _CODE["all_reduce"]
    ring_ar = ar & (algo == RING)
    num = np.where(ring_ar, 2 * (n - 1), num)
    den = np.where(ring_ar, n, den)
    steps = np.where(ring_ar, 2 * (n - 1), steps)
    tree_ar = ar & (algo == TREE)
    num = np.where(tree_ar, 2, num)
    steps = np.where(tree_ar, 2 * log2, steps)
    m = ctype == _CODE["all_gather"]
    num, steps = np.where(m, n - 1, num), np.where(m, n - 1, steps)
    m = (ctype == _CODE["reduce_scatter"]) | (ctype == _CODE["all_to_all"])
    num, den = np.where(m, n - 1, num), np.where(m, n, den)
    steps = np.where(ctype == _CODE["reduce_scatter"], n - 1, steps)
    m = (ctype == _CODE["broadcast"]) | (ctype == _CODE["reduce"])
    steps = np.where(m, n - 1, steps)
    single = n <= 1
    wire_bytes = np.where(single, 0, -((-(s * num)) // np.maximum(den, 1)))
    return wire_bytes.astype(np.int64), np.where(single, 0, steps).astype(np.int64)


def plain_ns(col: Collectives, model) -> np.ndarray:
    """Plaintext time of every instance on the model's topology (int64 ns per instance)."""
    out = np.zeros(len(col), np.int64)
    wb, steps = wire(col.ctype, col.algo, col.n, col.nbytes)
    for k in np.unique(col.n).tolist():
        m = col.n == k
        out[m] = np.asarray(model.link_ns(wb[m], int(k)), np.int64) + steps[m] * np.int64(model.link_latency_ns(int(k)))
    return out


def find(graph: OpGraph, model=None) -> Collectives:
    """The collective instances of ``graph`` (checked; sizes inferred where the trace has none)."""
    is_coll = np.flatnonzero(graph.kind == OpKind.COLLECTIVE)
    if is_coll.size == 0:
        return _empty()
    ranks = np.unique(graph.rank)
    lone = is_coll[graph.group[is_coll] < 0]
    if lone.size and ranks.size > 1:
        i = int(lone[0])
        others = sorted(set(ranks.tolist()) - {int(graph.rank[i])})
        more = f" ({lone.size} such collectives)" if lone.size > 1 else ""
        raise GraphError(
            f"mismatched collectives: {graph.node_label(i)} on rank {int(graph.rank[i])} has no partner on ranks "
            f"{_ranks(others)}{more}; every rank of a multi-rank trace must issue the same collectives "
            "(same coll_group, coll_type and coll_seq)")
    members = is_coll[graph.group[is_coll] >= 0]
    if members.size == 0:
        return _empty()
    o = np.lexsort((graph.rank[members], graph.group[members]))
    node = members[o].astype(np.int64)
    gid = graph.group[node]
    rk = graph.rank[node].astype(np.int64)
    new = np.r_[True, gid[1:] != gid[:-1]]
    inst = np.cumsum(new) - 1
    first = np.flatnonzero(new).astype(np.int64)
    n = np.diff(np.r_[first, node.size]).astype(np.int64)
    pos = np.arange(node.size, dtype=np.int64) - first[inst]
    dup = np.flatnonzero(~new & (np.r_[False, rk[1:] == rk[:-1]]))
    if dup.size:
        i = int(node[dup[0]])
        raise GraphError(
            f"mismatched collectives: {graph.node_label(i)} and {graph.node_label(int(node[dup[0] - 1]))} are both "
            f"members of one collective on rank {int(rk[dup[0]])}; each rank takes part once")
    C = first.size
    ctype = np.zeros(C, np.int64)
    algo = np.full(C, -1, np.int64)
    cache: dict[int, tuple[str, int | None]] = {}
    for c in range(C):
        labels = set()
        for m in node[first[c]: first[c] + n[c]].tolist():
            nm = int(graph.name[m])
            if nm not in cache:
                cache[nm] = type_of_name(graph.names[nm])
            labels.add(cache[nm])
        types = {t for t, _ in labels}
        if len(types) > 1:
            raise GraphError(
                f"mismatched collectives: members of one collective have different types ({', '.join(sorted(types))}) "
                f"on ranks {_ranks(rk[first[c]: first[c] + n[c]].tolist())}, first {graph.node_label(int(node[first[c]]))}")
        t = types.pop()
        if t == "send_recv" and n[c] > 2:
            t = "all_to_all"  # NCCL runs all-to-all as grouped send/recv
        ctype[c] = _CODE[t]
        algos = {a for _, a in labels if a is not None}
        algo[c] = algos.pop() if len(algos) == 1 else -1
    default = TREE if (model is not None and model.default_allreduce == "tree") else RING
    algo = np.where(algo < 0, default, algo)
    nbytes = np.zeros(C, np.int64)
    np.maximum.at(nbytes, inst, np.maximum(graph.bytes[node], 0))
    inferred = nbytes == 0
    if inferred.any() and model is not None and model.prices_links:
        dur = np.zeros(C, np.int64)
        np.maximum.at(dur, inst, graph.dur[node])
        nbytes = np.where(inferred, _infer_bytes(ctype, algo, n, dur, model), nbytes)
    return Collectives(node=node, inst=inst.astype(np.int64), pos=pos, first=first, n=n, ctype=ctype, algo=algo,
                       nbytes=nbytes.astype(np.int64), inferred=inferred)


def _infer_bytes(ctype, algo, n, dur, model) -> np.ndarray:
    """Per-rank size whose plaintext time on the topology equals ``dur`` (0 when it cannot)."""
    _, steps = wire(ctype, algo, n, np.zeros_like(n))
    out = np.zeros(n.shape[0], np.int64)
    for c in range(n.shape[0]):
        k = int(n[c])
        if k <= 1:
            continue
        ratio = float(wire(ctype[c:c + 1], algo[c:c + 1], n[c:c + 1], np.array([10**9]))[0][0]) / 1e9
        left = int(dur[c]) - int(steps[c]) * int(model.link_latency_ns(k))
        if left > 0 and ratio > 0:
            out[c] = int(left * model.link_gb_s(k) / ratio)
    return out


def _ranks(ranks) -> str:
    ranks = sorted(int(r) for r in ranks)
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))


def price_plain(graph: OpGraph, model) -> OpGraph:
    """``graph`` with every collective instance priced as plaintext on the model's topology (the
    members keep their barrier group: NCCL kernels of all ranks run together). Unchanged when the
    graph has no collectives or the model prices no links."""
    if not np.any(graph.kind == OpKind.COLLECTIVE) or not model.prices_links:
        return graph
    col = find(graph, model)
    if len(col) == 0:
        return graph
    dur = graph.dur.copy()
    dur[col.node] = plain_ns(col, model)[col.inst]
    return graph.replace(dur=dur)


# ------------------------------------------------------------------------------------ messages


@dataclass(frozen=True)
class Messages:
    """Point-to-point messages of the collective instances, in (instance, step, sender) order."""

    inst: np.ndarray  # int64: instance
    step: np.ndarray  # int64: step within the instance (messages of one step may run together)
    src: np.ndarray  # int64: sender's member index (into Collectives.node)
    dst: np.ndarray  # int64: receiver's member index
    nbytes: np.ndarray  # int64
    pre_msg: np.ndarray  # int64: message whose *receipt* (at this sender) must complete first ...
    pre_of: np.ndarray  # int64: ... for message pre_of[i] (pairs; a message may have 0..2)

    def __len__(self) -> int:
        return int(self.inst.shape[0])


def messages(col: Collectives) -> Messages:
    """Expand every instance into its messages (see the module docstring)."""
    parts = []
    for c in range(len(col)):
        parts.append(_instance_messages(int(col.ctype[c]), int(col.algo[c]), int(col.n[c]), int(col.nbytes[c])))
    inst, step, src, dst, nb, pre_m, pre_o = [], [], [], [], [], [], []
    base = 0
    for c, (st, s, d, b, pm, po) in enumerate(parts):
        k = len(st)
        inst.append(np.full(k, c, np.int64))
        step.append(np.asarray(st, np.int64))
        src.append(col.first[c] + np.asarray(s, np.int64))
        dst.append(col.first[c] + np.asarray(d, np.int64))
        nb.append(np.asarray(b, np.int64))
        pre_m.append(base + np.asarray(pm, np.int64))
        pre_o.append(base + np.asarray(po, np.int64))
        base += k
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64)  # noqa: E731
    return Messages(inst=cat(inst), step=cat(step), src=cat(src), dst=cat(dst), nbytes=cat(nb), pre_msg=cat(pre_m),
                    pre_of=cat(pre_o))


def _split(total: int, parts: int) -> list[int]:
    q, r = divmod(total, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def _instance_messages(ctype: int, algo: int, n: int, s: int):
    """(step, src pos, dst pos, bytes, prerequisite pairs) of one instance, messages in order."""
    st, src, dst, nb, pre_m, pre_o = [], [], [], [], [], []
    if n <= 1:
        return st, src, dst, nb, pre_m, pre_o
    t = TYPES[ctype]
    last_recv: dict[int, list[int]] = {}  # position -> messages it received in the previous step

    def add(step, a, b, nbytes, after=()):
        idx = len(st)
        st.append(step), src.append(a), dst.append(b), nb.append(int(nbytes))
        for p in after:
            pre_m.append(p), pre_o.append(idx)
        return idx

    if t == "all_reduce" and algo == TREE:
        parent = lambda i: (i - 1) // 2  # noqa: E731
        depth = [0] * n
        for i in range(1, n):
            depth[i] = depth[parent(i)] + 1
        up: dict[int, int] = {}
        got: dict[int, list[int]] = {i: [] for i in range(n)}
        for d in range(max(depth), 0, -1):  # reduce up the tree, deepest level first
            for i in range(n):
                if depth[i] == d:
                    up[i] = add(max(depth) - d, i, parent(i), s, got[i])
                    got[parent(i)].append(up[i])
        top = max(depth)
        down_got: dict[int, list[int]] = {0: got[0]}
        for d in range(0, max(depth)):  # broadcast down
            for i in range(1, n):
                if depth[i] == d + 1:
                    p = parent(i)
                    down_got[i] = [add(top + d, p, i, s, down_got[p])]
    elif t in ("all_reduce", "reduce_scatter", "all_gather"):
        if t == "all_reduce":
            steps, sizes = 2 * (n - 1), _split(s, n)
        elif t == "reduce_scatter":
            steps, sizes = n - 1, _split(s, n)
        else:
            steps, sizes = n - 1, [s] * n
        for k in range(steps):
            now: dict[int, list[int]] = {}
            for i in range(n):
                j = (i + 1) % n
                m = add(k, i, j, sizes[(i - k) % n], last_recv.get(i, ()))
                now.setdefault(j, []).append(m)
            last_recv = now
    elif t in ("broadcast", "reduce"):
        prev: list[int] = []
        for k in range(n - 1):
            prev = [add(k, k, k + 1, s, prev)]
    elif t == "send_recv":  # two ranks exchange (NCCL's SendRecv kernel runs on both)
        add(0, 0, 1, s)
        add(0, 1, 0, s)
    else:  # all_to_all: every GPU sends S/N to each other GPU, all at once
        sizes = _split(s, n)
        for d in range(1, n):
            for i in range(n):
                add(d - 1, i, (i + d) % n, sizes[(i + d) % n])
    return st, src, dst, nb, pre_m, pre_o


__all__ = ["TYPES", "RING", "TREE", "Collectives", "Messages", "find", "messages", "plain_ns", "price_plain",
           "type_of_name", "wire", "require_link_model"]
