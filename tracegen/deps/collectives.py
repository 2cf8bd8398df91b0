"""Collectives: numbering and cross-rank ``collective`` edges.

COLLECTIVE ops are matched across ranks by (coll_group, coll_type, coll_seq); each member depends
on the members of every other rank. Missing ``coll_seq`` values are numbered per
(rank, coll_group) in issue order.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from fastrack.schema import DepKind, OpKind
from tracegen.deps.edges import Edges
from tracegen.deps.launches import GpuOps
from tracegen.deps.raw import RawOps, int_col, obj_col
from tracegen.deps.search import EMPTY


@dataclasses.dataclass
class CollectiveFields:
    """Per GPU op (every kind): the collective columns read from the raw ops, ``seq`` completed."""

    type: np.ndarray
    group: np.ndarray
    seq: np.ndarray
    bytes: np.ndarray


def collective_edges(r: RawOps, g: GpuOps, gpu_base: int, edges: Edges) -> CollectiveFields:
    G, nG = g.raw, g.n
    coll_type = obj_col(r.frame, "coll_type")[G] if nG else np.zeros(0, object)
    coll_group = obj_col(r.frame, "coll_group")[G] if nG else np.zeros(0, object)
    coll_seq = int_col(r.frame, "coll_seq", r.path)[G] if nG else EMPTY
    coll_bytes = int_col(r.frame, "coll_bytes", r.path)[G] if nG else EMPTY
    ci = np.flatnonzero(g.kind == OpKind.COLLECTIVE) if nG else EMPTY
    if len(ci):
        grp_key = np.array(["" if v is None else str(v) for v in coll_group[ci]], dtype=object)
        typ_key = np.array(["" if t is None else str(t) for t in coll_type[ci]], dtype=object)
        cdf = pd.DataFrame({"i": ci, "rank": g.rank[ci], "grp": grp_key, "typ": typ_key, "seq": coll_seq[ci],
                            "issue": g.issue[ci], "start": g.start[ci]})
        neg = cdf["seq"] < 0
        if neg.any():
            bad_groups = cdf.loc[neg, ["rank", "grp"]].drop_duplicates()
            redo = cdf.merge(bad_groups.assign(_r=True), on=["rank", "grp"], how="left")["_r"].fillna(False).to_numpy(bool)
            sub = cdf[redo].sort_values(["rank", "grp", "issue", "start", "i"])
            cdf.loc[sub.index, "seq"] = sub.groupby(["rank", "grp"]).cumcount().to_numpy()
            coll_seq = coll_seq.copy()
            coll_seq[cdf["i"].to_numpy()] = cdf["seq"].to_numpy()
        if cdf["rank"].nunique() > 1:
            pairs = cdf.merge(cdf, on=["grp", "typ", "seq"], suffixes=("", "_o"))
            pairs = pairs[pairs["rank"] != pairs["rank_o"]]
            edges.add(gpu_base + pairs["i"].to_numpy(np.int64), gpu_base + pairs["i_o"].to_numpy(np.int64),
                      DepKind.COLLECTIVE)
    return CollectiveFields(type=coll_type, group=coll_group, seq=coll_seq, bytes=coll_bytes)
