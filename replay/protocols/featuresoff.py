"""Features that confidential computing switches off, as graph transforms (docs/protocols.md,
"Features CC switches off").

A CC mode does more than encrypt transfers: some platform features stop working, and a workload
falls back to a slower path. Each :class:`Feature` here is one such fact with its public source
and the transform that gives a graph without it; every CC protocol (``baseline``, ``fastrack*``
and their options, :mod:`.multigpu`; ``ppcie``) applies :data:`CC_OFF` to the trace's graph before
its own data path. ``none`` keeps every feature; ``tee-io`` keeps registered memory and keeps
multicast only where the preset says so (``tee_io.multicast``).

* ``multicast``: the driver reports no NVLink multicast under CC, so NVLS all-reduce (NCCL's
  NVLink SHARP algorithm, and the symmetric-memory / fused all-reduces built on multimem) is
  unavailable ([S62]). The no-TEE reference prices an all-reduce of known size inside one
  NVSwitch node as NVLS where that is faster than the ring (NCCL's tuner picks the faster
  algorithm) or where the trace's kernel is an NVLS one (:func:`price_reference`); under CC the
  transform renames NVLS kernels to NCCL's ring kernel, and the CC protocols price the ring (or
  the tree a trace names). An all-reduce whose size was inferred from its measured duration keeps
  that duration under the reference (its algorithm is already in the measurement).
* ``host-register``: ``cudaHostRegister`` fails under CC ([S64]), so memory a program pinned by
  registering it stays pageable; the transform marks the pinned copies of such memory pageable
  (which copies those are is the preset's ``features.registered_pinned`` rule: a trace does not
  say how its pinned memory was allocated). Under the CC data path this matters where pinned and
  pageable differ: Fastrack's direct path (``direct.h2d = "pinned"``) and the pageable staging
  copy of a direct copy.

Documented, with no transform (nothing in a replay graph to change): CUDA IPC is not supported in
PPCIe mode ([S65]), which switches off IPC-based custom all-reduce kernels of serving engines;
the replay prices every all-reduce as NCCL's, so there is no IPC path to remove.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from fastrack_core.schema import CopyDir, HostMem, OpKind
from replay.graph import OpGraph

from .collectives import TYPES, Collectives, find, plain_ns, price_plain, type_of_name

_NVLS = re.compile(r"nvls(tree)?", re.IGNORECASE)
_ALL_REDUCE = TYPES.index("all_reduce")


@dataclass(frozen=True)
class Feature:
    """A platform feature a CC mode switches off."""

    name: str
    what: str  # what is lost and what the workload falls back to
    source: str  # docs/sources.md entry and the public reference
    off: Callable[[OpGraph, object], OpGraph]  # the graph without the feature (a pure function)


# ------------------------------------------------------------------------------ multicast (NVLS)


def is_nvls_name(name: str) -> bool:
    """Is this an NVLS collective kernel (``..._NVLS_...``, ``NVLSTree``)?"""
    return _NVLS.search(name) is not None


def multicast_off(graph: OpGraph, model=None) -> OpGraph:
    """``graph`` with every NVLS all-reduce kernel renamed to NCCL's ring kernel (``NVLS`` /
    ``NVLSTree`` -> ``RING`` in its name): without multicast NCCL runs the ring. Unchanged (the
    same object) when no collective has an NVLS name."""
    coll = np.flatnonzero(graph.kind == OpKind.COLLECTIVE)
    if coll.size == 0:
        return graph
    names = list(graph.names)
    used = np.unique(graph.name[coll]).tolist()
    remap = {}
    for i in used:
        nm = names[int(i)]
        if is_nvls_name(nm) and type_of_name(nm)[0] == "all_reduce":
            new = _NVLS.sub("RING", nm)
            if new not in names:
                names.append(new)
            remap[int(i)] = names.index(new)
    if not remap:
        return graph
    name = graph.name.copy()
    for old, new in remap.items():
        name[coll[graph.name[coll] == old]] = new
    return graph.replace(name=name, names=tuple(names))


def _named(graph: OpGraph, col: Collectives) -> tuple[np.ndarray, np.ndarray]:
    """Per instance: (its kernel names give no algorithm, one of them is an NVLS kernel)."""
    unnamed = np.ones(len(col), bool)
    nvls = np.zeros(len(col), bool)
    cache: dict[int, tuple[bool, bool]] = {}
    for c in range(len(col)):
        for m in col.node[col.first[c]: col.first[c] + col.n[c]].tolist():
            i = int(graph.name[m])
            if i not in cache:
                nm = graph.names[i]
                cache[i] = (is_nvls_name(nm), type_of_name(nm)[1] is not None)
            is_nvls, has_algo = cache[i]
            nvls[c] |= is_nvls
            unnamed[c] &= not has_algo
    return unnamed & ~nvls, nvls


def nvls_instances(graph: OpGraph, col: Collectives, model, plain: np.ndarray) -> np.ndarray:
    """Per instance: the NVLS time where the reference runs it as NVLS, else -1. Candidates: an
    all-reduce of known size on 2..gpus_per_node GPUs of an NVSwitch node with multicast
    (``model.nvls_available``) whose trace names no other algorithm; it runs NVLS when its kernel
    is an NVLS one, or when NVLS is faster than ``plain`` (NCCL's tuner picks the faster)."""
    out = np.full(len(col), -1, np.int64)
    if not hasattr(model, "nvls_available") or len(col) == 0:
        return out
    unnamed, named_nvls = _named(graph, col)
    cand = (col.ctype == _ALL_REDUCE) & ~col.inferred & (unnamed | named_nvls)
    for c in np.flatnonzero(cand).tolist():
        k = int(col.n[c])
        if not model.nvls_available(k):
            continue
        t = int(np.asarray(model.nvls_allreduce_ns(col.nbytes[c:c + 1], k))[0])
        if named_nvls[c] or t < int(plain[c]):
            out[c] = t
    return out


def price_reference(graph: OpGraph, model) -> OpGraph:
    """The no-TEE reference's collectives: :func:`.collectives.price_plain`, with each all-reduce
    that NVLS takes (:func:`nvls_instances`) priced as NVLS. Unchanged where the model offers no
    NVLS (a preset without ``[features]``, ``features.nvls = false``, ``topology.link = "pcie"``)."""
    g = price_plain(graph, model)
    if not (model.prices_links and hasattr(model, "nvls_available")) or not np.any(g.kind == OpKind.COLLECTIVE):
        return g
    col = find(g, model)
    if len(col) == 0:
        return g
    t = nvls_instances(g, col, model, plain_ns(col, model))
    use = t >= 0
    if not use.any():
        return g
    dur = g.dur.copy()
    member = use[col.inst]
    dur[col.node[member]] = t[col.inst[member]]
    return g.replace(dur=dur)


# ------------------------------------------------------------------------ registered host memory


def host_register_off(graph: OpGraph, model=None) -> OpGraph:
    """``graph`` with the pinned H2D/D2H copies of registered memory marked pageable (which ones:
    ``model.registered_pinned()``: "all" or "none"; "none" and a model without the rule change
    nothing and return the same object)."""
    rule = getattr(model, "registered_pinned", None)
    if rule is None or rule() != "all":
        return graph
    sel = (graph.kind == OpKind.MEMCPY) & ((graph.copy_dir == CopyDir.H2D) | (graph.copy_dir == CopyDir.D2H)) & \
        (graph.host_mem == HostMem.PINNED)
    if not sel.any():
        return graph
    host_mem = graph.host_mem.copy()
    host_mem[sel] = HostMem.PAGEABLE
    return graph.replace(host_mem=host_mem)


MULTICAST = Feature(
    "multicast",
    "NVLink multicast: NVLS all-reduce and the multimem (symmetric-memory, fused) all-reduces; without it an "
    "all-reduce inside an NVSwitch node runs NCCL's ring (the no-TEE reference takes NVLS where it is faster)",
    "[S62] the driver reports no multicast support under CC (sgl-project/sglang PR #30364, flashinfer-ai/flashinfer "
    "PR #3993); NVLS figures [S63]",
    multicast_off)
HOST_REGISTER = Feature(
    "host-register",
    "cudaHostRegister: memory pinned by registering it stays pageable (rule: features.registered_pinned)",
    "[S64] vllm-project/vllm #55428: cudaHostRegister fails with error 801 at every size under CC (H200, TDX); "
    "NVIDIA R580 release notes list it as not allowed in CC mode",
    host_register_off)

FEATURES = (MULTICAST, HOST_REGISTER)
CC_OFF = FEATURES  # what every CC protocol switches off


def features_off(graph: OpGraph, model, features=CC_OFF) -> OpGraph:
    """``graph`` without ``features`` (each transform in turn; the input is never modified)."""
    for f in features:
        graph = f.off(graph, model)
    return graph


def features_off_by(protocol) -> tuple[Feature, ...]:
    """The features a protocol object switches off (its ``features_off`` attribute; none without)."""
    return tuple(getattr(protocol, "features_off", ()))


__all__ = ["Feature", "FEATURES", "CC_OFF", "MULTICAST", "HOST_REGISTER", "features_off", "features_off_by",
           "host_register_off", "is_nvls_name", "multicast_off", "nvls_instances", "price_reference"]
