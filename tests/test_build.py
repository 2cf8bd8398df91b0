"""Trace -> graph: lags, sync durations, groups, dangling deps; captured replay reproduces traces."""

import numpy as np
import pytest

from fastrack_core.errors import GraphError
from fastrack_core.traceio import read_trace
from replay.pipeline.build import build_graph
from replay.pipeline.run import replay_trace
from tracefactory import op, write


def launch_trace():
    # host: cpu [0,10] launch [10,15] cpu [15,30] sync [30,140]
    # GPU stream 7: k1 [20,120] (launched at 10, lag 10), k2 [118,130] (overlaps k1 by 2 ns,
    # launched by an inferred launch of the same call), sync waits for k2 and ends 10 ns after it.
    return [
        op("cpu", "aten::mm", 0, 10, thread=1),
        op("runtime", "cudaLaunchKernel", 10, 5, thread=1, deps=[(0, "program")]),
        op("kernel", "k1", 20, 100, stream=7, device=0, deps=[(1, "launch")]),
        op("cpu", "cpu", 15, 15, thread=1, deps=[(1, "program")]),
        op("sync", "cudaStreamSynchronize", 30, 110, thread=1, deps=[(3, "program"), (5, "sync")]),
        op("kernel", "k2", 118, 12, stream=7, device=0, deps=[(2, "stream"), (1, "launch")]),
    ]


def test_lags_and_sync_duration(tmp_path):
    g = build_graph(read_trace(write(tmp_path / "t.parquet", launch_trace())))
    lag = {(int(g.dep_src[e]), int(np.searchsorted(g.dep_ptr, e, side="right") - 1), int(g.dep_kind[e])): int(g.dep_lag[e])
           for e in range(g.num_edges)}
    assert g.calibration.launch_latency_ns == {0: 10}  # k1 was launch-bound: 20 - 10
    assert lag[(1, 2, 1)] == 10
    assert lag[(2, 5, 2)] == -2  # measured overlap on the stream
    # k2 was held by its stream, not its launch: its launch carries the rank's latency, not 108
    assert lag[(1, 5, 1)] == 10
    assert g.dur[4] == 10  # sync keeps only 140 - 130 after k2 finished
    assert g.release[0] == 0 and g.release[2] == 0


def test_captured_replay_reproduces_the_trace(tmp_path):
    rep = replay_trace(write(tmp_path / "t.parquet", launch_trace()))
    s = rep.schedule
    assert s.start.tolist() == [0, 10, 20, 15, 130, 118]
    assert rep.result.makespan_ns == rep.result.captured_span_ns == 140


def test_sync_wait_comes_out_of_the_replay_when_gpu_is_slower(tmp_path):
    ops = launch_trace()
    rep = replay_trace(write(tmp_path / "t.parquet", ops))
    g = rep.graph.replace(dur=rep.graph.dur * np.array([1, 1, 3, 1, 1, 1]))  # k1 three times longer
    from replay.pipeline.engine import schedule

    s = schedule(g)
    # k1 [20,320]; k2 after it with the measured 2 ns overlap [318,330]; sync ends 10 ns later
    assert s.finish[2] == 320 and s.start[5] == 318 and s.finish[4] == 340


def test_dangling_dependency_names_both_ops(tmp_path):
    ops = launch_trace()
    ops[2]["deps"] = [99]
    ops[2]["dep_kinds"] = [1]
    with pytest.raises(GraphError, match="op 2 depends on op 99"):
        build_graph(read_trace(write(tmp_path / "t.parquet", ops)))


def test_cycle_in_trace_is_an_error(tmp_path):
    ops = [op("kernel", "a", 0, 1, stream=1, device=0, deps=[(1, "stream")]),
           op("kernel", "b", 1, 1, stream=1, device=0, deps=[(0, "stream")])]
    with pytest.raises(GraphError, match="cycle.*op 0|cycle.*op 1"):
        replay_trace(write(tmp_path / "t.parquet", ops))


def two_rank_collective():
    # rank 0 arrives at 10, rank 1 at 50 (own clocks); the all-reduce itself takes 20 ns
    # (rank 1's measured duration); rank 0 measured 60 because it waited for rank 1.
    return [
        op("runtime", "ncclLaunch", 0, 10, thread=1, rank=0),
        op("collective", "ncclAllReduce", 10, 60, stream=1, device=0, rank=0, deps=[(0, "launch"), (3, "collective")],
           coll_type="all_reduce", coll_bytes=1 << 20, coll_seq=0, coll_group="0,1"),
        op("runtime", "work", 0, 50, thread=1, rank=1),
        op("collective", "ncclAllReduce", 50, 20, stream=1, device=1, rank=1, deps=[(2, "launch"), (1, "collective")],
           coll_type="all_reduce", coll_bytes=1 << 20, coll_seq=0, coll_group="0,1"),
    ]


def test_collective_members_start_together_with_the_shortest_duration(tmp_path):
    rep = replay_trace(write(tmp_path / "t.parquet", two_rank_collective()))
    s = rep.schedule
    assert s.start[1] == s.start[3] == 50
    assert s.finish[1] == s.finish[3] == 70
    spans = {r["rank"]: r for r in rep.result.to_dict()["per_rank"]}
    assert spans[0]["makespan_ns"] == spans[0]["captured_span_ns"] == 70
    assert spans[1]["makespan_ns"] == spans[1]["captured_span_ns"] == 70
