"""The fast graph builder gives exactly the graphs of the builder before its speed work
(tests/build_reference.py, a frozen copy): every OpGraph field, values and dtypes, on the real
traces of tests/data and on random synthetic traces (one or many ranks, dense or shuffled op ids,
one or many Arrow chunks, collectives added), with both forms of its edge passes (the twins
numpy / ``replay.pipeline._build``, through tests/twins.py); plus property tests of the helpers
whose algorithm changed (segment maxima, lane rows, per-rank tables)."""

from __future__ import annotations

import build_reference
import numpy as np
import pyarrow as pa
import pytest
import twins
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastrack_core.errors import GraphError
from fastrack_core.schema import DepKind
from fastrack_core.traceio import Trace, make_table, read_trace, trace_in_memory
from replay import causal
from replay.pipeline import build, keys
from replay.pipeline.run import load_graph
from tracegen.convert import convert
from tracegen.synth import random_table


def both(trace):
    """The graph of ``trace`` from both forms of the builder's edge passes (the numpy reference and
    the compiled ``replay.pipeline._build`` where it is built; tests/twins.py), equal to each other
    and to the frozen builder's, every field (arrays in dtype and value, lanes, names, calibration)."""
    return twins.agree("build", lambda: build.build_graph(trace), expect=build_reference.build_graph(trace))


def memory_trace(table):
    return trace_in_memory(table, {"source_format": "synthetic"})


def shuffled(table, rng, id_offset: int):
    """The same trace with its rows in another order and op ids shifted (not 0..n-1)."""
    d = table.to_pydict()
    n = len(d["op_id"])
    perm = rng.permutation(n)
    out = {k: [v[i] for i in perm] for k, v in d.items()}
    out["op_id"] = [i + id_offset for i in out["op_id"]]
    out["deps"] = [[x + id_offset for x in ds] for ds in out["deps"]]
    return make_table(out)


def with_collectives(table, rng, groups: int):
    """Adds ``groups`` barrier groups: one kernel of each rank per group, joined by COLLECTIVE deps
    (each member depends on the group's first), and marked as collectives."""
    d = table.to_pydict()
    ranks = np.array(d["rank"])
    kernels = [np.flatnonzero((ranks == r) & (np.array(d["kind"]) == "kernel")) for r in sorted(set(d["rank"]))]
    for _ in range(groups):
        members = [int(rng.choice(k)) for k in kernels if k.size]
        for m in members:
            d["kind"][m] = "collective"
        for m in members[1:]:
            d["deps"][m] = d["deps"][m] + [d["op_id"][members[0]]]
            d["dep_kinds"][m] = d["dep_kinds"][m] + [int(DepKind.COLLECTIVE)]
    return make_table(d)


def jittered(table, rng, spread_ns: int):
    """The same ops with measured times moved at random by up to ``spread_ns``: overlaps on streams,
    ops held past their prerequisites, blocking calls returning late (the cases the rules weigh)."""
    d = table.to_pydict()
    n = len(d["op_id"])
    d["start_ns"] = np.maximum(0, np.array(d["start_ns"]) + rng.integers(-spread_ns, spread_ns + 1, n)).tolist()
    d["dur_ns"] = np.maximum(0, np.array(d["dur_ns"]) + rng.integers(-spread_ns, spread_ns + 1, n)).tolist()
    return make_table(d)


def sliced(table, rows: int):
    """The same rows as one chunk that is a slice (Arrow offsets not at 0, list offsets not from 0)."""
    prefix = table.slice(0, min(rows, table.num_rows))
    return pa.concat_tables([prefix, table]).combine_chunks().slice(prefix.num_rows)


def chunked(table, cuts):
    """The same rows in several Arrow chunks (sliced buffers with offsets)."""
    edges = [0, *sorted(set(cuts)), table.num_rows]
    return pa.concat_tables([table.slice(a, b - a) for a, b in zip(edges, edges[1:]) if b > a])


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 1500), seed=st.integers(0, 2**31), ranks=st.integers(1, 4), streams=st.integers(1, 5),
       variant=st.sampled_from(["plain", "shuffled", "collectives", "chunked", "sliced", "all"]),
       spread=st.sampled_from([0, 3_000, 20_000, 200_000]))
def test_random_traces_build_the_same_graph(n, seed, ranks, streams, variant, spread):
    rng = np.random.default_rng(seed)
    table = random_table(max(n, ranks), seed, ranks=ranks, streams=streams)
    if spread:
        table = jittered(table, rng, spread)
    if variant in ("collectives", "all") and ranks > 1:
        table = with_collectives(table, rng, groups=int(rng.integers(1, 6)))
    if variant in ("shuffled", "all"):
        table = shuffled(table, rng, int(rng.integers(0, 1000)))
    if variant == "sliced":
        table = sliced(table, int(rng.integers(1, 50)))
        assert table.column("deps").num_chunks == 1 and table.column("deps").chunk(0).offset > 0
    if variant in ("chunked", "all"):
        table = chunked(table, rng.integers(1, table.num_rows + 1, size=3).tolist())
    both(memory_trace(table))


@pytest.fixture(scope="module")
def real_traces(tmp_path_factory):
    from conftest import DATA

    out = {}
    for name in ("a100_cuda_event_sync_tiny.json.gz", "h100_bert_small_uncased.json.gz", "v100_dlrm_8rank"):
        p = tmp_path_factory.mktemp("real") / "t.parquet"
        convert([DATA / name], p)
        out[name] = p
    return out


@pytest.mark.parametrize("name", ["a100_cuda_event_sync_tiny.json.gz", "h100_bert_small_uncased.json.gz",
                                  "v100_dlrm_8rank"])
def test_real_traces_build_the_same_graph(real_traces, name):
    path = real_traces[name]
    g = both(read_trace(path))
    if name == "v100_dlrm_8rank":  # the barrier groups and rank clock shifts are exercised
        assert g.group.max() >= 0 and len(set(g.rank.tolist())) == 8

    def lean():  # load_graph reads only the columns the graph needs and drops them afterwards: same graph
        graph, tr = load_graph(path)
        return graph, tr.num_ops, tr.table.num_columns, tr.metadata

    twins.agree("build", lean, expect=(g, g.n, 0, read_trace(path).metadata))


def test_graph_columns_are_all_a_build_reads():
    table = random_table(300, 5, ranks=2, streams=3)
    lean = table.select(list(build.GRAPH_COLUMNS))  # anything else missing would raise KeyError
    twins.assert_same(build.build_graph(memory_trace(table)), build.build_graph(Trace(table=lean, metadata={}, path=None)))


def test_errors_are_the_same():
    base = random_table(50, 1).to_pydict()
    dangling = dict(base, deps=[*base["deps"][:-1], [10_000]], dep_kinds=[*base["dep_kinds"][:-1], [0]])
    loop = dict(base, deps=[*base["deps"][:-1], [49]], dep_kinds=[*base["dep_kinds"][:-1], [0]])
    for cols in (dangling, loop):
        trace = memory_trace(make_table(cols))
        old = twins.outcome(lambda t=trace: build_reference.build_graph(t), (GraphError,))
        assert isinstance(old, twins.Raised) and old.type == "GraphError"
        twins.agree("build", lambda t=trace: build.build_graph(t), expect=old)


# --- the helpers whose algorithm changed -----------------------------------------------------------

ints = st.integers(-(2**50), 2**50)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deg=st.lists(st.integers(0, 6), min_size=1, max_size=80), data=st.data())
def test_segment_max_is_reduceat(deg, data):
    ptr = np.zeros(len(deg) + 1, np.int64)
    np.cumsum(deg, out=ptr[1:])
    values = np.array(data.draw(st.lists(ints, min_size=int(ptr[-1]), max_size=int(ptr[-1]))), np.int64)
    dst = np.repeat(np.arange(len(deg)), deg)
    assert np.array_equal(build._segment_max(dst, values, len(deg)),
                          build_reference._segment_max(values, ptr, build._NONE))


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 5), st.booleans(), st.integers(0, 2**47 + 5)), min_size=1,
                     max_size=60))
def test_unique_rows_is_numpy_unique(rows):
    rank = np.array([r for r, _, _ in rows], np.int32)
    on_gpu = np.array([g for _, g, _ in rows], bool)
    key = np.array([k for _, _, k in rows], np.int64)
    uniq, inverse = build._unique_rows(rank, on_gpu, key)
    want, want_inv = np.unique(np.stack([rank.astype(np.int64), on_gpu.astype(np.int64), key], axis=1), axis=0,
                               return_inverse=True)
    assert uniq.dtype == np.int64 and inverse.dtype == np.int32
    assert np.array_equal(uniq, want) and np.array_equal(inverse, want_inv.reshape(-1))


@settings(max_examples=60, deadline=None)
@given(samples=st.lists(st.tuples(st.integers(0, 4), ints), max_size=50), q=st.sampled_from([0.0, 25.0, 50.0, 100.0]))
def test_per_rank_tables_match_their_definitions(samples, q):
    r = np.array([s[0] for s in samples], np.int64)
    v = np.array([s[1] for s in samples], np.int64)
    assert causal.per_rank_percentile(r, v, q) == build_reference.causal.per_rank_percentile(r, v, q)
    want = {int(k): int(c) for k, c in zip(*np.unique(r, return_counts=True))}
    assert causal.per_rank_count(r) == want and list(causal.per_rank_count(r)) == list(want)
    table = causal.per_rank_percentile(r, v, q)
    probe = np.array([0, 1, 2, 3, 4, 7], np.int64)
    for default in (0, -3, np.arange(6, dtype=np.int64)):
        got = causal.lookup(table, probe, default)
        assert got.dtype == np.int64
        assert np.array_equal(got, build_reference.causal.lookup(table, probe, default))


@twins.needs_native("build")
def test_native_passes_refuse_wrong_arrays():
    from replay.pipeline import _build as NATIVE

    ptr = np.array([0, 0, 1], np.int64)
    src, kinds = np.array([0], np.int64), np.array([int(DepKind.LAUNCH)], np.uint8)
    start = finish = np.zeros(2, np.int64)
    rank = np.zeros(2, np.int32)
    out = (np.empty(1, np.int64), np.empty(1, np.int64), np.empty(1, bool))
    NATIVE.launch_samples(ptr, src, kinds, start, finish, rank, *out)
    assert out[1][0] == 0 and out[2][0]
    with pytest.raises(TypeError):  # int32 where int64 is expected
        NATIVE.launch_samples(ptr.astype(np.int32), src, kinds, start, finish, rank, *out)
    with pytest.raises(ValueError):  # an output of the wrong length
        NATIVE.launch_samples(ptr, src, kinds, start, finish, rank, np.empty(2, np.int64), *out[1:])
    with pytest.raises(ValueError):  # an edge to a node that does not exist
        NATIVE.launch_samples(ptr, np.array([5], np.int64), kinds, start, finish, rank, *out)
    with pytest.raises((TypeError, ValueError, BufferError)):  # a read-only output
        ro = np.empty(1, np.int64)
        ro.flags.writeable = False
        NATIVE.launch_samples(ptr, src, kinds, start, finish, rank, ro, *out[1:])


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 40), data=st.data())
def test_collective_groups_are_the_union_find(n, data):
    edges = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    src = np.array([a for a, _ in edges], np.int64)
    dst = np.array([b for _, b in edges], np.int64)
    assert np.array_equal(build._collective_groups(n, src, dst), build_reference._collective_groups(n, src, dst))


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 40), data=st.data())
def test_rank_clock_shifts_are_the_medians(n, data):
    group = np.array(data.draw(st.lists(st.integers(-1, 6), min_size=n, max_size=n)), np.int64)
    rank = np.array(data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), np.int32)
    finish = np.array(data.draw(st.lists(st.integers(0, 2**50), min_size=n, max_size=n)), np.int64)
    got = build._rank_clock_shifts(group, rank, finish)
    assert got.dtype == np.int64 and np.array_equal(got, build_reference._rank_clock_shifts(group, rank, finish))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2**63, 2**63 - 1) | st.integers(0, 5), max_size=60))
def test_encode_equals_arrow_dictionary_encoding(values):
    """The lane rows' hashing (replay.pipeline.keys.encode): compiled (``replay.pipeline._build.encode``)
    or not, Arrow's dictionary encoding exactly (distinct values in order of first appearance,
    int32 codes)."""
    v = np.asarray(values, np.int64)
    enc = pa.Array.from_buffers(pa.int64(), v.size, [None, pa.py_buffer(v)]).dictionary_encode()
    twins.agree("build", lambda: keys.encode(v), expect=(np.array(enc.dictionary.to_pylist(), np.int64),
                                                         np.array(enc.indices.to_pylist(), np.int32)))
