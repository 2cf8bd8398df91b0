"""Engine rules on hand-checkable graphs (times worked out in the comments)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fastrack_core.errors import GraphError
from fastrack_core.schema import DepKind
from graphs import graph
from replay.pipeline.engine import schedule
from replay.graph import Category, LaneType
from replay.pipeline.results import critical_path


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


def test_in_order_lane_serves_in_issue_order():
    # lane 1 is a host thread (in order): node 1 (order 1) waits for node 0 (50 ns); node 2
    # (order 2) is ready at 0 but runs after node 1, in issue order -> 1:[50,60], 2:[60,70]
    g = graph([50, 10, 10], deps=[(0, 1, F, 0)], lanes=[0, 1, 1])
    s = schedule(g)
    assert s.start.tolist() == [0, 50, 60]


def test_shared_lane_serves_whatever_is_ready():
    # the same graph with lane 1 a PCIe link (shared, work-conserving): node 2 is ready at 0 and
    # is served at once; node 1 when it is ready -> 2:[0,10], 1:[50,60]
    g = graph([50, 10, 10], deps=[(0, 1, F, 0)], lanes=[0, 1, 1], types=[LaneType.HOST_THREAD, LaneType.PCIE_H2D])
    assert not g.lanes.shared[0] and g.lanes.shared[1]
    s = schedule(g)
    assert s.start.tolist() == [0, 50, 0]


def test_shared_lane_is_first_come_first_served_by_ready_time():
    # three nodes on a shared lane, ready at 30, 10, 20 (release times), order keys 0, 1, 2, 5 ns
    # each: served by ready time, not by key -> 1:[10,15], 2:[20,25], 0:[30,35]; a node that is
    # ready while the lane is busy waits for it: node 3 ready at 11 -> [15, 20], then node 2 at 20
    g = graph([5, 5, 5, 5], lanes=[0, 0, 0, 0], release=[30, 10, 20, 11], types=[LaneType.COPY_ENGINE])
    assert schedule(g).start.tolist() == [30, 10, 20, 15]
    # ties in ready time go by order key, then index
    g = graph([5, 5, 5], lanes=[0, 0, 0], release=[10, 10, 10], order=[3, 1, 1], types=[LaneType.GPU_AUTH])
    assert schedule(g).start.tolist() == [20, 10, 15]


def test_work_conserving_lane_has_timing_anomalies():
    # Why makespan monotonicity is a property of in-order lanes only (Graham's anomaly): node 1
    # (100 ns on the shared lane 2) follows node 0 (thread A); node 3 (1 ns on lane 2) follows
    # node 2 (11 ns on thread B) and precedes node 4 (200 ns on a stream). With node 0 at 12 ns,
    # node 3 is ready first (11): 3:[11,12], 4:[12,212], 1:[12,112]; makespan 212. Shortening
    # node 0 to 10 ns lets node 1 take the shared lane first: 1:[10,110], 3:[110,111],
    # 4:[111,311]; makespan 311.
    def make(d0, shared=LaneType.GPU_AUTH):
        return graph([d0, 100, 11, 1, 200], deps=[(0, 1, F, 0), (2, 3, F, 0), (3, 4, F, 0)], lanes=[0, 2, 1, 2, 3],
                     types=[LaneType.HOST_THREAD, LaneType.HOST_THREAD, shared, LaneType.STREAM])
    assert schedule(make(12)).makespan == 212
    assert schedule(make(10)).makespan == 311
    # on an in-order lane (issue order: node 1 before node 3): 313 and 311, monotone
    assert schedule(make(12, LaneType.STREAM)).makespan == 313
    assert schedule(make(10, LaneType.STREAM)).makespan == 311


# ------------------------------------------------------------------------------------ pools
POOL = LaneType.BOUNCE_POOL


def test_pool_server_is_reclaimed_when_freed_not_in_order():
    # a pool of 2 (lane 0): node 0 holds one until node 1 (100 ns) finishes, node 2 one until
    # node 3 (10 ns) finishes; node 4 asks at 5 and gets the slot node 3 returns at 10, not the
    # one node 1 returns at 100: it waited 5 ns, which the critical path counts as bounce_wait
    g = graph([0, 100, 0, 10, 1], deps=[(0, 1, F, 0), (2, 3, F, 0)], release=[0, 0, 0, 0, 5],
              types=[POOL], servers=[2], holds=[(0, 1, 0), (2, 3, 0), (4, 4, 0)])
    s = schedule(g)
    assert s.start[4] == 10 and s.slot_wait.tolist() == [0, 0, 0, 0, 5]
    assert s.lane_servers.tolist() == [2]
    g = g.replace(category=np.array([0, 0, 0, 0, Category.COMPUTE], np.int8), dur=np.array([0, 100, 0, 10, 300]))
    s = schedule(g)
    cp = critical_path(g, s)
    assert cp["bounce_wait"] == 5 and sum(cp.values()) == s.makespan == 310


def test_pool_doubles_up_to_its_maximum_then_waits():
    # the same requests with a pool of 1 that may grow to 2: node 2 finds the only slot held and
    # the pool doubles; node 4 then finds both held and the pool is at its maximum: it waits
    holds = [(0, 1, 0), (2, 3, 0), (4, 4, 0)]
    g = graph([0, 100, 0, 10, 1], deps=[(0, 1, F, 0), (2, 3, F, 0)], release=[0, 0, 0, 0, 5],
              types=[POOL], servers=[1], max_servers=[2], holds=holds)
    s = schedule(g)
    assert s.start.tolist() == [0, 0, 0, 0, 10] and s.lane_servers.tolist() == [2]
    # up to 8: 1 -> 2 -> 4, nobody waits
    s = schedule(g.replace(lanes=g.lanes.with_max_servers(0, 8)))
    assert s.start[4] == 5 and s.lane_servers.tolist() == [4] and not s.slot_wait.any()


def test_pool_grows_past_its_maximum_rather_than_deadlock():
    # nodes 0 and 1 (one transfer) each hold a slot until node 2, which follows node 1: with a
    # pool of one, node 1 could never get its slot; the pool grows for it, granted when it asked
    g = graph([5, 5, 5], deps=[(0, 1, F, 0), (1, 2, F, 0)], types=[POOL], servers=[1],
              holds=[(0, 2, 0), (1, 2, 0)])
    s = schedule(g)
    assert s.start.tolist() == [0, 5, 10] and s.lane_servers.tolist() == [2] and not s.slot_wait.any()


def test_pool_errors():
    # a node returns a slot its holder has not taken yet (no dependency between them)
    g = graph([5, 5], release=[100, 0], types=[POOL], holds=[(0, 1, 0)])
    with pytest.raises(GraphError, match="returns a pool server"):
        schedule(g)
    with pytest.raises(GraphError, match="is a pool that nodes hold"):
        schedule(graph([5, 5], lanes=[0, -1], holds=[(1, 1, 0)]))
    bad = graph([5, 5])
    with pytest.raises(GraphError, match="never holds"):
        schedule(bad.replace(hold_until=np.array([1, -1])))


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


IN_ORDER = [LaneType.HOST_THREAD, LaneType.STREAM]
SHARED = [LaneType.PCIE_H2D, LaneType.COPY_ENGINE, LaneType.GPU_AUTH, LaneType.CPU_CRYPTO]


@st.composite
def random_graphs(draw, shared=True, pools=True):
    """Lanes 0..3 of random types (in order only when ``shared`` is False) and 1-3 servers; with
    ``pools``, lane 4 is a pool (1-2 servers, growing up to 4) some nodes hold until one of their
    successors (or themselves) finishes."""
    n = draw(st.integers(1, 40))
    durs = draw(st.lists(st.integers(0, 100), min_size=n, max_size=n))
    lanes = draw(st.lists(st.integers(-1, 3), min_size=n, max_size=n))
    edges = []
    for dst in range(1, n):
        for src in draw(st.lists(st.integers(0, dst - 1), max_size=3, unique=True)):
            kind = draw(st.sampled_from([DepKind.PROGRAM, DepKind.LAUNCH, DepKind.SYNC, DepKind.DATA]))
            edges.append((src, dst, kind, draw(st.integers(0, 20))))
    servers = draw(st.lists(st.integers(1, 3), min_size=4, max_size=4))
    types = draw(st.lists(st.sampled_from(IN_ORDER + SHARED if shared else IN_ORDER), min_size=4, max_size=4))
    if max(lanes) < 3:
        lanes[-1] = 3  # every lane index exists
    holds, max_servers = [], None
    if pools:
        succ = {i: [i] for i in range(n)}
        for src, dst, _, _ in edges:
            succ[src].append(dst)
        for i in draw(st.lists(st.integers(0, n - 1), max_size=n, unique=True)):
            holds.append((i, draw(st.sampled_from(succ[i])), 4))
        servers = servers + [draw(st.integers(1, 2))]
        types = types + [LaneType.BOUNCE_POOL]
        max_servers = servers[:4] + [draw(st.integers(servers[4], 4))]
    return graph(durs, edges, lanes=lanes, servers=servers, types=types, holds=holds, max_servers=max_servers)


def _in_use(start, end, t):
    return int(np.sum((start <= t) & (end > t) & (end > start)))


@settings(max_examples=80, deadline=None)
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
            assert _in_use(s.start[idx], s.finish[idx], t) <= g.lanes.servers[li]
    # a pool never has more holds at once than it grew to, and grows only up to its maximum
    # (or by one past it when every unplaced node waits on it)
    holders = np.flatnonzero(g.hold_lane >= 0)
    if holders.size:
        end = s.finish[g.hold_until[holders]]
        for t in s.start[holders]:
            assert _in_use(s.start[holders], end, t) <= s.lane_servers[4]
        assert s.lane_servers[4] <= max(g.lanes.max_servers[4], holders.size)
        assert not s.slot_wait[s.slot_wait > 0].size or s.lane_servers[4] >= g.lanes.max_servers[4]
    assert sum(critical_path(g, s).values()) == s.makespan
    again = schedule(g)
    assert np.array_equal(again.start, s.start) and np.array_equal(again.order, s.order)


@settings(max_examples=80, deadline=None)
@given(random_graphs(shared=False, pools=False), st.lists(st.sampled_from([1, 2, 3, 7]), min_size=5, max_size=5))
def test_makespan_is_monotone_in_every_duration_scale_factor_on_in_order_lanes(g, factors):
    # one scale factor per lane and one for the nodes on no lane: scaling durations up never
    # shortens the makespan when every lane serves in issue order (see the anomaly test above for
    # shared lanes)
    scale = np.asarray(factors, np.int64)[np.where(g.lane >= 0, g.lane, 4)]
    base = schedule(g).makespan
    assert schedule(g.replace(dur=g.dur * scale)).makespan >= base


def test_no_jit_gives_the_same_schedule(tmp_path):
    # FASTRACK_NO_JIT=1 runs the engine's loops as plain Python: the same schedule, node by node,
    # on a random graph with every rule (groups, negative lags, both lane disciplines, a pool)
    import os
    import subprocess
    import sys
    from pathlib import Path

    from test_gem5_export import random_graph

    tests = Path(__file__).resolve().parent
    out = tmp_path / "nojit.npz"
    code = (f"import sys; sys.path.insert(0, {str(tests)!r})\n"
            "import numpy as np\n"
            "from test_gem5_export import random_graph\n"
            "from replay.pipeline.engine import schedule\n"
            "s = schedule(random_graph(3, 250))\n"
            "keys = ('start', 'finish', 'crit_pred', 'bound_by', 'order', 'slot_wait', 'lane_servers')\n"
            f"np.savez({str(out)!r}, **{{k: getattr(s, k) for k in keys}})\n")
    env = dict(os.environ, FASTRACK_NO_JIT="1")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=tests.parent)
    plain = np.load(out)
    s = schedule(random_graph(3, 250))
    assert s.slot_wait.any() or s.lane_servers[-1] > 1  # the pool is exercised
    for k in plain.files:
        assert np.array_equal(plain[k], getattr(s, k)), k


def _topo_ok(g) -> bool:
    from replay.pipeline.engine import topological_order

    try:
        topological_order(g)
    except GraphError:
        return False
    return True


def test_is_acyclic_agrees_with_topological_order():
    from replay.pipeline.engine import is_acyclic

    chain = graph([1, 1, 1], deps=[(0, 1, F, 0), (1, 2, F, 0)])
    assert is_acyclic(chain) and _topo_ok(chain)
    assert not is_acyclic(chain, [2], [0])  # the extra edge closes 0 -> 1 -> 2 -> 0
    cyc = graph([1, 1, 1], deps=[(0, 1, F, 0), (1, 2, F, 0), (2, 1, F, 0)])
    assert not is_acyclic(cyc) and not _topo_ok(cyc)
    # 0 and 2 form one barrier group: 0 -> 1 -> 2 is a cycle through the group
    grp = graph([1, 1, 1], deps=[(0, 1, F, 0), (1, 2, F, 0)], group=[7, -1, 7])
    assert not is_acyclic(grp) and not _topo_ok(grp)
    # members of one group depending on each other
    same = graph([1, 1], deps=[(0, 1, F, 0)], group=[3, 3])
    assert not is_acyclic(same) and not _topo_ok(same)
    free = graph([1, 1, 1, 1], deps=[(0, 1, F, 0), (2, 3, F, 0)], group=[-1, 5, 5, -1])
    assert is_acyclic(free) and _topo_ok(free)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 8).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=12),
    st.lists(st.sampled_from([-1, 0, 1]), min_size=n, max_size=n))))
def test_is_acyclic_matches_topological_order_on_random_graphs(case):
    from replay.pipeline.engine import is_acyclic

    n, edges, group = case
    deps = [(a, b, F, 0) for a, b in edges if a != b]
    g = graph([1] * n, deps=deps, group=group)
    assert is_acyclic(g) == _topo_ok(g)
