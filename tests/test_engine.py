"""Engine rules on hand-checkable graphs (times worked out in the comments)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fastrack.errors import GraphError
from fastrack.schema import DepKind
from graphs import graph
from replay.engine import schedule
from replay.results import critical_path


F = DepKind.SYNC  # any finish-to-start kind


def test_in_order_lane_and_finish_to_start():
    # 0 and 1 on lane 0 (10 then 20 ns): 0:[0,10] 1:[10,30]; 2 on lane 1 waits for 1 + 5 lag: [35,36]
    g = graph([10, 20, 1], deps=[(1, 2, F, 5)], lanes=[0, 0, 1])
    s = schedule(g)
    assert s.start.tolist() == [0, 10, 35]
    assert s.finish.tolist() == [10, 30, 36]
    assert s.makespan == 36


def test_launch_edge_is_start_to_start():
    # call 0 on the host lane [0,100]; GPU op 1 starts 7 ns after the call *starts*: [7, 57]
    g = graph([100, 50], deps=[(0, 1, DepKind.LAUNCH, 7)], lanes=[0, 1])
    s = schedule(g)
    assert s.start.tolist() == [0, 7]


def test_negative_stream_lag_reproduces_overlap():
    # two kernels on one stream; the second measured 3 ns before the first ended
    g = graph([10, 10], deps=[(0, 1, DepKind.STREAM, -3)], lanes=[0, 0])
    s = schedule(g)
    assert s.start.tolist() == [0, 7]


def test_lane_is_fifo_in_issue_order_not_work_conserving():
    # lane 1 is shared: node 1 (order 1) waits for node 0 (50 ns); node 2 (order 2) is ready at 0
    # but queues behind node 1: issue-order FIFO -> 1:[50,60], 2:[60,70]
    g = graph([50, 10, 10], deps=[(0, 1, F, 0)], lanes=[0, 1, 1])
    s = schedule(g)
    assert s.start.tolist() == [0, 50, 60]


def test_multi_server_lane_takes_first_free_server():
    # 3 nodes of 10 ns on a 2-server lane: [0,10], [0,10], [10,20]
    g = graph([10, 10, 10], lanes=[0, 0, 0], servers=[2])
    s = schedule(g)
    assert s.start.tolist() == [0, 0, 10]


def test_release_times():
    g = graph([5, 5], lanes=[0, 1], release=[100, 3])
    assert schedule(g).start.tolist() == [100, 3]


def test_barrier_group_starts_together():
    # rank A member (node 1) ready at 10, rank B member (node 3) ready at 40: both start at 40
    g = graph([10, 5, 40, 5], deps=[(0, 1, F, 0), (2, 3, F, 0)], lanes=[0, 1, 2, 3], group=[-1, 7, -1, 7])
    s = schedule(g)
    assert s.start[1] == s.start[3] == 40
    assert s.finish[1] == s.finish[3] == 45


def test_cycle_is_reported_with_ops():
    g = graph([1, 1, 1], deps=[(0, 1, F, 0), (1, 2, F, 0), (2, 1, F, 0)])
    with pytest.raises(GraphError, match="cycle"):
        schedule(g)


def test_order_key_breaks_ties_between_ready_nodes():
    # both ready at 0 on one lane; node 1 has the smaller key so it goes first
    g = graph([10, 10], lanes=[0, 0], order=[5, 1])
    assert schedule(g).start.tolist() == [10, 0]


@st.composite
def random_graphs(draw):
    n = draw(st.integers(1, 40))
    durs = draw(st.lists(st.integers(0, 100), min_size=n, max_size=n))
    lanes = draw(st.lists(st.integers(-1, 3), min_size=n, max_size=n))
    edges = []
    for dst in range(1, n):
        for src in draw(st.lists(st.integers(0, dst - 1), max_size=3, unique=True)):
            kind = draw(st.sampled_from([DepKind.PROGRAM, DepKind.LAUNCH, DepKind.SYNC, DepKind.DATA]))
            edges.append((src, dst, kind, draw(st.integers(0, 20))))
    servers = draw(st.lists(st.integers(1, 3), min_size=4, max_size=4))
    if max(lanes) < 3:
        lanes[-1] = 3  # every lane index exists
    return graph(durs, edges, lanes=lanes, servers=servers)


@settings(max_examples=60, deadline=None)
@given(random_graphs())
def test_schedule_respects_every_constraint_and_path_sums_to_makespan(g):
    s = schedule(g)
    for i in range(g.n):
        for e in range(g.dep_ptr[i], g.dep_ptr[i + 1]):
            src, kind, lag = g.dep_src[e], g.dep_kind[e], g.dep_lag[e]
            ref = s.start[src] if kind == DepKind.LAUNCH else s.finish[src]
            assert s.start[i] >= ref + lag
        assert s.finish[i] == s.start[i] + g.dur[i]
    # at most `servers` nodes of a lane overlap at any time
    for li in range(len(g.lanes)):
        idx = np.flatnonzero(g.lane == li)
        for t in s.start[idx]:
            busy = np.sum((s.start[idx] <= t) & (s.finish[idx] > t) & (s.finish[idx] > s.start[idx]))
            assert busy <= g.lanes.servers[li]
    assert sum(critical_path(g, s).values()) == s.makespan
    again = schedule(g)
    assert np.array_equal(again.start, s.start)
