"""Collectives: numbering and cross-rank ``collective`` edges.

COLLECTIVE ops are matched across ranks by (coll_group, coll_type, coll_seq); each member depends
on the members of every other rank. Missing ``coll_seq`` values are numbered per
(rank, coll_group) in issue order.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fastrack_core.schema import DepKind, OpKind
from tracegen.deps.edges import Edges
from tracegen.deps.launches import GpuOps
from tracegen.deps.raw import RawOps, int_col, obj_col
from tracegen.deps.search import EMPTY, distinct, group_ids, join


@dataclasses.dataclass
class CollectiveFields:
    """Per GPU op (every kind): the collective columns read from the raw ops, ``seq`` completed."""

    type: np.ndarray
    group: np.ndarray
    seq: np.ndarray
    bytes: np.ndarray


def collective_edges(r: RawOps, g: GpuOps, gpu_base: int, edges: Edges) -> CollectiveFields:
    G, nG = g.raw, g.n
    coll_type = obj_col(r.frame, "coll_type", G)
    coll_group = obj_col(r.frame, "coll_group", G)
    coll_seq = int_col(r.frame, "coll_seq", r.path)[G] if nG else EMPTY
    coll_bytes = int_col(r.frame, "coll_bytes", r.path)[G] if nG else EMPTY
    ci = np.flatnonzero(g.kind == OpKind.COLLECTIVE) if nG else EMPTY
    if len(ci):
        grp_key = np.array(["" if v is None else str(v) for v in coll_group[ci]], dtype=object)
        typ_key = np.array(["" if t is None else str(t) for t in coll_type[ci]], dtype=object)
        rank = g.rank[ci]
        seq = coll_seq[ci]
        if (seq < 0).any():  # number every (rank, group) with a missing seq in issue order (ties: start, op)
            grp = group_ids(rank, grp_key)
            redo = np.flatnonzero(np.isin(grp, grp[seq < 0]))
            order = redo[np.lexsort((ci[redo], g.start[ci[redo]], g.issue[ci[redo]], grp[redo]))]
            k = grp[order]
            first = np.ones(len(order), bool)
            first[1:] = k[1:] != k[:-1]
            pos = np.arange(len(order))
            seq = seq.copy()
            seq[order] = pos - np.maximum.accumulate(np.where(first, pos, 0))
            coll_seq = coll_seq.copy()
            coll_seq[ci] = seq
        if len(distinct(rank)) > 1:
            key = group_ids(grp_key, typ_key, seq)
            dst, src = join(key, key)
            other = rank[dst] != rank[src]
            edges.add(gpu_base + ci[dst[other]], gpu_base + ci[src[other]], DepKind.COLLECTIVE)
    return CollectiveFields(type=coll_type, group=coll_group, seq=coll_seq, bytes=coll_bytes)
