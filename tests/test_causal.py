"""The causal graph: what-if changes move the replay the way the machine would.

Both directions, on hand-built traces and on the real traces of tests/data: a kernel made faster
in a back-to-back queue moves its successor earlier by the time saved; a host delay before a
launch into a deep queue does not move the GPU; a device-wide sync waits for every stream; the
makespan never decreases when any ``--scale`` factor grows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fastrack_core.schema import DepKind, OpKind
from fastrack_core.traceio import read_trace, write_trace
from replay import causal
from replay.pipeline.build import build_graph
from replay.pipeline.engine import schedule
from replay.pipeline.run import replay_graph, replay_trace
from replay.whatif.scale import SCALE_KINDS, scale_durations
from tracefactory import op, write
from tracegen.convert import convert
from tracegen.deps import derive_dependencies

K, R, S, C = OpKind.KERNEL, OpKind.RUNTIME, OpKind.SYNC, OpKind.CPU


def queue_trace():
    """Host launches k1, k2, k3 5 ns apart, then computes; the GPU runs them back to back.

    k1 was launch-bound (stream idle): launch latency 20 ns. k2, k3 were queued: launched long
    before their predecessor ended, 2 ns back-to-back gaps; their launch-to-start (117, 209 ns) is
    queueing, not latency."""
    return [
        op("runtime", "cudaLaunchKernel", 0, 5, thread=1),
        op("runtime", "cudaLaunchKernel", 5, 5, thread=1, deps=[(0, "program")]),
        op("runtime", "cudaLaunchKernel", 10, 5, thread=1, deps=[(1, "program")]),
        op("cpu", "cpu", 15, 400, thread=1, deps=[(2, "program")]),
        op("kernel", "k1", 20, 100, stream=7, device=0, deps=[(0, "launch")]),
        op("kernel", "k2", 122, 100, stream=7, device=0, deps=[(1, "launch"), (4, "stream")]),
        op("kernel", "k3", 224, 100, stream=7, device=0, deps=[(2, "launch"), (5, "stream")]),
    ]


def lags(g):
    dst = np.repeat(np.arange(g.n), np.diff(g.dep_ptr))
    return {(int(s), int(d), int(k)): int(x) for s, d, k, x in zip(g.dep_src, dst, g.dep_kind, g.dep_lag)}


@pytest.fixture
def queue_graph(tmp_path):
    return build_graph(read_trace(write(tmp_path / "q.parquet", queue_trace())))


def test_launch_edges_carry_the_rank_latency_not_the_queueing_delay(queue_graph):
    g = queue_graph
    assert g.calibration.launch_latency_ns == {0: 20}
    assert g.calibration.launch_samples == {0: 1}
    lag = lags(g)
    assert lag[(1, 5, DepKind.LAUNCH)] == lag[(2, 6, DepKind.LAUNCH)] == 20  # not 117, 209
    assert lag[(4, 5, DepKind.STREAM)] == lag[(5, 6, DepKind.STREAM)] == 2  # back-to-back gaps kept
    assert schedule(g).start.tolist() == [0, 5, 10, 15, 20, 122, 224]  # reproduces the trace


def test_faster_kernel_in_a_back_to_back_queue_moves_its_successors(queue_graph):
    g = queue_graph
    before = schedule(g)
    dur = g.dur.copy()
    dur[4] = 10  # k1 ten times faster: 90 ns saved
    after = schedule(g.replace(dur=dur))
    assert before.start[5] - after.start[5] == 90
    assert before.start[6] - after.start[6] == 90
    # the other direction: a slower k1 delays both by the time added
    dur[4] = 300
    slower = schedule(g.replace(dur=dur))
    assert slower.start[5] - before.start[5] == 200 and slower.start[6] - before.start[6] == 200


def test_faster_kernel_stops_at_the_launch(queue_graph):
    # k1 made 1 ns long: k2 can start no earlier than its launch (5) + latency (20)
    dur = queue_graph.dur.copy()
    dur[4] = 1
    s = schedule(queue_graph.replace(dur=dur))
    assert s.start[5] == 25


def test_host_delay_before_a_launch_into_a_deep_queue_does_not_move_the_gpu(queue_graph):
    g = queue_graph
    before = schedule(g)
    dur = g.dur.copy()
    dur[0] += 50  # the first launch call takes 50 ns longer: k2, k3 are launched 50 ns later
    after = schedule(g.replace(dur=dur))
    assert after.start[1] == before.start[1] + 50
    gpu = [4, 5, 6]
    assert after.start[gpu].tolist() == before.start[gpu].tolist()
    # ... until the delay exceeds the queue's slack: k2 becomes launch-bound
    dur[0] += 200
    late = schedule(g.replace(dur=dur))
    assert late.start[5] == late.start[1] + 20 > before.start[5]


def test_host_scale_moves_the_host_not_a_gpu_bound_timeline(queue_graph):
    g = queue_graph
    base = schedule(g)
    host = schedule(scale_durations(g, {"host": 1.5}))
    assert host.start[[4, 5, 6]].tolist() == base.start[[4, 5, 6]].tolist()
    assert host.finish[3] > base.finish[3]


def test_large_gap_is_not_kept_as_a_stream_lag(tmp_path):
    ops = queue_trace()
    ops[5]["start_ns"] = 170  # 50 ns after k1: above the back-to-back threshold when scaled to us
    ops[6]["start_ns"] = 272
    ns = 1000  # scale times to microseconds so the gap (50 us) exceeds BACK_TO_BACK_MAX_NS
    for o in ops:
        o["start_ns"] *= ns
        o["dur_ns"] *= ns
    g = build_graph(read_trace(write(tmp_path / "t.parquet", ops)))
    lag = lags(g)
    assert 50 * ns > causal.BACK_TO_BACK_MAX_NS
    assert lag[(4, 5, DepKind.STREAM)] == 2 * ns  # the rank's typical gap (k3's), not 50 us
    # k2's 50 us hold is reported, not pinned
    assert g.calibration.unexplained_ops == 1 and g.calibration.unexplained_first == [5]
    s = schedule(g)
    assert s.start[5] == 122 * ns


def raw_host(kind, name, start, dur, corr=-1, thread=1, **hints):
    return dict(kind=int(kind), name=name, start_ns=start, dur_ns=dur, correlation=corr, thread=thread, rank=0,
                stream=-1, device=-1, **hints)


def raw_gpu(name, start, dur, corr=-1, stream=7, **kw):
    return dict(kind=int(K), name=name, start_ns=start, dur_ns=dur, correlation=corr, stream=stream, rank=0,
                device=0, thread=-1, **kw)


def derived_graph(rows, tmp_path):
    table = derive_dependencies(pd.DataFrame(rows))
    path = write_trace(tmp_path / "d.parquet", table, {"source_format": "synthetic"})
    g = build_graph(read_trace(path))
    names = [g.names[i] for i in g.name]
    return g, names


def test_device_sync_waits_for_every_stream(tmp_path):
    g, names = derived_graph([
        raw_host(R, "cudaLaunchKernel", 0, 5, corr=1),
        raw_host(R, "cudaLaunchKernel", 10, 5, corr=2),
        raw_host(S, "cudaDeviceSynchronize", 20, 300, corr=3, sync_scope="device"),
        raw_gpu("a", 8, 200, corr=1, stream=7),
        raw_gpu("b", 18, 290, corr=2, stream=9),
    ], tmp_path)  # fmt: skip
    a, b, sync = names.index("a"), names.index("b"), names.index("cudaDeviceSynchronize")
    assert set(g.deps_of(sync).tolist()) >= {a, b}
    base = schedule(g)
    assert base.finish[sync] == 320
    for node, extra in ((a, 500), (b, 500)):  # whichever stream finishes last holds the sync
        dur = g.dur.copy()
        dur[node] += extra
        s = schedule(g.replace(dur=dur))
        assert s.finish[sync] == s.finish[node] + (320 - 308)


def test_sync_before_ops_launched_before_the_trace_waits_for_them(tmp_path):
    # the profiler starts while a queue launched earlier still runs (correlation ids below every
    # recorded call): the first call, a device sync, waits for the whole queue
    g, names = derived_graph([
        raw_host(S, "cudaDeviceSynchronize", 30, 400, corr=100, sync_scope="device"),
        raw_host(R, "cudaLaunchKernel", 440, 5, corr=101),
        raw_gpu("q0", 0, 100, corr=7), raw_gpu("q1", 101, 100, corr=8), raw_gpu("q2", 202, 200, corr=9),
        raw_gpu("k", 452, 10, corr=101),
    ], tmp_path)  # fmt: skip
    sync, q2 = names.index("cudaDeviceSynchronize"), names.index("q2")
    assert q2 in g.deps_of(sync).tolist()
    assert g.dur[sync] == 430 - 402  # only the return after q2 is host time
    half = scale_durations(g, {"kernel": 0.5})
    s0, s1 = schedule(g), schedule(half)
    assert s0.finish[sync] - s1.finish[sync] == (100 + 100 + 200) // 2
    assert replay_graph(g).result.makespan_ns == 462


def test_blocking_copy_waits_for_its_stream_by_an_edge_not_by_its_duration(tmp_path):
    # a synchronous copy issued while a kernel still runs: the call's measured time before the copy
    # started (40 ns) was waiting for the stream; a faster kernel lets the host return earlier
    g, names = derived_graph([
        raw_host(R, "cudaLaunchKernel", 0, 5, corr=1),
        raw_host(R, "cudaMemcpy", 20, 100, corr=2, blocking=True),
        raw_host(R, "cudaLaunchKernel", 130, 5, corr=3),
        raw_gpu("a", 10, 50, corr=1),
        dict(raw_gpu("copy", 61, 29, corr=2), kind=int(OpKind.MEMCPY), copy_dir="H2D", host_mem="pageable", bytes=8),
        raw_gpu("b", 140, 5, corr=3),
    ], tmp_path)  # fmt: skip
    first = names.index("cudaMemcpy")
    a, copy = names.index("a"), names.index("copy")
    lat = g.calibration.launch_latency_ns[0]
    assert g.dur[first] == lat < 40
    s0 = schedule(g)
    assert s0.start[copy] == 61 and s0.finish.max() == 145  # reproduces the trace
    dur = g.dur.copy()
    dur[a] = 10
    s1 = schedule(g.replace(dur=dur))
    nxt = names.index("b")
    assert s1.start[copy] == 20 + lat  # the copy now waits only for its launch
    assert s0.start[nxt] - s1.start[nxt] == s0.start[copy] - s1.start[copy] > 0  # and so does the host


def test_launch_blocked_on_a_full_queue_waits_for_the_op_that_freed_it(tmp_path):
    # the second launch took 295 us and returned 5 us after q (queued ahead of it) completed
    g, names = derived_graph([
        raw_host(R, "cudaLaunchKernel", 0, 5_000, corr=1),
        raw_host(R, "cudaLaunchKernel", 10_000, 295_000, corr=2),
        raw_host(R, "cudaLaunchKernel", 306_000, 5_000, corr=3),
        raw_gpu("q", 8_000, 292_000, corr=1),
        raw_gpu("k", 301_000, 20_000, corr=2),
        raw_gpu("k2", 322_000, 5_000, corr=3),
    ], tmp_path)  # fmt: skip
    q = names.index("q")
    calls = [i for i, nm in enumerate(names) if nm == "cudaLaunchKernel"]
    halves = [i for i in calls if g.kind[i] == S]
    assert len(halves) == 1 and q in g.deps_of(halves[0]).tolist()
    blocked_first = [i for i in calls if g.kind[i] == R and g.dur[i] == 5_000]
    assert len(blocked_first) == 3  # the blocked call keeps the typical launch time as host work
    last = max(calls, key=lambda i: g.captured_start[i])
    s0 = schedule(g)
    dur = g.dur.copy()
    dur[q] //= 2
    s1 = schedule(g.replace(dur=dur))
    assert s0.start[last] - s1.start[last] == 146_000  # returns when q completes, now 146 us earlier


def test_held_op_gets_the_cross_stream_wait_the_trace_does_not_name(tmp_path):
    # b on stream 9 was launched at 10 and its stream was idle, but it started only when a (on
    # stream 7) ended: an event wait without a record call
    g, names = derived_graph([
        raw_host(R, "cudaLaunchKernel", 0, 5, corr=1),
        raw_host(R, "cudaLaunchKernel", 10, 5, corr=2),
        raw_host(C, "cpu", 20, 500_000),
        raw_gpu("a", 8, 100_000, corr=1, stream=7),
        raw_gpu("b", 100_012, 5_000, corr=2, stream=9),
    ], tmp_path)  # fmt: skip
    a, b = names.index("a"), names.index("b")
    dst = np.repeat(np.arange(g.n), np.diff(g.dep_ptr))
    ev = (g.dep_kind == DepKind.EVENT) & (dst == b)
    assert g.dep_src[ev].tolist() == [a]
    dur = g.dur.copy()
    dur[a] //= 2
    assert schedule(g.replace(dur=dur)).start[b] == schedule(g).start[b] - 50_000


# --- the real traces of tests/data -------------------------------------------------------------

@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    from conftest import DATA

    out = tmp_path_factory.mktemp("qwen") / "qwen.parquet"
    convert([DATA / "h100_qwen1.5_0.5b_chat.json.gz"], out)
    return build_graph(read_trace(out))


def gpu_stream_pairs(g):
    """(predecessor, successor) of every STREAM edge, with the successor's launching call or -1."""
    dst = np.repeat(np.arange(g.n), np.diff(g.dep_ptr))
    st = g.dep_kind == DepKind.STREAM
    launch = np.full(g.n, -1, np.int64)
    lm = g.dep_kind == DepKind.LAUNCH
    launch[dst[lm]] = g.dep_src[lm]
    return g.dep_src[st], dst[st], lags(g), launch


def test_real_trace_faster_queued_kernel_moves_its_successor_by_the_time_saved(qwen):
    g = qwen
    s0 = schedule(g)
    lat = g.calibration.launch_latency_ns[0]
    pred, succ, lag, launch = gpu_stream_pairs(g)
    # a kernel whose successor stays queued even when the kernel runs 10x faster
    cand = [(p, q) for p, q in zip(pred.tolist(), succ.tolist())
            if g.kind[p] == K and g.dur[p] > 20_000
            and (launch[q] < 0 or s0.start[launch[q]] + lat < s0.start[p] + g.dur[p] // 10)
            and s0.start[q] == s0.finish[p] + lag[(p, q, DepKind.STREAM)]]
    assert len(cand) > 100
    p, q = cand[len(cand) // 2]
    dur = g.dur.copy()
    saved = dur[p] - dur[p] // 10
    dur[p] //= 10
    s1 = schedule(g.replace(dur=dur))
    assert s0.start[q] - s1.start[q] == saved


def test_real_trace_host_delay_before_a_deep_queue_launch_leaves_the_gpu(qwen):
    g = qwen
    s0 = schedule(g)
    lat = g.calibration.launch_latency_ns[0]
    pred, succ, lag, launch = gpu_stream_pairs(g)
    slack = {q: s0.start[q] - (s0.start[launch[q]] + lat) for q in succ.tolist() if launch[q] >= 0}
    q = max(slack, key=slack.get)  # the launch into the deepest queue
    call = launch[q]
    assert slack[q] > 100_000
    before_call = [s for s, k in zip(g.deps_of(call), g.dep_kind[g.dep_ptr[call]:g.dep_ptr[call + 1]])
                   if k == DepKind.PROGRAM][0]
    dur = g.dur.copy()
    dur[before_call] += slack[q] // 2  # the host op before the launch takes longer
    s1 = schedule(g.replace(dur=dur))
    assert s1.start[call] > s0.start[call]
    assert s1.start[q] == s0.start[q]


def test_real_trace_responds_to_gpu_speed(qwen):
    # the trace opens with a queue launched before the profiler started, run back to back and
    # waited for by a device sync: halving every kernel saves at least half of that queue's time,
    # doubling costs at least all of it
    g = qwen
    dst = np.repeat(np.arange(g.n), np.diff(g.dep_ptr))
    launched = np.zeros(g.n, bool)
    launched[dst[g.dep_kind == DepKind.LAUNCH]] = True
    queue = np.isin(g.kind, [int(K), int(OpKind.MEMSET)]) & ~launched
    assert queue.sum() > 100
    pre = int(g.dur[queue].sum())
    base = replay_graph(g).result.makespan_ns
    half = replay_graph(g, scales={"kernel": 0.5}).result.makespan_ns
    double = replay_graph(g, scales={"kernel": 2.0}).result.makespan_ns
    assert base - half >= pre // 2 - queue.sum()  # rounding: at most 1 ns per op
    assert double - base >= pre


def test_real_trace_launch_lag_is_not_on_the_critical_path(qwen):
    d = replay_graph(qwen).result.to_dict()
    cp = d["critical_path_ns"]
    assert cp["launch"] < 0.01 * d["makespan_ns"]
    assert cp["compute"] > cp["host"]  # the GPU was ~91% busy
    assert d["calibration"]["launch_latency_ns"] == {"0": qwen.calibration.launch_latency_ns[0]}


def test_real_trace_device_sync_waits_for_every_stream(tmp_path):
    from conftest import DATA

    out = tmp_path / "dlrm.parquet"
    convert([DATA / "v100_dlrm_8rank"], out)
    g = build_graph(read_trace(out))
    names = [g.names[i] for i in g.name]
    syncs = [i for i in range(g.n) if names[i] == "cudaDeviceSynchronize" and g.kind[i] == S]
    assert len(syncs) == 8
    s0 = schedule(g)
    for i in syncs:
        e = slice(g.dep_ptr[i], g.dep_ptr[i + 1])
        awaited = g.dep_src[e][g.dep_kind[e] == DepKind.SYNC]
        streams = {g.lane[j] for j in range(g.n) if g.rank[j] == g.rank[i] and g.kind[j] >= K
                   and g.captured_start[j] < g.captured_start[i]}
        assert {g.lane[a] for a in awaited} == streams and len(streams) > 1
        # whichever stream's last op finishes last holds the sync
        for a in awaited:
            if g.group[a] >= 0:
                continue  # a collective: its duration is its group's
            dur = g.dur.copy()
            dur[a] += s0.start[i] - s0.finish[a] + 1_000_000  # now it ends 1 ms after the sync started
            s1 = schedule(g.replace(dur=dur))
            assert s1.start[i] >= s1.finish[a] and s1.finish[i] > s0.finish[i]


# --- property: monotone in every factor ---------------------------------------------------------

@pytest.fixture(scope="module")
def small_graphs(tmp_path_factory):
    from conftest import DATA

    out = []
    for name in ("a100_cuda_event_sync_tiny.json.gz", "h100_bert_small_uncased.json.gz", "v100_dlrm_8rank"):
        p = tmp_path_factory.mktemp("g") / "t.parquet"
        convert([DATA / name], p)
        out.append(build_graph(read_trace(p)))
    return out


factors = st.sampled_from([0.25, 0.5, 0.9, 1.0, 1.1, 2.0, 4.0])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, 2), kind=st.sampled_from(sorted(SCALE_KINDS)), others=st.dictionaries(
    st.sampled_from(sorted(SCALE_KINDS)), factors), lo=factors, step=st.sampled_from([1.0, 1.5, 3.0]))
def test_makespan_is_monotone_in_every_scale_factor(small_graphs, which, kind, others, lo, step):
    g = small_graphs[which]
    a = dict(others, **{kind: lo})
    b = dict(others, **{kind: lo * step})
    ma = replay_graph(g, scales=a).result.makespan_ns
    mb = replay_graph(g, scales=b).result.makespan_ns
    assert mb >= ma


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(SCALE_KINDS)), lo=factors, step=st.sampled_from([1.5, 3.0]))
def test_makespan_is_monotone_under_a_protocol(small_graphs, kind, lo, step):
    g = small_graphs[0]
    ma = replay_graph(g, "fastrack", scales={kind: lo}).result.makespan_ns
    mb = replay_graph(g, "fastrack", scales={kind: lo * step}).result.makespan_ns
    assert mb >= ma


def test_scales_are_named_in_the_result(tmp_path):
    rep = replay_trace(write(tmp_path / "q.parquet", queue_trace()), scales={"kernel": 0.5, "host": 2})
    d = rep.result.to_dict()
    assert d["scales"] == {"kernel": 0.5, "host": 2.0}
    assert any("kernel x0.5" in n for n in d["notes"])
