"""Vectorized lookups over grouped, time-ordered items: the primitives every dependency rule uses.

"Latest item of group k before time t", "first item after t", "innermost enclosing interval",
"ProfilerStep containing t": each answered for whole arrays of queries with sorts and
``searchsorted`` (no Python loop per op).
"""

from __future__ import annotations

from typing import Any

import numpy as np

EMPTY = np.zeros(0, np.int64)
I64_MIN = np.iinfo(np.int64).min


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What ``pd.factorize(values)`` gives (codes int64, -1 where missing; the distinct values in
    order of first appearance), in numpy. Integer/bool arrays: :func:`np.unique`, reordered by first
    appearance. Object arrays: a dict over the values, missing = None or a float NaN (the only
    missing values a raw-op input holds once read: :func:`tracegen.deps.raw.obj_col` turns pandas'
    other ones into None); equal values of different types (1, 1.0, True) share a code, as in
    pandas. Float arrays (NaN: missing) go through the object path."""
    n = len(values)
    if values.dtype.kind in "iub":
        uniq, first, inv = np.unique(values, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        return rank[inv.reshape(-1)], uniq[order]
    if values.dtype != object:
        values = values.astype(object)
    na = np.equal(values, None) | np.not_equal(values, values) if n else np.zeros(0, bool)
    seen: dict[Any, int] = {}
    if na.any():
        codes = np.full(n, -1, np.int64)
        keep = np.flatnonzero(~na)
        codes[keep] = np.fromiter((seen.setdefault(v, len(seen)) for v in values[keep]), np.int64, len(keep))
    else:
        codes = np.fromiter((seen.setdefault(v, len(seen)) for v in values), np.int64, n)
    uniq = np.empty(len(seen), object)
    uniq[:] = list(seen)
    return codes, uniq


def group_ids(*cols: np.ndarray) -> np.ndarray:
    """Dense int ids of the distinct tuples of ``cols`` (same length arrays)."""
    if not len(cols[0]):
        return np.zeros(0, np.int64)
    ids = None
    for c in cols:
        codes, uniq = factorize(c)
        if ids is None:
            ids = codes
        else:
            ids = ids * (len(uniq) + 1) + codes
            if ids.max() > 2**40:
                ids = factorize(ids)[0]
    if len(cols) > 1:
        ids = factorize(ids)[0]
    return ids


class Ordered:
    """Items grouped by an int key, ordered inside each group by (t, tie); ``last_before`` /
    ``first_after`` answer "latest item of group k with t < q" style queries vectorized."""

    def __init__(self, key: np.ndarray, t: np.ndarray, tie: np.ndarray | None = None):
        tie = np.arange(len(key)) if tie is None else tie
        self.order = np.lexsort((tie, t, key))
        self.key = key[self.order]
        self.t = t[self.order]

    def _composite(self, qt: np.ndarray, qkey: np.ndarray):
        """(key, t) of the items and of the queries as one int64 each, ordered as the pairs: key
        times the span of t plus t when that fits (one pass), else key and the dense rank of t."""
        lo = min(int(self.t.min()), int(qt.min()))
        span = max(int(self.t.max()), int(qt.max())) - lo + 1
        keys = max(abs(int(self.key[0])), abs(int(qkey.min())), int(self.key[-1]) + 1, int(qkey.max()) + 1)
        if keys * span < 2**62:
            return self.key * span + (self.t - lo), qkey * span + (qt - lo)
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


def distinct(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values of an int array (as ``np.unique``, whose hash-table path is slow on
    many distinct values)."""
    s = np.sort(a)
    if len(s) > 1:
        s = s[np.concatenate([[True], s[1:] != s[:-1]])]
    return s


def join(a_key: np.ndarray, q_key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (query, item) pair of indices with ``q_key[query] == a_key[item]`` (an inner join of
    int keys), grouped by query."""
    order = np.argsort(a_key, kind="stable")
    sk = a_key[order]
    lo = np.searchsorted(sk, q_key, "left")
    cnt = np.searchsorted(sk, q_key, "right") - lo
    qi = np.repeat(np.arange(len(q_key)), cnt)
    first = np.repeat(lo - (np.cumsum(cnt) - cnt), cnt)  # sorted position of a query's first item, less its first pair
    return qi, order[first + np.arange(len(qi))]


def key_ids(item_cols: list[np.ndarray], query_cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Factorize item and query keys together so equal tuples get equal ids."""
    n = len(item_cols[0])
    ids = group_ids(*[np.concatenate([a, b]) for a, b in zip(item_cols, query_cols)])
    return ids[:n], ids[n:]


def enclosing(
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
    depth = np.maximum(k - count_le(g, e, g, s), 0)  # still open when i opens = ancestors

    span = int(depth.max()) + 2  # (group, depth) as group * span + depth + 1 when groups are small ints
    top = max(int(g.max()), int(q_grp.max())) + 1
    by_depth = Ordered(g * span + depth + 1, s) if min(int(g.min()), int(q_grp.min())) >= 0 and (
        top * span < 2**62) else None

    def query(qg: np.ndarray, qd: np.ndarray, qt: np.ndarray) -> np.ndarray:
        """Innermost interval at depth qd of group qg started at or before qt."""
        if by_depth is not None:  # a depth no interval has: a key no interval has
            qk = np.where((qd >= -1) & (qd <= span - 2), qg * span + qd + 1, top * span)
            return by_depth.last_before(qk, qt, inclusive=True)
        ik, qk = key_ids([g, depth], [qg, qd])
        return Ordered(ik, s).last_before(qk, qt, inclusive=True)

    parent = query(g, depth - 1, s)
    open_at_a = count_le(g, s, q_grp, q_a) - count_le(g, e, q_grp, q_a)
    cand = query(q_grp, open_at_a - 1, q_a)
    for _ in range(int(depth.max()) + 2):
        bad = (cand >= 0) & (e[np.maximum(cand, 0)] < q_b)
        if not bad.any():
            break
        cand = np.where(bad, parent[np.maximum(cand, 0)], cand)
    ok = (cand >= 0) & (s[np.maximum(cand, 0)] <= q_a) & (e[np.maximum(cand, 0)] >= q_b)
    return np.where(ok, order[np.maximum(cand, 0)], -1)


def count_le(g: np.ndarray, t: np.ndarray, qg: np.ndarray, qt: np.ndarray) -> np.ndarray:
    """For each query: number of items of group qg with t <= qt."""
    o = Ordered(g, t)
    idx = o.last_before(qg, qt, inclusive=True)
    pos = np.empty(len(g), np.int64)
    pos[o.order] = np.arange(len(g))
    k = o.key
    first = np.ones(len(k), bool)
    first[1:] = k[1:] != k[:-1]
    p0 = np.maximum.accumulate(np.where(first, np.arange(len(k)), 0))
    p = pos[np.maximum(idx, 0)]
    return np.where(idx >= 0, p - p0[p] + 1, 0)


def step_of(ann_rank, ann_start, ann_end, ann_step, q_rank, q_t) -> np.ndarray:
    """Step of the ProfilerStep interval of the rank containing time q_t (latest start wins)."""
    if not len(ann_rank) or not len(q_rank):
        return np.full(len(q_rank), -1, np.int64)
    ik, qk = key_ids([ann_rank], [q_rank])
    idx = Ordered(ik, ann_start).last_before(qk, q_t, inclusive=True)
    ok = (idx >= 0) & (ann_end[np.maximum(idx, 0)] > q_t)
    # zero-length steps or a query exactly at an end: also accept end == q_t when start == q_t
    return np.where(ok, ann_step[np.maximum(idx, 0)], -1)
