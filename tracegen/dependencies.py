"""Turn the "raw ops" of an importer into a schema-v1 trace: flattening, gaps, dependencies.

Every importer (Kineto JSON, Nsight SQLite, ...) reduces its input to one pandas DataFrame of
*raw ops* and calls :func:`derive_dependencies`, which applies ``docs/conventions.md`` and
returns the Arrow table (built with :func:`fastrack.traceio.make_table`). Importers never
compute dependencies themselves.

Raw-op frame contract
=====================

One row per measured record. Columns (all optional except ``kind``, ``name``, ``start_ns``,
``dur_ns``; missing columns take the default shown):

=============== ======== ====== ==============================================================
column          dtype    default meaning
=============== ======== ====== ==============================================================
rank            int      0      rank (process) of the record
device          int      -1     GPU ordinal (GPU ops; host calls when known, e.g. a device sync)
thread          int      -1     host thread id (host rows)
stream          int      -1     GPU stream id (GPU rows)
kind            int      --     :class:`fastrack.schema.OpKind` value (see below)
name            str      --     kernel / call / operator name
start_ns        int      --     start, integer ns on the rank's clock (any origin: absolute is
                                fine, each rank is re-based to its earliest kept op)
dur_ns          int      --     duration, ns, >= 0
bytes           int      0      bytes moved / set
copy_dir        str|int  None   memcpy direction: label (H2D, D2H, D2D, P2P) or CopyDir value
host_mem        str|int  None   pinned|pageable, or HostMem value
coll_type       str      None   collective type (all_reduce, ...) of a COLLECTIVE op
coll_bytes      int      0      collective message size per rank, bytes
coll_group      str      None   process group (None: one unnamed group)
coll_seq        int      -1     sequence number in the group; -1: computed here
correlation     int      -1     CUDA correlation id linking a call and its GPU op(s)
step            int      -1     profiler step; -1: derived here (see below)
--------------- -------- ------ --------------------------------------------------------------
sync_stream     int      -1     cudaStreamSynchronize: the stream it waits on (-1 unknown)
sync_scope      str      ''     what a blocking SYNC call waits on: 'stream' | 'event' |
                                'device' | '' (unknown: no sync dependency)
event_corr      int      -1     cudaStreamWaitEvent / cudaEventSynchronize: correlation id of the
                                matching cudaEventRecord call (-1 unknown)
record_stream   int      -1     stream an event was recorded on (on the record row, or on the
                                wait / event-sync row; -1 unknown)
wait_stream     int      -1     cudaStreamWaitEvent: the stream that waits (-1 unknown)
blocking        bool     False  a call that both launches GPU work and waits for it
                                (synchronous cudaMemcpy, D2H cudaMemcpyAsync into pageable
                                memory): split into a runtime op and a sync op
=============== ======== ====== ==============================================================

Meaning of ``kind`` on input:

* ``RUNTIME`` / ``SYNC``: CUDA runtime/driver calls. These (plus the CPU gap ops derived here)
  are the host ops written out. ``SYNC`` means the call blocks the host (stream/event/device
  synchronize).
* ``KERNEL`` / ``MEMCPY`` / ``MEMSET`` / ``COLLECTIVE``: GPU ops, written out.
* ``CPU``: **annotations**, never written out. Framework operators (Kineto ``cpu_op``, NVTX
  ranges) name the CPU gap ops; a CPU row named ``ProfilerStep#N`` defines step ``N`` over its
  interval for every host op of its rank.

A row is a *stream wait* (cudaStreamWaitEvent) when ``wait_stream >= 0``, or when
``event_corr >= 0`` and it is not a ``SYNC`` row. ``record_stream`` alone marks nothing (it is
also set on cudaEventRecord rows).

What is derived (``docs/conventions.md``)
=========================================

* Flattening per (rank, thread): host calls sorted by start; a call contained in an earlier one
  is absorbed by the outermost call (its correlation, blocking flag and sync hints move to the
  outer call, so its GPU ops are launched by the outer call); a call that only partly overlaps
  the previous one is clipped to start where the previous ends.
* Blocking calls with a GPU op: split into a ``runtime`` op ``[start, s)`` and a ``sync`` op
  ``[s, end]`` where ``s`` = first GPU op start clamped to ``[start + 1, end]`` (calls shorter
  than 1 ns are not split). The sync half has the same name, correlation -1 and ``sync`` deps on
  the GPU ops of the call.
* CPU gap ops fill every positive gap between consecutive host ops of a thread, named after the
  innermost non-step annotation of that thread enclosing the whole gap (else ``cpu``). Threads
  without CUDA calls are dropped.
* ``program``: previous host op of the thread.
* ``launch``: call -> GPU op(s) with its correlation (CUDA graphs: many). GPU ops without a call
  get an inferred launch from the latest ``runtime`` op started at or before the GPU op on the
  rank's main launching thread (most launches; ties: lowest thread id).
* Issue order: a GPU op is *issued* at the start of its (real or inferred) launching call; GPU
  ops with no call at all use their own start. Stream order and "launched before" use issue
  order (ties: GPU start), which keeps the graph acyclic.
* ``stream``: previous op of the same (rank, device, stream) in issue order.
* ``sync``: stream scope: last op issued on that stream before the call (stream unknown: the
  stream of the last GPU op the same thread launched before the call); device scope: last op
  issued before the call on every stream of the rank (of the call's device when known); event
  scope: last op issued on the record stream before the matching cudaEventRecord (record call
  found by ``event_corr``; record stream from the hints, else the stream of the last GPU op the
  recording thread launched before the record, as HTA does; without a record call the sync call's
  start bounds the record).
* ``event``: stream waits: the op the event captured (as for event syncs) -> the first op issued
  on the waiting stream after the wait call (waiting stream unknown: the stream of the first GPU op
  the same thread launches after the wait). No edge when both streams are the same.
* ``collective``: COLLECTIVE ops matched across ranks by (coll_group, coll_type, coll_seq); each
  member depends on the members of every other rank. Missing ``coll_seq`` values are numbered per
  (rank, coll_group) in issue order.
* Steps: host ops take the ``ProfilerStep#N`` interval of their rank containing their start;
  GPU ops the step of their launching call; a given ``step >= 0`` is kept.
* Times are re-based per rank to the earliest kept op; rows sorted by (rank, start_ns, host before
  GPU, thread/stream); op ids 0..n-1 in that order.

Everything is vectorized with numpy/pandas (about 1M raw ops in a few seconds).
"""

from __future__ import annotations

import contextlib
import gc
import re
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

from fastrack.errors import TraceFormatError
from fastrack.schema import CopyDir, DepKind, HostMem, OpKind
from fastrack.traceio import COLUMN_DEFAULTS, make_table

HINT_COLUMNS: dict[str, Any] = {
    "sync_stream": -1,
    "sync_scope": "",
    "event_corr": -1,
    "record_stream": -1,
    "wait_stream": -1,
    "blocking": False,
}
RAW_DEFAULTS: dict[str, Any] = {**COLUMN_DEFAULTS, **HINT_COLUMNS}
_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_I64_MIN = np.iinfo(np.int64).min
_KIND_LABELS = np.array([k.label for k in OpKind], dtype=object)
_SCOPE_CODES = {"": 0, "stream": 1, "event": 2, "device": 3}
_EMPTY = np.zeros(0, np.int64)


# --------------------------------------------------------------------------- small helpers


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: importers allocate millions of small containers that
    all live to the end, and generation scans would cost about a third of the import time."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _int_col(raw: pd.DataFrame, name: str, path: str | None) -> np.ndarray:
    if name not in raw:
        return np.full(len(raw), RAW_DEFAULTS[name], np.int64)
    s = raw[name]
    if s.dtype.kind in "iu":
        return s.to_numpy(np.int64)
    try:
        v = pd.to_numeric(s, errors="raise").to_numpy(np.float64, na_value=np.nan)
    except (ValueError, TypeError):
        raise TraceFormatError(f"raw column '{name}' is not numeric", path=path) from None
    if np.isnan(v).any():
        v = np.where(np.isnan(v), RAW_DEFAULTS.get(name, -1), v)
    return np.rint(v).astype(np.int64)


def _obj_col(raw: pd.DataFrame, name: str) -> np.ndarray:
    if name not in raw:
        return np.full(len(raw), RAW_DEFAULTS.get(name), dtype=object)
    v = raw[name].to_numpy(dtype=object, na_value=None)
    return v


def _map_unique(values: np.ndarray, func) -> np.ndarray:
    """``func`` applied to each distinct value (hash-factorized, so cheap on repeated strings)."""
    codes, uniq = pd.factorize(values, use_na_sentinel=True)
    mapped = np.empty(len(uniq) + 1, dtype=object)
    mapped[:-1] = [func(u) for u in uniq]
    mapped[-1] = func(None)
    return mapped[codes]


def _label_col(raw: pd.DataFrame, name: str, enum_cls) -> np.ndarray:
    """copy_dir / host_mem given as labels or enum ints -> object array of label or None."""
    v = _obj_col(raw, name)

    def label(x):
        if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
            try:
                return enum_cls(int(x)).label
            except ValueError:
                return None
        return x if isinstance(x, str) and x else None

    return _map_unique(v, label) if len(v) else v


def _group_ids(*cols: np.ndarray) -> np.ndarray:
    """Dense int ids of the distinct tuples of ``cols`` (same length arrays)."""
    if not len(cols[0]):
        return np.zeros(0, np.int64)
    ids = None
    for c in cols:
        codes, uniq = pd.factorize(c)
        codes = codes.astype(np.int64)
        if ids is None:
            ids = codes
        else:
            ids = ids * (len(uniq) + 1) + codes
            if ids.max() > 2**40:
                ids = pd.factorize(ids)[0].astype(np.int64)
    if len(cols) > 1:
        ids = pd.factorize(ids)[0].astype(np.int64)
    return ids


class _Ordered:
    """Items grouped by an int key, ordered inside each group by (t, tie); ``last_before`` /
    ``first_after`` answer "latest item of group k with t < q" style queries vectorized."""

    def __init__(self, key: np.ndarray, t: np.ndarray, tie: np.ndarray | None = None):
        tie = np.arange(len(key)) if tie is None else tie
        self.order = np.lexsort((tie, t, key))
        self.key = key[self.order]
        self.t = t[self.order]

    def _composite(self, qt: np.ndarray, qkey: np.ndarray):
        allt = np.concatenate([self.t, qt])
        uniq, inv = np.unique(allt, return_inverse=True)
        bits = max(1, int(len(uniq)).bit_length())
        a = (self.key << bits) | inv[: len(self.t)]
        b = (qkey << bits) | inv[len(self.t):]
        return a, b

    def last_before(self, qkey: np.ndarray, qt: np.ndarray, inclusive: bool = False) -> np.ndarray:
        if not len(qkey) or not len(self.key):
            return np.full(len(qkey), -1, np.int64)
        a, b = self._composite(qt, qkey)
        p = np.searchsorted(a, b, side="right" if inclusive else "left") - 1
        ok = (p >= 0) & (self.key[np.maximum(p, 0)] == qkey)
        return np.where(ok, self.order[np.maximum(p, 0)], -1)

    def first_after(self, qkey: np.ndarray, qt: np.ndarray) -> np.ndarray:
        if not len(qkey) or not len(self.key):
            return np.full(len(qkey), -1, np.int64)
        a, b = self._composite(qt, qkey)
        p = np.searchsorted(a, b, side="right")
        pc = np.minimum(p, len(a) - 1)
        ok = (p < len(a)) & (self.key[pc] == qkey)
        return np.where(ok, self.order[pc], -1)


def _key_ids(item_cols: list[np.ndarray], query_cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Factorize item and query keys together so equal tuples get equal ids."""
    n = len(item_cols[0])
    ids = _group_ids(*[np.concatenate([a, b]) for a, b in zip(item_cols, query_cols)])
    return ids[:n], ids[n:]


def _enclosing(
    a_grp: np.ndarray, a_start: np.ndarray, a_end: np.ndarray, q_grp: np.ndarray, q_a: np.ndarray, q_b: np.ndarray
) -> np.ndarray:
    """Index of the innermost interval of the same group enclosing [q_a, q_b], or -1.

    Intervals are assumed nested (as profiler operators are); every answer is checked, so badly
    nested input yields -1 rather than a wrong interval.
    """
    nq = len(q_grp)
    if not nq or not len(a_grp):
        return np.full(nq, -1, np.int64)
    order = np.lexsort((-a_end, a_start, a_grp))
    g, s, e = a_grp[order], a_start[order], a_end[order]
    n = len(g)
    first = np.ones(n, bool)
    first[1:] = g[1:] != g[:-1]
    k = np.arange(n) - np.maximum.accumulate(np.where(first, np.arange(n), 0))  # opened before i
    depth = np.maximum(k - _count_le(g, e, g, s), 0)  # still open when i opens = ancestors

    def query(qg: np.ndarray, qd: np.ndarray, qt: np.ndarray) -> np.ndarray:
        """Innermost interval at depth qd of group qg started at or before qt."""
        ik, qk = _key_ids([g, depth], [qg, qd])
        return _Ordered(ik, s).last_before(qk, qt, inclusive=True)

    parent = query(g, depth - 1, s)
    open_at_a = _count_le(g, s, q_grp, q_a) - _count_le(g, e, q_grp, q_a)
    cand = query(q_grp, open_at_a - 1, q_a)
    for _ in range(int(depth.max()) + 2):
        bad = (cand >= 0) & (e[np.maximum(cand, 0)] < q_b)
        if not bad.any():
            break
        cand = np.where(bad, parent[np.maximum(cand, 0)], cand)
    ok = (cand >= 0) & (s[np.maximum(cand, 0)] <= q_a) & (e[np.maximum(cand, 0)] >= q_b)
    return np.where(ok, order[np.maximum(cand, 0)], -1)


def _count_le(g: np.ndarray, t: np.ndarray, qg: np.ndarray, qt: np.ndarray) -> np.ndarray:
    """For each query: number of items of group qg with t <= qt."""
    o = _Ordered(g, t)
    idx = o.last_before(qg, qt, inclusive=True)
    pos = np.empty(len(g), np.int64)
    pos[o.order] = np.arange(len(g))
    k = o.key
    first = np.ones(len(k), bool)
    first[1:] = k[1:] != k[:-1]
    p0 = np.maximum.accumulate(np.where(first, np.arange(len(k)), 0))
    p = pos[np.maximum(idx, 0)]
    return np.where(idx >= 0, p - p0[p] + 1, 0)


def _step_of(ann_rank, ann_start, ann_end, ann_step, q_rank, q_t) -> np.ndarray:
    """Step of the ProfilerStep interval of the rank containing time q_t (latest start wins)."""
    if not len(ann_rank) or not len(q_rank):
        return np.full(len(q_rank), -1, np.int64)
    ik, qk = _key_ids([ann_rank], [q_rank])
    idx = _Ordered(ik, ann_start).last_before(qk, q_t, inclusive=True)
    ok = (idx >= 0) & (ann_end[np.maximum(idx, 0)] > q_t)
    # zero-length steps or a query exactly at an end: also accept end == q_t when start == q_t
    return np.where(ok, ann_step[np.maximum(idx, 0)], -1)


# --------------------------------------------------------------------------- main entry


def derive_dependencies(raw: pd.DataFrame, *, path: str | None = None) -> pa.Table:
    """Build a schema-v1 table from a raw-op frame (see the module docstring for the contract).

    ``path`` only labels error messages. Raises :class:`TraceFormatError` on bad input
    (negative or NaN durations, unknown kinds, no host or GPU op at all).
    """
    with no_gc():
        return _derive(raw, path)


def _derive(raw: pd.DataFrame, path: str | None) -> pa.Table:
    n_raw = len(raw)
    if n_raw == 0:
        raise TraceFormatError("empty trace: no operations", path=path)
    for c in ("kind", "name", "start_ns", "dur_ns"):
        if c not in raw:
            raise TraceFormatError(f"raw ops lack column '{c}'", path=path)
    # --- validation of times
    for c in ("start_ns", "dur_ns"):
        s = raw[c]
        if s.dtype.kind not in "iu":
            f = pd.to_numeric(s, errors="coerce").to_numpy(np.float64, na_value=np.nan)
            bad = np.flatnonzero(~np.isfinite(f))
            if bad.size:
                i = int(bad[0])
                raise TraceFormatError(
                    f"field '{c}' of op '{raw['name'].iloc[i]}' is not a finite number ({s.iloc[i]!r}); "
                    f"{bad.size} op(s) affected",
                    path=path,
                )
    kind = _int_col(raw, "kind", path)
    start = _int_col(raw, "start_ns", path)
    dur = _int_col(raw, "dur_ns", path)
    badk = (kind < 0) | (kind > max(OpKind))
    if badk.any():
        raise TraceFormatError(f"unknown op kind {int(kind[badk][0])} in raw ops", path=path)
    neg = np.flatnonzero(dur < 0)
    if neg.size:
        i = int(neg[0])
        raise TraceFormatError(
            f"op '{raw['name'].iloc[i]}' has a negative duration ({int(dur[i])} ns); {neg.size} op(s) affected",
            path=path,
        )
    rank = _int_col(raw, "rank", path)
    device = _int_col(raw, "device", path)
    thread = _int_col(raw, "thread", path)
    stream = _int_col(raw, "stream", path)
    corr = _int_col(raw, "correlation", path)
    step_in = _int_col(raw, "step", path)
    names = _obj_col(raw, "name").astype(object)
    end = start + dur

    sync_stream = _int_col(raw, "sync_stream", path)
    event_corr = _int_col(raw, "event_corr", path)
    record_stream = _int_col(raw, "record_stream", path)
    wait_stream = _int_col(raw, "wait_stream", path)
    scope = np.zeros(n_raw, np.int64)
    if "sync_scope" in raw:
        sc = _map_unique(
            raw["sync_scope"].to_numpy(dtype=object, na_value=None),
            lambda x: _SCOPE_CODES.get("" if x is None else str(x).strip().lower(), -1),
        ).astype(np.int64)
        if (sc < 0).any():
            bad = raw["sync_scope"].iloc[int(np.flatnonzero(sc < 0)[0])]
            raise TraceFormatError(f"unknown sync_scope {bad!r} in raw ops", path=path)
        scope = sc
    blocking = raw["blocking"].fillna(False).to_numpy(bool) if "blocking" in raw else np.zeros(n_raw, bool)

    is_ann = kind == OpKind.CPU
    is_host = (kind == OpKind.RUNTIME) | (kind == OpKind.SYNC)
    is_gpu = kind >= OpKind.KERNEL
    if not is_host.any() and not is_gpu.any():
        raise TraceFormatError("empty trace: no CUDA calls and no GPU operations", path=path)

    # ------------------------------------------------------------------ annotations
    a_idx = np.flatnonzero(is_ann)
    a_names = names[a_idx]
    def step_no(x):
        m = _STEP_RE.match(x) if isinstance(x, str) else None
        return int(m.group(1)) if m else -1

    a_step = _map_unique(a_names, step_no).astype(np.int64) if len(a_names) else _EMPTY
    a_is_step = a_step >= 0
    st_idx = a_idx[a_is_step]
    st_num = a_step[a_is_step]
    op_idx = a_idx[~a_is_step]  # operator annotations (gap naming)

    # ------------------------------------------------------------------ flatten host calls
    h = np.flatnonzero(is_host)
    h = h[np.lexsort((h, -dur[h], start[h], thread[h], rank[h]))]
    nh = len(h)
    hs, he = start[h].copy(), end[h]
    newg = np.ones(nh, bool)
    if nh:
        newg[1:] = (rank[h][1:] != rank[h][:-1]) | (thread[h][1:] != thread[h][:-1])
    hgid = np.cumsum(newg) - 1
    cm = pd.Series(he).groupby(hgid).cummax().to_numpy() if nh else _EMPTY
    prev = np.full(nh, _I64_MIN, np.int64)
    if nh:
        prev[1:] = cm[:-1]
    prev[newg] = _I64_MIN
    nested = (hs < prev) & (he <= prev)
    top = ~nested
    cont = np.maximum.accumulate(np.where(top, np.arange(nh), -1)) if nh else _EMPTY
    clip = top & (hs < prev)
    hs = np.where(clip, prev, hs)
    hkind = kind[h].copy()
    hblock = blocking[h].copy()
    hscope, hss, hec, hrs, hws = scope[h].copy(), sync_stream[h].copy(), event_corr[h].copy(), record_stream[h].copy(), wait_stream[h].copy()
    hdev = device[h].copy()
    if nested.any():
        ni = np.flatnonzero(nested)
        ci = cont[ni]
        np.maximum.at(hkind, ci, hkind[ni])
        np.logical_or.at(hblock, ci, hblock[ni])
        for arr, default in ((hscope, 0), (hss, -1), (hec, -1), (hrs, -1), (hws, -1), (hdev, -1)):
            has = arr[ni] != default
            if has.any():
                src, dst = ni[has], ci[has]
                dst_u, first = np.unique(dst, return_index=True)
                take = arr[dst_u] == default
                arr[dst_u[take]] = arr[src[first[take]]]
    # host ops from top-level calls; h-position -> host op index
    tpos = np.flatnonzero(top)
    hop_of_pos = np.cumsum(top) - 1
    hop_of_pos = hop_of_pos[cont] if nh else _EMPTY
    H_raw = h[tpos]
    H_rank, H_thread = rank[H_raw], thread[H_raw]
    H_start, H_end = hs[tpos], he[tpos]
    H_kind = hkind[tpos]
    H_scope, H_ss, H_ec, H_rs, H_ws = hscope[tpos], hss[tpos], hec[tpos], hrs[tpos], hws[tpos]
    H_block = hblock[tpos]
    H_dev = hdev[tpos]
    H_corr = corr[H_raw]
    nH = len(tpos)

    # correlation -> host op (nested calls map to their container)
    cmap = pd.DataFrame({"rank": rank[h], "corr": corr[h], "hop": hop_of_pos})
    cmap = cmap[cmap["corr"] >= 0].drop_duplicates(["rank", "corr"], keep="first")

    # ------------------------------------------------------------------ GPU ops and launches
    G = np.flatnonzero(is_gpu)
    G = G[np.lexsort((G, start[G], rank[G]))]
    nG = len(G)
    G_rank, G_start = rank[G], start[G]
    G_corr = corr[G]
    g_launch = np.full(nG, -1, np.int64)
    if nG and len(cmap):
        m = pd.DataFrame({"rank": G_rank, "corr": G_corr}).merge(cmap, on=["rank", "corr"], how="left")
        g_launch = np.array(m["hop"].fillna(-1).to_numpy(np.int64))
        g_launch[G_corr < 0] = -1

    # ------------------------------------------------------------------ split blocking calls
    spl = np.zeros(nH, bool)
    first_gpu = np.full(nH, np.iinfo(np.int64).max, np.int64)
    launched = g_launch >= 0
    if nG and launched.any():
        np.minimum.at(first_gpu, g_launch[launched], G_start[launched])
    has_gpu = first_gpu != np.iinfo(np.int64).max
    spl = H_block & has_gpu & ((H_end - H_start) >= 1)
    S_of = np.flatnonzero(spl)  # host op index of each split call
    split_at = np.clip(first_gpu[S_of], H_start[S_of] + 1, H_end[S_of]) if len(S_of) else _EMPTY
    # sync halves
    sync_half_end = H_end[S_of]
    sync_half_kind = np.full(len(S_of), int(OpKind.SYNC), np.int64)
    H_end = H_end.copy()
    H_kind = H_kind.copy()
    H_end[S_of] = split_at
    H_kind[S_of] = int(OpKind.RUNTIME)
    # scope hints stay with the sync half
    nS = len(S_of)

    # host-op arrays including sync halves: index < nH: calls, nH.. nH+nS: sync halves
    X_rank = np.concatenate([H_rank, H_rank[S_of]])
    X_thread = np.concatenate([H_thread, H_thread[S_of]])
    X_start = np.concatenate([H_start, split_at])
    X_end = np.concatenate([H_end, sync_half_end])
    X_kind = np.concatenate([H_kind, sync_half_kind])
    X_raw = np.concatenate([H_raw, H_raw[S_of]])
    X_corr = np.concatenate([H_corr, np.full(nS, -1, np.int64)])
    X_dev = np.concatenate([H_dev, H_dev[S_of]])
    X_scope = np.concatenate([np.where(spl, 0, H_scope), H_scope[S_of]])
    X_ss = np.concatenate([H_ss, H_ss[S_of]])
    X_ec = np.concatenate([np.where(spl, -1, H_ec), H_ec[S_of]])
    X_rs = np.concatenate([np.where(spl, -1, H_rs), H_rs[S_of]])
    X_ws = np.concatenate([H_ws, np.full(nS, -1, np.int64)])
    X_half = np.concatenate([np.zeros(nH, bool), np.ones(nS, bool)])
    nX = nH + nS

    # ------------------------------------------------------------------ gap cpu ops
    xo = np.lexsort((X_half, X_start, X_thread, X_rank))
    same = np.zeros(max(nX - 1, 0), bool)
    if nX > 1:
        same = (X_rank[xo][1:] == X_rank[xo][:-1]) & (X_thread[xo][1:] == X_thread[xo][:-1])
    gap_lo = X_end[xo][:-1] if nX > 1 else _EMPTY
    gap_hi = X_start[xo][1:] if nX > 1 else _EMPTY
    gsel = np.flatnonzero(same & (gap_hi > gap_lo)) if nX > 1 else _EMPTY
    P_rank = X_rank[xo][gsel] if len(gsel) else _EMPTY
    P_thread = X_thread[xo][gsel] if len(gsel) else _EMPTY
    P_start, P_end = gap_lo[gsel] if len(gsel) else _EMPTY, gap_hi[gsel] if len(gsel) else _EMPTY
    nP = len(gsel)
    P_name = np.full(nP, "cpu", dtype=object)
    if nP and len(op_idx):
        ak, qk = _key_ids([rank[op_idx], thread[op_idx]], [P_rank, P_thread])
        enc = _enclosing(ak, start[op_idx], end[op_idx], qk, P_start, P_end)
        hit = enc >= 0
        P_name[hit] = names[op_idx[enc[hit]]]

    # ------------------------------------------------------------------ all ops, one index space
    # order: host calls+halves [0, nX), gaps [nX, nX+nP), GPU [nX+nP, n)
    off_P, off_G = nX, nX + nP
    n = nX + nP + nG
    O_rank = np.concatenate([X_rank, P_rank, G_rank]).astype(np.int64)
    O_start = np.concatenate([X_start, P_start, G_start])
    O_end = np.concatenate([X_end, P_end, end[G]])
    O_kind = np.concatenate([X_kind, np.full(nP, int(OpKind.CPU), np.int64), kind[G]])
    O_thread = np.concatenate([X_thread, P_thread, np.full(nG, -1, np.int64)])
    O_stream = np.concatenate([np.full(nX + nP, -1, np.int64), stream[G]])
    O_dev = np.concatenate([X_dev, np.full(nP, -1, np.int64), device[G]])
    O_corr = np.concatenate([X_corr, np.full(nP, -1, np.int64), G_corr])
    O_raw = np.concatenate([X_raw, np.full(nP, -1, np.int64), G])
    is_G = np.zeros(n, bool)
    is_G[off_G:] = True

    edges_dst: list[np.ndarray] = []
    edges_src: list[np.ndarray] = []
    edges_kind: list[int] = []

    def add(dst: np.ndarray, src: np.ndarray, k: DepKind) -> None:
        ok = (dst >= 0) & (src >= 0) & (dst != src)
        if ok.any():
            edges_dst.append(dst[ok].astype(np.int64))
            edges_src.append(src[ok].astype(np.int64))
            edges_kind.append(np.full(int(ok.sum()), int(k), np.uint8))

    # program order: host ops (calls, halves, gaps) per (rank, thread)
    hidx = np.arange(nX + nP)
    ph = np.lexsort((np.concatenate([X_half, np.zeros(nP, bool)]), O_start[: nX + nP], O_thread[: nX + nP], O_rank[: nX + nP]))
    hs_ = hidx[ph]
    if len(hs_) > 1:
        same_t = (O_rank[hs_][1:] == O_rank[hs_][:-1]) & (O_thread[hs_][1:] == O_thread[hs_][:-1])
        add(hs_[1:][same_t], hs_[:-1][same_t], DepKind.PROGRAM)

    # launches (real)
    g_all = np.arange(off_G, n)
    add(g_all, np.where(g_launch >= 0, g_launch, -1), DepKind.LAUNCH)
    # inferred launches: latest runtime op on the rank's main launching thread started <= GPU start
    g_issuer = g_launch.copy()
    missing = g_launch < 0
    if missing.any():
        rt_ops = np.flatnonzero(X_kind == OpKind.RUNTIME)
        cnt = pd.DataFrame({"rank": X_rank[g_launch[launched]], "thread": X_thread[g_launch[launched]]})
        if len(cnt):
            cnt = cnt.value_counts().reset_index(name="n").sort_values(["rank", "n", "thread"], ascending=[True, False, True])
        else:
            cnt = pd.DataFrame({"rank": X_rank[rt_ops], "thread": X_thread[rt_ops]})
            cnt = cnt.value_counts().reset_index(name="n").sort_values(["rank", "n", "thread"], ascending=[True, False, True])
        main = cnt.drop_duplicates("rank")
        main_thread = dict(zip(main["rank"].to_numpy().tolist(), main["thread"].to_numpy().tolist()))
        if main_thread and len(rt_ops):
            mi = np.flatnonzero(missing)
            q_thread = np.array([main_thread.get(int(r), _I64_MIN) for r in G_rank[mi]], np.int64) if len(mi) < 64 else (
                pd.Series(G_rank[mi]).map(main_thread).fillna(_I64_MIN).to_numpy(np.int64)
            )
            ik, qk = _key_ids([X_rank[rt_ops], X_thread[rt_ops]], [G_rank[mi], q_thread])
            found = _Ordered(ik, X_start[rt_ops]).last_before(qk, G_start[mi], inclusive=True)
            inf = np.where(found >= 0, rt_ops[np.maximum(found, 0)], -1)
            g_issuer[mi] = inf
            add(off_G + mi, inf, DepKind.LAUNCH)
    G_issue = np.where(g_issuer >= 0, X_start[np.maximum(g_issuer, 0)], G_start)
    G_lthread = np.where(g_issuer >= 0, X_thread[np.maximum(g_issuer, 0)], _I64_MIN)
    G_dev, G_stream = device[G], stream[G]

    # stream FIFO in issue order
    sk = _group_ids(G_rank, G_dev, G_stream) if nG else _EMPTY
    so = np.lexsort((np.arange(nG), G_start, G_issue, sk)) if nG else _EMPTY
    if nG > 1:
        same_s = sk[so][1:] == sk[so][:-1]
        add(off_G + so[1:][same_s], off_G + so[:-1][same_s], DepKind.STREAM)

    # helpers over GPU ops
    def last_on_stream(q_rank, q_stream, q_t):
        ik, qk = _key_ids([G_rank, G_stream], [q_rank, q_stream])
        r = _Ordered(ik, G_issue, G_start).last_before(qk, q_t)
        return r

    def first_on_stream(q_rank, q_stream, q_t):
        ik, qk = _key_ids([G_rank, G_stream], [q_rank, q_stream])
        return _Ordered(ik, G_issue, G_start).first_after(qk, q_t)

    def by_thread(q_rank, q_thread, q_t, after=False):
        ik, qk = _key_ids([G_rank, G_lthread], [q_rank, q_thread])
        o = _Ordered(ik, G_issue, G_start)
        return o.first_after(qk, q_t) if after else o.last_before(qk, q_t)

    def stream_of(gi):
        return np.where(gi >= 0, G_stream[np.maximum(gi, 0)], -1)

    # sync halves of split calls depend on the GPU ops of their call
    if nS and launched.any():
        half_of_call = np.full(nH, -1, np.int64)
        half_of_call[S_of] = nH + np.arange(nS)
        gl = np.flatnonzero(launched)
        add(half_of_call[g_launch[gl]], off_G + gl, DepKind.SYNC)

    if nG:
        # record lookup for event syncs and stream waits
        def record_info(rows):
            """(time bound, rank, record stream) of the event each row waits on."""
            ec = X_ec[rows]
            t = X_start[rows].copy()
            rs = X_rs[rows].copy()
            rec = np.full(len(rows), -1, np.int64)
            if (ec >= 0).any() and len(cmap):
                m = pd.DataFrame({"rank": X_rank[rows], "corr": ec}).merge(cmap, on=["rank", "corr"], how="left")
                rec = np.array(m["hop"].fillna(-1).to_numpy(np.int64))
                rec[ec < 0] = -1
            has = rec >= 0
            t[has] = X_start[rec[has]]
            take = has & (rs < 0)
            rs[take] = X_rs[rec[take]]
            inf = has & (rs < 0)
            if inf.any():
                ii = np.flatnonzero(inf)
                gi = by_thread(X_rank[rows][ii], X_thread[rec[ii]], X_start[rec[ii]])
                rs[ii] = stream_of(gi)
            return t, rs, (ec >= 0) | (X_rs[rows] >= 0)

        # sync ops
        syn = np.flatnonzero((X_kind == OpKind.SYNC) & (X_scope > 0))
        if len(syn):
            sc = X_scope[syn]
            # stream scope
            r = syn[sc == _SCOPE_CODES["stream"]]
            if len(r):
                ss = X_ss[r].copy()
                unk = ss < 0
                if unk.any():
                    gi = by_thread(X_rank[r][unk], X_thread[r][unk], X_start[r][unk])
                    ss[unk] = stream_of(gi)
                tgt = last_on_stream(X_rank[r], ss, X_start[r])
                add(r, np.where((ss >= 0) & (tgt >= 0), off_G + tgt, -1), DepKind.SYNC)
            # event scope
            r = syn[sc == _SCOPE_CODES["event"]]
            if len(r):
                t, rs, known = record_info(r)
                tgt = last_on_stream(X_rank[r], rs, t)
                add(r, np.where(known & (rs >= 0) & (tgt >= 0), off_G + tgt, -1), DepKind.SYNC)
            # device scope: last op on every stream of the rank (device filtered when known)
            r = syn[sc == _SCOPE_CODES["device"]]
            if len(r):
                streams = pd.DataFrame({"rank": G_rank, "dev": G_dev, "stream": G_stream}).drop_duplicates()
                q = pd.DataFrame({"row": r, "rank": X_rank[r], "qdev": X_dev[r]}).merge(streams, on="rank")
                q = q[(q["qdev"] < 0) | (q["qdev"] == q["dev"])]
                if len(q):
                    qr = q["row"].to_numpy(np.int64)
                    ik, qk = _key_ids([G_rank, G_dev, G_stream], [q["rank"].to_numpy(np.int64), q["dev"].to_numpy(np.int64), q["stream"].to_numpy(np.int64)])
                    tgt = _Ordered(ik, G_issue, G_start).last_before(qk, X_start[qr])
                    add(qr, np.where(tgt >= 0, off_G + tgt, -1), DepKind.SYNC)

        # stream waits -> event edges
        waits = np.flatnonzero(
            (X_kind != OpKind.SYNC) & ~X_half & ((X_ws >= 0) | (X_ec >= 0))
        )
        if len(waits):
            t, rs, known = record_info(waits)
            src = last_on_stream(X_rank[waits], rs, t)
            ws = X_ws[waits].copy()
            unk = ws < 0
            if unk.any():
                gi = by_thread(X_rank[waits][unk], X_thread[waits][unk], X_start[waits][unk], after=True)
                ws[unk] = stream_of(gi)
            dst = first_on_stream(X_rank[waits], ws, X_start[waits])
            ok = known & (rs >= 0) & (ws >= 0) & (ws != rs) & (src >= 0) & (dst >= 0)
            add(np.where(ok, off_G + dst, -1), np.where(ok, off_G + src, -1), DepKind.EVENT)

    # ------------------------------------------------------------------ collectives
    coll_type = _obj_col(raw, "coll_type")[G] if nG else np.zeros(0, object)
    coll_group = _obj_col(raw, "coll_group")[G] if nG else np.zeros(0, object)
    coll_seq = _int_col(raw, "coll_seq", path)[G] if nG else _EMPTY
    coll_bytes = _int_col(raw, "coll_bytes", path)[G] if nG else _EMPTY
    ci = np.flatnonzero(kind[G] == OpKind.COLLECTIVE) if nG else _EMPTY
    if len(ci):
        grp_key = np.array(["" if g is None else str(g) for g in coll_group[ci]], dtype=object)
        typ_key = np.array(["" if t is None else str(t) for t in coll_type[ci]], dtype=object)
        cdf = pd.DataFrame({"i": ci, "rank": G_rank[ci], "grp": grp_key, "typ": typ_key, "seq": coll_seq[ci],
                            "issue": G_issue[ci], "start": G_start[ci]})
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
            add(off_G + pairs["i"].to_numpy(np.int64), off_G + pairs["i_o"].to_numpy(np.int64), DepKind.COLLECTIVE)

    # ------------------------------------------------------------------ steps
    O_step = np.concatenate([step_in[X_raw], np.full(nP, -1, np.int64), step_in[G]])
    if len(st_idx):
        host = np.arange(nX + nP)
        need = host[O_step[host] < 0]
        O_step[need] = _step_of(rank[st_idx], start[st_idx], end[st_idx], st_num, O_rank[need], O_start[need])
        # the sync half of a split call belongs to the step of its call
        if nS:
            O_step[nH:nX] = np.where(step_in[X_raw[nH:nX]] >= 0, O_step[nH:nX], O_step[S_of])
    gneed = np.flatnonzero((O_step[off_G:] < 0) & (g_issuer >= 0))
    O_step[off_G + gneed] = O_step[g_issuer[gneed]]

    # ------------------------------------------------------------------ re-base, sort, ids
    origin = pd.Series(O_start).groupby(O_rank).transform("min").to_numpy(np.int64) if n else _EMPTY
    O_start = O_start - origin
    O_end = O_end - origin
    final = np.lexsort((np.arange(n), O_stream, O_thread, is_G, O_start, O_rank))
    op_id = np.empty(n, np.int64)
    op_id[final] = np.arange(n)

    if edges_dst:
        dst = op_id[np.concatenate(edges_dst)]
        src = op_id[np.concatenate(edges_src)]
        ek = np.concatenate(edges_kind)
        e = pd.DataFrame({"d": dst, "s": src, "k": ek}).drop_duplicates()
        e = e.sort_values(["d", "k", "s"], kind="stable")
        dst, src, ek = e["d"].to_numpy(np.int64), e["s"].to_numpy(np.int64), e["k"].to_numpy(np.uint8)
    else:
        dst, src, ek = _EMPTY, _EMPTY, np.zeros(0, np.uint8)
    counts = np.bincount(dst, minlength=n)
    offsets = np.zeros(n + 1, np.int32 if len(dst) < 2**31 else np.int64)
    np.cumsum(counts, out=offsets[1:])
    deps = pa.ListArray.from_arrays(pa.array(offsets), pa.array(src, pa.int64()))
    dep_kinds = pa.ListArray.from_arrays(pa.array(offsets), pa.array(ek, pa.uint8()))

    # ------------------------------------------------------------------ columns
    def take(a: np.ndarray) -> np.ndarray:
        return a[final]

    def dict_col(values: np.ndarray) -> pa.Array:
        codes, uniques = pd.factorize(values, use_na_sentinel=True)
        return pa.DictionaryArray.from_arrays(
            pa.array(codes.astype(np.int32), mask=codes < 0), pa.array(np.asarray(uniques, dtype=object), pa.string())
        )

    O_name = np.concatenate([names[X_raw], P_name, names[G]]).astype(object)
    g_obj = lambda col, enum_cls=None: (
        _label_col(raw, col, enum_cls) if enum_cls is not None else _obj_col(raw, col)
    )
    none_h = np.full(nX + nP, None, dtype=object)
    copy_dir = np.concatenate([none_h, g_obj("copy_dir", CopyDir)[G]])
    host_mem = np.concatenate([none_h, g_obj("host_mem", HostMem)[G]])
    ctype = np.concatenate([none_h, np.where(kind[G] == OpKind.COLLECTIVE, coll_type, None)])
    cgroup = np.concatenate([none_h, np.where(kind[G] == OpKind.COLLECTIVE, coll_group, None)])
    cseq = np.concatenate([np.full(nX + nP, -1, np.int64), np.where(kind[G] == OpKind.COLLECTIVE, coll_seq, -1)])
    cbytes = np.concatenate([np.zeros(nX + nP, np.int64), np.where(kind[G] == OpKind.COLLECTIVE, coll_bytes, 0)])
    nbytes = np.concatenate([np.zeros(nX + nP, np.int64), _int_col(raw, "bytes", path)[G]])

    kinds = pa.DictionaryArray.from_arrays(
        pa.array(take(O_kind).astype(np.int32)), pa.array(list(_KIND_LABELS), pa.string())
    )
    cols = {
        "op_id": np.arange(n, dtype=np.int64),
        "rank": take(O_rank).astype(np.int32),
        "device": take(O_dev).astype(np.int32),
        "thread": take(O_thread),
        "stream": take(O_stream),
        "kind": kinds,
        "name": dict_col(take(O_name)),
        "start_ns": take(O_start),
        "dur_ns": take(O_end - O_start),
        "bytes": take(nbytes),
        "copy_dir": dict_col(take(copy_dir)),
        "host_mem": dict_col(take(host_mem)),
        "coll_type": dict_col(take(ctype)),
        "coll_bytes": take(cbytes),
        "coll_group": dict_col(take(cgroup)),
        "coll_seq": take(cseq),
        "correlation": take(O_corr),
        "step": take(O_step).astype(np.int32),
        "deps": deps,
        "dep_kinds": dep_kinds,
    }
    cols = {k: (pa.array(v) if isinstance(v, np.ndarray) else v) for k, v in cols.items()}
    return make_table(cols)


__all__ = ["derive_dependencies", "no_gc", "HINT_COLUMNS", "RAW_DEFAULTS"]
