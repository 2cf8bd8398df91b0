"""The numpy fast paths of tracegen.deps and kineto._frame against the pandas operations (or brute
force) they replace, including the fallbacks taken when packed int64 keys would overflow: each
must give exactly the same answer (``tracegen convert``'s output is byte-identical either way)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracegen.deps import derive_dependencies
from tracegen.deps.arrow import from_numpy, strings
from tracegen.deps.edges import _unique_sorted
from tracegen.deps.hosts import CorrMap, _group_cummax
from tracegen.deps.launches import _lookup, _main_threads
from tracegen.deps.queue import _group_median
from tracegen.deps.raw import RAW_DEFAULTS, RawColumns, _blocking, int_col, obj_col
from tracegen.deps.search import I64_MIN, Ordered, distinct, enclosing, factorize, join
from tracegen.importers import kineto
from tracegen.importers.kineto import _frame_of

DATA = Path(__file__).parent / "data"

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
    got = _frame_of(parts, 3).frame()
    pd.testing.assert_frame_equal(got, want, check_column_type=False)
    assert [type(v) for v in got["blocking"]] == [bool, bool, float, float, float]
    single = _frame_of(parts[:1], 0).frame()
    assert single.dtypes.to_dict() == {"kind": np.int64, "name": object, "blocking": bool, "rank": np.int64}


# ------------------------------------------------- the numpy replacements of pandas (no pandas in a Kineto convert)

_OBJ = st.one_of(st.sampled_from(["a", "b", "cpu", ""]), st.none(), st.just(float("nan")),
                 st.integers(-3, 3), st.sampled_from([1.0, 2.5, True, False]))


@settings(max_examples=200, deadline=None)
@given(st.lists(_OBJ, max_size=30))
def test_factorize_objects_matches_pandas(values):
    a = np.empty(len(values), object)
    a[:] = values
    codes, uniq = factorize(a)
    want_codes, want_uniq = pd.factorize(a, use_na_sentinel=True)
    assert codes.dtype == np.int64 and codes.tolist() == want_codes.tolist()
    assert len(uniq) == len(want_uniq) and all(type(u) is type(w) and u == w for u, w in zip(uniq, want_uniq))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=30), st.booleans())
def test_factorize_ints_matches_pandas(values, small):
    a = np.array(values, np.int64) % 5 if small else np.array(values, np.int64)
    codes, uniq = factorize(a)
    want_codes, want_uniq = pd.factorize(a)
    assert codes.tolist() == want_codes.tolist() and uniq.tolist() == want_uniq.tolist()
    b = a > 0
    assert factorize(b)[0].tolist() == pd.factorize(b)[0].tolist()


def test_group_ids_of_floats_with_nan():
    a = np.array([1.5, np.nan, 1.5, 0.0, -0.0, np.nan])
    assert factorize(a)[0].tolist() == pd.factorize(a)[0].tolist() == [0, -1, 0, 1, 1, -1]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-(2**62), 2**62)), max_size=40))
def test_group_cummax_matches_pandas(rows):
    rows = sorted(rows, key=lambda r: r[0])  # groups are contiguous runs
    gid = np.array([r[0] for r in rows], np.int64)
    v = np.array([r[1] for r in rows], np.int64)
    first = np.ones(len(v), bool)
    first[1:] = gid[1:] != gid[:-1]
    want = pd.Series(v, dtype=np.int64).groupby(np.cumsum(first) - 1).cummax().to_numpy()
    assert _group_cummax(v, first).tolist() == want.tolist()


def _main_threads_pandas(ranks, threads):  # what launches._main_threads replaced
    cnt = pd.DataFrame({"rank": ranks, "thread": threads})
    cnt = cnt.value_counts().reset_index(name="n").sort_values(["rank", "n", "thread"], ascending=[True, False, True])
    main = cnt.drop_duplicates("rank")
    return dict(zip(main["rank"].to_numpy().tolist(), main["thread"].to_numpy().tolist()))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([7, 3, 2**60, -5])), max_size=40),
       st.lists(st.integers(0, 5), max_size=80))
def test_main_threads_and_lookup_match_pandas(pairs, queries):
    ranks = np.array([p[0] for p in pairs], np.int64)
    threads = np.array([p[1] for p in pairs], np.int64)
    got = _main_threads(ranks, threads)
    assert got == _main_threads_pandas(ranks, threads)
    if got:
        q = np.array(queries, np.int64)
        want = pd.Series(q, dtype=np.int64).map(got).fillna(I64_MIN).to_numpy(np.int64)
        assert _lookup(q, got).tolist() == want.tolist()


@pytest.mark.parametrize("a", [np.array([3, -1, 2**40], np.int64), np.array([1, 2], np.int32),
                               np.array([0, 255, 7], np.uint8), np.array([], np.int64),
                               np.array([True, False, True]), np.array([0.5, -1.0])])
def test_from_numpy_equals_pa_array(a):
    assert from_numpy(a).equals(pa.array(a))
    mask = np.arange(len(a)) % 2 == 1
    assert from_numpy(a, mask=mask).equals(pa.array(a, mask=mask))
    assert from_numpy(a, pa.int64()).equals(pa.array(a, pa.int64())) if a.dtype.kind in "iub" else True


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=6), max_size=20))
def test_strings_equals_pa_array(values):
    a = np.array(values + [""], dtype=object)[:-1] if values else np.zeros(0, object)
    try:
        want = pa.array(a, pa.string())
    except Exception as exc:  # a lone surrogate: the same error either way
        with pytest.raises(type(exc)):
            strings(a)
        return
    assert strings(a).equals(want)


def test_raw_columns_read_as_their_frame():
    """The Kineto importer's RawColumns and the pandas frame of the same columns give the same
    trace, and the accessors read them alike (object columns with None/NaN, float-with-NaN ints)."""
    imp = kineto.read([DATA / "a100_cuda_event_sync_tiny.json.gz"])
    assert isinstance(imp.raw, RawColumns)
    frame = imp.raw.frame()
    assert derive_dependencies(imp.raw).equals(derive_dependencies(frame))
    cols = {"name": np.array(["x", None, float("nan"), "y"], object), "blocking": np.array([True, None, False, 1], object),
            "bytes": np.array([1.0, np.nan, 3.0, 4.0]), "copy_dir": np.array([None, "h2d", 1, float("nan")], object)}
    rc = RawColumns(cols, 4)
    df = rc.frame()
    rows = np.array([3, 1, 2])
    for src in (rc, df):
        assert int_col(src, "bytes", None).tolist() == [1, RAW_DEFAULTS["bytes"], 3, 4]
    assert obj_col(rc, "name").tolist() == obj_col(df, "name").tolist() == ["x", None, None, "y"]
    assert obj_col(rc, "copy_dir", rows).tolist() == obj_col(df, "copy_dir", rows).tolist()
    assert _blocking(rc).tolist() == _blocking(df).tolist() == [True, False, False, True]


def test_kineto_convert_does_not_import_pandas(tmp_path):
    out = tmp_path / "t.parquet"
    code = ("import runpy, sys\n"
            f"sys.argv = ['tracegen', 'convert', {str(DATA / 'a100_cuda_event_sync_tiny.json.gz')!r}, '-o', {str(out)!r}]\n"
            "try:\n    runpy.run_module('tracegen.cli', run_name='__main__')\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "assert 'pandas' not in sys.modules, 'pandas imported'\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    assert res.returncode == 0, res.stderr[-2000:]
    assert out.exists()
