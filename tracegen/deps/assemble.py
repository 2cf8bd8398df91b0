"""Assembling the schema-v1 table: one op index, steps, per-rank time origin, op ids, columns.

* Steps: host ops take the ``ProfilerStep#N`` interval of their rank containing their start;
  GPU ops the step of their launching call; a given ``step >= 0`` is kept.
* Times are re-based per rank to the earliest kept op; rows sorted by (rank, start_ns, host before
  GPU, thread/stream); op ids 0..n-1 in that order.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from fastrack_core.schema import CopyDir, HostMem, OpKind
from fastrack_core.traceio import make_table
from tracegen.deps.arrow import from_numpy, strings
from tracegen.deps.collectives import CollectiveFields
from tracegen.deps.edges import Edges
from tracegen.deps.hosts import GapOps, HostOps
from tracegen.deps.launches import GpuOps
from tracegen.deps.raw import Annotations, RawOps, int_col, label_col
from tracegen.deps.search import EMPTY, factorize, step_of

_KIND_LABELS = np.array([k.label for k in OpKind], dtype=object)


def _steps(r: RawOps, ann: Annotations, x: HostOps, gaps: GapOps, g: GpuOps, rank: np.ndarray,
           start: np.ndarray) -> np.ndarray:
    """Step of every op of the index (host calls and halves, gaps, GPU ops)."""
    nH, nX, nP = x.n_calls, x.n, gaps.n
    st_idx = ann.step_rows
    O_step = np.concatenate([r.step_in[x.raw], np.full(nP, -1, np.int64), r.step_in[g.raw]])
    if len(st_idx):
        host = np.arange(nX + nP)
        need = host[O_step[host] < 0]
        O_step[need] = step_of(r.rank[st_idx], r.start[st_idx], r.end[st_idx], ann.step_numbers, rank[need],
                               start[need])
        # the sync half of a split call belongs to the step of its call
        if x.n_halves:
            O_step[nH:nX] = np.where(r.step_in[x.raw[nH:nX]] >= 0, O_step[nH:nX], O_step[x.split_calls])
    gneed = np.flatnonzero((O_step[nX + nP:] < 0) & (g.issuer >= 0))
    O_step[nX + nP + gneed] = O_step[g.issuer[gneed]]
    return O_step


def _dict_col(values: np.ndarray, rows: np.ndarray | None = None) -> pa.Array:
    """Dictionary column of ``values`` (dictionary in order of first appearance); with ``rows``
    (ascending), every other value is known to be missing and only those rows are factorized."""
    if rows is None:
        codes, uniques = factorize(values)
    else:
        sub, uniques = factorize(values[rows])
        codes = np.full(len(values), -1, np.int64)
        codes[rows] = sub
    return pa.DictionaryArray.from_arrays(
        from_numpy(codes.astype(np.int32), mask=codes < 0), strings(np.asarray(uniques, dtype=object))
    )


def _name_codes(r: RawOps, x: HostOps, gaps: GapOps, G: np.ndarray) -> np.ndarray:
    """Per op of the index, the code of its name among ``r.name_values`` (gap ops: their
    annotation's, or that of "cpu", which is ``len(r.name_values)`` when no raw row has that name)."""
    code = r.name_code
    hit = np.flatnonzero(r.name_values == "cpu")
    cpu = int(hit[0]) if len(hit) else len(r.name_values)
    gap = np.where(gaps.name_row >= 0, code[np.maximum(gaps.name_row, 0)], cpu) if gaps.n else EMPTY
    return np.concatenate([code[x.raw], gap, code[G]])


def _name_col(codes: np.ndarray, values: np.ndarray) -> pa.Array:
    """The name column from name codes (-1: missing), as :func:`_dict_col` of the names would
    make it: dictionary in order of first appearance."""
    known = codes >= 0
    if known.all():
        idx, used = factorize(codes)
    else:
        sub, used = factorize(codes[known])
        idx = np.full(len(codes), -1, np.int64)
        idx[known] = sub
    names = np.append(values, "cpu")[used]
    return pa.DictionaryArray.from_arrays(from_numpy(idx.astype(np.int32), mask=idx < 0), strings(names))


def _rank_min(rank: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per op, the smallest ``t`` of its rank."""
    if not len(rank):
        return EMPTY
    ranks, inv = np.unique(rank, return_inverse=True)
    if len(ranks) == 1:
        return np.full(len(t), t.min(), np.int64)
    low = np.full(len(ranks), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(low, inv, t)
    return low[inv]


def assemble_table(r: RawOps, ann: Annotations, x: HostOps, gaps: GapOps, g: GpuOps, coll: CollectiveFields,
                   edges: Edges) -> pa.Table:
    """The trace table; ops indexed as host calls and halves, then gaps, then GPU ops (as ``edges``)."""
    nX, nP, nG = x.n, gaps.n, g.n
    n = nX + nP + nG
    O_rank = np.concatenate([x.rank, gaps.rank, g.rank]).astype(np.int64)
    O_start = np.concatenate([x.start, gaps.start, g.start])
    O_end = np.concatenate([x.end, gaps.end, g.end])
    O_kind = np.concatenate([x.kind, np.full(nP, int(OpKind.CPU), np.int64), g.kind])
    O_thread = np.concatenate([x.thread, gaps.thread, np.full(nG, -1, np.int64)])
    O_stream = np.concatenate([np.full(nX + nP, -1, np.int64), g.stream])
    O_dev = np.concatenate([x.device, np.full(nP, -1, np.int64), g.device])
    O_corr = np.concatenate([x.corr, np.full(nP, -1, np.int64), g.corr])
    is_G = np.zeros(n, bool)
    is_G[nX + nP:] = True
    O_step = _steps(r, ann, x, gaps, g, O_rank, O_start)

    # re-base, sort, ids
    origin = _rank_min(O_rank, O_start)
    O_start = O_start - origin
    O_end = O_end - origin
    final = np.lexsort((np.arange(n), O_stream, O_thread, is_G, O_start, O_rank))
    op_id = np.empty(n, np.int64)
    op_id[final] = np.arange(n)
    deps, dep_kinds = edges.to_lists(op_id, n)

    def take(a: np.ndarray) -> np.ndarray:
        return a[final]

    G = g.raw
    is_coll = g.kind == OpKind.COLLECTIVE
    O_name = _name_codes(r, x, gaps, G)
    none_h = np.full(nX + nP, None, dtype=object)
    copy_dir = np.concatenate([none_h, label_col(r.frame, "copy_dir", CopyDir, G)])
    host_mem = np.concatenate([none_h, label_col(r.frame, "host_mem", HostMem, G)])
    ctype = np.concatenate([none_h, np.where(is_coll, coll.type, None)])
    cgroup = np.concatenate([none_h, np.where(is_coll, coll.group, None)])
    cseq = np.concatenate([np.full(nX + nP, -1, np.int64), np.where(is_coll, coll.seq, -1)])
    cbytes = np.concatenate([np.zeros(nX + nP, np.int64), np.where(is_coll, coll.bytes, 0)])
    nbytes = np.concatenate([np.zeros(nX + nP, np.int64), int_col(r.frame, "bytes", r.path)[G]])

    gpu_rows = np.flatnonzero(take(is_G))  # the rows of the columns only GPU ops fill
    kinds = pa.DictionaryArray.from_arrays(
        from_numpy(take(O_kind).astype(np.int32)), strings(list(_KIND_LABELS))
    )
    cols = {
        "op_id": np.arange(n, dtype=np.int64),
        "rank": take(O_rank).astype(np.int32),
        "device": take(O_dev).astype(np.int32),
        "thread": take(O_thread),
        "stream": take(O_stream),
        "kind": kinds,
        "name": _name_col(take(O_name), r.name_values),
        "start_ns": take(O_start),
        "dur_ns": take(O_end - O_start),
        "bytes": take(nbytes),
        "copy_dir": _dict_col(take(copy_dir), gpu_rows),
        "host_mem": _dict_col(take(host_mem), gpu_rows),
        "coll_type": _dict_col(take(ctype), gpu_rows),
        "coll_bytes": take(cbytes),
        "coll_group": _dict_col(take(cgroup), gpu_rows),
        "coll_seq": take(cseq),
        "correlation": take(O_corr),
        "step": take(O_step).astype(np.int32),
        "deps": deps,
        "dep_kinds": dep_kinds,
    }
    cols = {k: (from_numpy(v) if isinstance(v, np.ndarray) else v) for k, v in cols.items()}
    return make_table(cols)
