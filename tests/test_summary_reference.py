"""The linear-time parts of replay.pipeline.results.summarize (entry times, per-key reductions) give exactly
what their sort-based forms give (kept here as the reference),
on random keys and on replays of random and real traces."""

from __future__ import annotations

import numpy as np
import pytest
import twins
from hypothesis import given, settings
from hypothesis import strategies as st

from fastrack_core.schema import DepKind, OpKind
from fastrack_core.traceio import trace_in_memory
from replay.pipeline import results
from replay.pipeline.build import build_graph
from replay.pipeline.engine import schedule
from tracegen.synth import random_table


def reference_group_reduce(keys, *cols):
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    return k[first], [(np.minimum if how == "min" else np.maximum).reduceat(v[order], first) for v, how in cols]


def reference_entry_times(graph, sched):
    sy = graph.kind == OpKind.SYNC
    if not sy.any():
        return sched.start
    dst = np.repeat(np.arange(graph.n, dtype=np.int64), np.diff(graph.dep_ptr))
    e = np.flatnonzero(sy[dst] & (graph.dep_kind != DepKind.SYNC))
    src = graph.dep_src[e]
    bound = np.where(graph.dep_kind[e] == DepKind.LAUNCH, sched.start[src], sched.finish[src]) + graph.dep_lag[e]
    entry = graph.release.astype(np.int64, copy=True)
    np.maximum.at(entry, dst[e], bound)
    out = sched.start.copy()
    out[sy] = np.minimum(sched.start[sy], entry[sy])
    return out


@settings(max_examples=80, deadline=None)
@given(keys=st.lists(st.one_of(st.integers(0, 9), st.integers(0, 2**62)), min_size=1, max_size=60), data=st.data())
def test_group_reduce_matches_the_sort(keys, data):
    keys = np.array(keys, np.int64)
    values = np.array(data.draw(st.lists(st.integers(-(2**62), 2**62), min_size=keys.size, max_size=keys.size)),
                      np.int64)
    twins.assert_same(results._group_reduce(keys, (values, "min"), (values, "max")),
                      reference_group_reduce(keys, (values, "min"), (values, "max")))


@pytest.mark.parametrize("seed,ranks", [(1, 1), (2, 3), (3, 2)])
def test_entry_times_and_summary_match(seed, ranks):
    g = build_graph(trace_in_memory(random_table(3000, seed, ranks=ranks), {"source_format": "synthetic"}))
    assert np.any(g.kind == OpKind.SYNC)
    s = schedule(g)
    entered = reference_entry_times(g, s)
    twins.assert_same(results.entry_times(g, s), entered)
    rank = g.rank.astype(np.int64)
    ur, (s0, s1) = reference_group_reduce(rank, (entered, "min"), (s.finish, "max"))
    d = results.summarize(g, s, "captured", g.n).to_dict()
    assert d["ranks"] == ur.tolist() and [r["makespan_ns"] for r in d["per_rank"]] == (s1 - s0).tolist()
    has = np.flatnonzero(g.step >= 0)
    keys = (g.rank[has].astype(np.int64) << 32) | g.step[has].astype(np.int64)
    uk, (t0, t1) = reference_group_reduce(keys, (entered[has], "min"), (s.finish[has], "max"))
    assert [(x["rank"] << 32 | x["step"], x["makespan_ns"]) for x in d["steps"]] == list(zip(uk.tolist(),
                                                                                           (t1 - t0).tolist()))


def reference_step_spans(graph, sched, entered):
    has = np.flatnonzero(graph.step >= 0)
    if not has.size:
        return []
    keys = (graph.rank[has].astype(np.int64) << 32) | graph.step[has].astype(np.int64)
    uk, (s0, s1) = reference_group_reduce(keys, (entered[has], "min"), (sched.finish[has], "max"))
    cap = has[graph.captured_start[has] >= 0]
    ckeys = (graph.rank[cap].astype(np.int64) << 32) | graph.step[cap].astype(np.int64)
    cuk, (c0, c1) = reference_group_reduce(ckeys, (graph.captured_start[cap], "min"),
                                           (graph.captured_start[cap] + graph.captured_dur[cap], "max"))
    cap_span = dict(zip(cuk.tolist(), (c1 - c0).tolist()))
    return [{"rank": int(k >> 32), "step": int(k & 0xFFFFFFFF), "makespan_ns": int(b - a),
             "captured_span_ns": int(cap_span.get(int(k), 0))} for k, a, b in zip(uk.tolist(), s0, s1)]


@pytest.mark.parametrize("protocol", ["captured", "baseline"])
def test_step_spans_match_with_derived_nodes(protocol):
    """A CC protocol adds derived nodes (no measured time, step -1 or inherited): the partial paths."""
    from replay.pipeline.run import replay_graph

    g = build_graph(trace_in_memory(random_table(2000, 4, ranks=2), {"source_format": "synthetic"}))
    rep = replay_graph(g, protocol)
    g2, s = rep.graph, rep.schedule
    if protocol != "captured":
        assert np.any(g2.captured_start < 0)
    entered = reference_entry_times(g2, s)
    twins.assert_same(results.entry_times(g2, s), entered)
    assert results.step_spans(g2, s, entered) == reference_step_spans(g2, s, entered)
    # every node in a step but not every node measured, and no node in a step
    for step in (np.maximum(g2.step, 0), np.full(g2.n, -1, np.int32)):
        g3 = g2.replace(step=step)
        assert results.step_spans(g3, s, entered) == reference_step_spans(g3, s, entered)
    d = results.summarize(g2, s, protocol, g.n).to_dict()
    assert d["captured_span_ns"] > 0 and len(d["per_rank"]) == 2


@pytest.mark.parametrize("protocol,ranks", [("captured", 3), ("baseline", 2), ("fastrack", 1)])
def test_summary_slice_by_slice_equals_one_pass(monkeypatch, protocol, ranks):
    """The summary reduces the nodes slice by slice (bounded temporaries): slices of 7 nodes (most
    slices mix ranks, steps, measured and derived nodes, blocking calls at the edges) give exactly
    the figures of one slice holding every node."""
    from replay.pipeline.run import replay_graph

    g = build_graph(trace_in_memory(random_table(1500, 11, ranks=ranks), {"source_format": "synthetic"}))
    rep = replay_graph(g, protocol)
    monkeypatch.setattr(results, "SLICE_NODES", rep.graph.n + 1)
    whole = results.summarize(rep.graph, rep.schedule, protocol, g.n).to_dict()
    monkeypatch.setattr(results, "SLICE_NODES", 7)
    sliced = results.summarize(rep.graph, rep.schedule, protocol, g.n).to_dict()
    assert sliced == whole
    entered = results._entered(rep.graph, rep.schedule)
    parts = np.concatenate([entered.part(sl) for sl in results._slices(rep.graph.n)])
    twins.assert_same(parts, reference_entry_times(rep.graph, rep.schedule))
    assert whole["steps"] and whole["captured_span_ns"] > 0 and len(whole["ranks"]) == ranks
