"""The numpy fast paths of tracegen.deps and kineto._frame against the pandas operations (or brute
force) they replace, including the fallbacks taken when packed int64 keys would overflow: each
must give exactly the same answer (``tracegen convert``'s output is byte-identical either way)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracegen.deps.edges import _unique_sorted
from tracegen.deps.hosts import CorrMap
from tracegen.deps.queue import _group_median
from tracegen.deps.search import Ordered, distinct, enclosing, join
from tracegen.importers.kineto import _frame_of

BIG = 2**59  # times / ids this far apart (values stay in int64) overflow every packed key: the fallbacks run


def brute_last_before(key, t, qkey, qt, inclusive):
    out = []
    for k, q in zip(qkey, qt):
        best = -1
        for i in range(len(key)):
            if key[i] == k and (t[i] <= q if inclusive else t[i] < q):
                if best < 0 or (t[i], i) >= (t[best], best):
                    best = i
        out.append(best)
    return out


def brute_first_after(key, t, qkey, qt):
    out = []
    for k, q in zip(qkey, qt):
        best = -1
        for i in range(len(key)):
            if key[i] == k and t[i] > q and (best < 0 or (t[i], i) < (t[best], best)):
                best = i
        out.append(best)
    return out


@pytest.mark.parametrize("scale", [1, BIG])
def test_ordered_lookups_match_brute_force(scale):
    rng = np.random.default_rng(3)
    key = rng.integers(0, 4, 60)
    t = rng.integers(-3, 8, 60) * scale
    qkey = rng.integers(0, 5, 40)
    qt = rng.integers(-4, 9, 40) * scale
    o = Ordered(key, t)
    assert o.last_before(qkey, qt).tolist() == brute_last_before(key, t, qkey, qt, False)
    assert o.last_before(qkey, qt, inclusive=True).tolist() == brute_last_before(key, t, qkey, qt, True)
    assert o.first_after(qkey, qt).tolist() == brute_first_after(key, t, qkey, qt)


@pytest.mark.parametrize("scale", [1, BIG])
def test_corr_map_keeps_the_first_call_of_each_id(scale):
    rng = np.random.default_rng(5)
    rank = rng.integers(0, 3, 80)
    corr = rng.integers(-2, 12, 80) * scale
    hop = np.arange(80)
    first: dict = {}
    for r, c, h in zip(rank.tolist(), corr.tolist(), hop.tolist()):
        if c >= 0:
            first.setdefault((r, c), h)
    qr = rng.integers(0, 4, 50)
    qc = rng.integers(-2, 13, 50) * scale
    found = CorrMap.of(rank, corr, hop).find(qr, qc)
    assert found.tolist() == [first.get((r, c), -1) for r, c in zip(qr.tolist(), qc.tolist())]


@pytest.mark.parametrize("n", [50, 2**31])
def test_edge_dedupe_and_order_match_pandas(n):
    rng = np.random.default_rng(7)
    dst, src = rng.integers(0, 50, 300), rng.integers(0, 50, 300)
    kind = rng.integers(0, 6, 300).astype(np.uint8)
    e = pd.DataFrame({"d": dst, "s": src, "k": kind}).drop_duplicates().sort_values(["d", "k", "s"], kind="stable")
    d, s, k = _unique_sorted(dst, src, kind, n)
    assert d.tolist() == e["d"].tolist() and s.tolist() == e["s"].tolist() and k.tolist() == e["k"].tolist()
    assert k.dtype == np.uint8


def test_group_median_matches_pandas():
    rng = np.random.default_rng(9)
    for _ in range(50):
        n = int(rng.integers(1, 60))
        rank, code = rng.integers(0, 3, n), rng.integers(0, 4, n)
        dur = rng.integers(0, 10 ** int(rng.integers(1, 16)), n)
        names = np.array([f"call{c}" for c in code], dtype=object)
        want = pd.Series(dur).groupby([rank, names]).transform("median").to_numpy(np.int64)
        assert _group_median(rank, code, dur, names).tolist() == want.tolist()


def test_join_and_distinct():
    rng = np.random.default_rng(11)
    a, q = rng.integers(0, 6, 30), rng.integers(0, 8, 20)
    qi, ai = join(a, q)
    assert sorted(zip(qi.tolist(), ai.tolist())) == [(i, j) for i in range(len(q)) for j in range(len(a)) if q[i] == a[j]]
    assert distinct(a).tolist() == np.unique(a).tolist()


def test_enclosing_is_the_same_for_any_group_numbering_and_time_scale():
    """Small non-negative group ids take the packed-key path, others factorized keys; times far
    apart, the dense-rank keys."""
    rng = np.random.default_rng(13)
    grp = rng.integers(0, 3, 40)
    start = rng.integers(0, 100, 40)
    end = start + rng.integers(0, 60, 40)
    qg = rng.integers(0, 4, 30)
    qa = rng.integers(0, 120, 30)
    qb = qa + rng.integers(0, 20, 30)
    packed = enclosing(grp, start, end, qg, qa, qb)
    assert (packed == enclosing(grp - 7, start, end, qg - 7, qa, qb)).all()
    assert (packed == enclosing(grp, start * 2**55, end * 2**55, qg, qa * 2**55, qb * 2**55)).all()
    assert (packed >= 0).sum() > 5


def test_frame_of_matches_pandas_concat():
    """Columns in order of first appearance; a column some part lacks is NaN-filled there (int ->
    float64, bool -> object), exactly as pd.concat of the parts' frames."""
    parts = [
        {"kind": np.array([1, 2]), "name": np.array(["a", "b"], dtype=object), "blocking": np.array([True, False])},
        {"kind": np.array([3]), "name": np.array(["c"], dtype=object), "device": np.array([5]),
         "copy_dir": np.array([None], dtype=object)},
        {"kind": np.array([4, 4]), "name": np.array(["d", "e"], dtype=object), "device": np.array([6, 7])},
    ]
    want = pd.concat([pd.DataFrame({k: pd.Series(v, dtype=v.dtype) for k, v in p.items()}) for p in parts],
                     ignore_index=True, sort=False)
    want["rank"] = 3
    got = _frame_of(parts, 3)
    pd.testing.assert_frame_equal(got, want, check_column_type=False)
    assert [type(v) for v in got["blocking"]] == [bool, bool, float, float, float]
    single = _frame_of(parts[:1], 0)
    assert single.dtypes.to_dict() == {"kind": np.int64, "name": object, "blocking": bool, "rank": np.int64}
