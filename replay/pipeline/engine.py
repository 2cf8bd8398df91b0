"""The replay engine: an event-driven list scheduler of an OpGraph on its lanes, in integer ns.

Scheduling rule:

    ready[i]  = max(release[i], max over deps j of  finish[j] + lag   (start[j] + lag for LAUNCH))
    start[i]  = max(ready[i], a free server of lane[i], a free server of the pool it holds)
    finish[i] = start[i] + dur[i]

Lanes are of two disciplines (``Lanes.shared``):

* **in order** (streams, host threads, the p2p proxy): the lane serves its nodes strictly in
  *issue order*, a topological order of the graph in which, among nodes whose prerequisites are
  all placed, the smallest ``order`` key (captured start, then node index) goes first. A node
  waits for its lane predecessor in that order even when it is ready first.
* **shared** (PCIe per direction, copy engines, CPU and GPU crypto, links): work-conserving. The
  lane serves whichever node is *ready* first, not the one issued first.

One event-driven pass places the nodes: a binary heap keyed by (time, order key, index) holds the
nodes whose prerequisites (edges, and the lane predecessor on an in-order lane) are all placed,
at the time they may start. The node popped takes the earliest free server of its lane (lowest
index on ties) at that time or when it frees. Popped times never decrease except after a
negative STREAM lag, so a shared lane serves first come, first served by ready time. Ties are
broken by (time, order key, index): the pass is deterministic. A node on an in-order lane (or
none) that holds no pool server is placed as soon as it is queued: its start is already known
and nothing else can use its lane meanwhile, so the heap would only delay the bookkeeping.

**Pools** (``OpGraph.hold_lane``/``hold_until``): a node that holds a pool server (a bounce-buffer
slot) takes one when it is popped, and keeps it until node ``hold_until`` finishes; the server
is then returned at that time (a heap event, before nodes at the same time) and goes to the
longest-waiting request. A request that finds every server held doubles the pool, up to the
lane's ``max_servers``; past that it waits. Should every unplaced node end up waiting on a pool
(each holder waits for a server only another waiter would return), the pool grows by one for the
first waiter, granted when it asked, as the driver would allocate a buffer rather than deadlock.

Barrier groups (one collective on all its ranks) are queued when all their members are ready and
start together, at the latest of their members' individual start times.

If a node has an explicit STREAM edge from the node just before it on its single-server in-order
lane, that edge, with its lag, replaces the lane constraint: this lets a STREAM edge with a
negative lag reproduce the measured overlap of consecutive kernels.

Cost: one topological sort (issue order, cycle detection) and one heap pass, O((E + V) log V).

Two implementations of the loops give the same results, field by field (tests/test_native_engine.py):

* the **compiled core** (``replay.pipeline._engine``, built by setup.py from replay/cpp): the C++ scheduler
  of replay/cpp/fastrack/engine.hh, which the standalone driver and the gem5 extension also
  compile. It reads the graph's arrays in place and writes into arrays allocated here;
* the **numba kernels** (replay/pipeline/engine_numba.py), the fallback when the extension is missing.
  ``FASTRACK_NO_JIT=1`` runs them as plain Python (same results, slower).

``FASTRACK_ENGINE`` chooses: ``native`` (the extension, an error if it is missing), ``numba`` (the
kernels), or ``auto`` / unset (the extension when it imports and ``FASTRACK_NO_JIT`` is unset,
else the kernels). A replay on the compiled core never imports numba (docs/performance.md,
"Compiled core").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from fastrack_core.errors import ConfigError, GraphError
from replay.graph import INDEX, NO_LANE, OpGraph

# How a node's start was bound (the ``bound_by`` result).
BOUND_RELEASE = -1  # by its release time (or time 0)
BOUND_LANE = -2  # by its lane being busy with the previous node (``crit_pred``)
BOUND_GROUP = -3  # by another member of its barrier group
# values >= 0 are DepKind codes: bound by that edge from ``crit_pred``. A node that also waited
# for a pool server after that has ``slot_wait`` > 0: it started that much later than it would have.

# status codes of both implementations (fastrack::Status in replay/cpp/fastrack/engine.hh)
_OK, _GROUP_EDGE, _CYCLE, _POOL_RETURN, _STUCK = 0, 1, 2, 3, 4

ENGINE_VAR = "FASTRACK_ENGINE"
ENGINES = ("auto", "native", "numba")


@dataclass(frozen=True)
class Schedule:
    """The replay's result for every node of a graph (indices as in the graph)."""

    start: np.ndarray  # int64 ns
    finish: np.ndarray  # int64 ns
    crit_pred: np.ndarray  # INDEX (int32): node whose finish/start bound this node's start, or -1
    bound_by: np.ndarray  # int8: BOUND_* or the DepKind of the binding edge
    order: np.ndarray  # INDEX (int32): the order in which the nodes were placed
    # int64 ns per node: how long its start waited for a pool server after it was otherwise ready
    # (0 when the wait did not bind); the critical path attributes it to BOUNCE_WAIT
    slot_wait: np.ndarray
    # int64 per lane: servers at the end of the replay (a pool's size after growing; else servers)
    lane_servers: np.ndarray

    @property
    def makespan(self) -> int:
        return int(self.finish.max() - min(0, int(self.start.min()))) if self.finish.size else 0


# ---------------------------------------------------------------------------------------------
# which implementation runs

_UNSET = object()
_native: ModuleType | None | object = _UNSET  # the extension module, None for the numba kernels


def _choose() -> ModuleType | None:
    choice = os.environ.get(ENGINE_VAR, "").strip().lower() or "auto"
    if choice not in ENGINES:
        raise ConfigError(f"environment variable {ENGINE_VAR}: '{choice[:20]}' is not one of {', '.join(ENGINES)}")
    if choice == "numba" or (choice == "auto" and os.environ.get("FASTRACK_NO_JIT")):
        return None
    try:
        from replay.pipeline import _engine
    except ImportError as e:
        if choice == "native":
            raise ConfigError(f"{ENGINE_VAR}=native, but the compiled core replay.pipeline._engine does not import ({e}); "
                              "build it with `pip install -e .` or `python setup.py build_ext --inplace`") from None
        return None
    return _engine


def native() -> ModuleType | None:
    """The compiled core (``replay.pipeline._engine``) when it is the engine in use, else None."""
    global _native
    if _native is _UNSET:
        _native = _choose()
    return _native  # type: ignore[return-value]


def engine_name() -> str:
    """``native`` (the compiled core) or ``numba`` (the kernels, compiled or, with
    ``FASTRACK_NO_JIT=1``, plain Python): what :func:`schedule` runs on."""
    return "native" if native() is not None else "numba"


def use_engine(name: str) -> str:
    """Switch the implementation for this process (``native``, ``numba`` or ``auto``, as
    ``FASTRACK_ENGINE``); returns the one in use before. For tests and benchmarks."""
    global _native
    before = engine_name()
    saved = os.environ.get(ENGINE_VAR)
    os.environ[ENGINE_VAR] = name
    try:
        _native = _choose()
    finally:
        if saved is None:
            os.environ.pop(ENGINE_VAR, None)
        else:
            os.environ[ENGINE_VAR] = saved
    return before


def _kernels():
    from replay.pipeline import engine_numba

    return engine_numba


def _arrays(graph: OpGraph) -> tuple[np.ndarray, ...]:
    """The graph's arrays as the compiled core reads them (fastrack::GraphView's order), in place
    when their dtypes are already the core's (always, for an OpGraph built by replay.pipeline.build)."""
    lanes = graph.lanes
    c = np.ascontiguousarray
    return (c(lanes.servers, np.int32), c(lanes.shared, np.bool_), c(lanes.max_servers, np.int32),
            c(graph.lane, np.int32), c(graph.dur, np.int64), c(graph.order, np.int64), c(graph.release, np.int64),
            c(graph.group, INDEX), c(graph.hold_lane, np.int32), c(graph.hold_until, INDEX),
            c(graph.dep_ptr, np.int64), c(graph.dep_src, INDEX), c(graph.dep_kind, np.uint8),
            c(graph.dep_lag, np.int64))


# ---------------------------------------------------------------------------------------------
# errors: the same messages whichever implementation found them

def _raise(graph: OpGraph, status: int, where: int, placed: int, order: np.ndarray | None) -> None:
    if status == _GROUP_EDGE:
        dst = int(np.searchsorted(graph.dep_ptr, where, side="right")) - 1
        raise GraphError(
            f"cycle: {graph.node_label(int(graph.dep_src[where]))} and {graph.node_label(dst)} "
            "are in the same collective group but one depends on the other"
        )
    if status == _CYCLE:
        _raise_cycle(graph, order[:placed])
    if status == _POOL_RETURN:
        raise GraphError(f"{graph.node_label(int(where))} returns a pool server (bounce slot) that a node it "
                         "does not depend on has not taken yet")
    if status == _STUCK:
        n = graph.n
        left = np.ones(n, bool)
        left[order[:placed]] = False
        raise GraphError(f"{n - placed} op(s) can never start, first {graph.node_label(int(np.flatnonzero(left)[0]))}")


def _raise_cycle(graph: OpGraph, placed: np.ndarray) -> None:
    import networkx as nx

    left = np.ones(graph.n, bool)
    left[placed] = False
    nodes = np.flatnonzero(left)
    g = nx.DiGraph()
    for i in nodes:
        for s in graph.deps_of(int(i)):
            if left[s]:
                g.add_edge(int(s), int(i))
    try:
        cycle = nx.find_cycle(g)
        ops = [graph.node_label(u) for u, _ in cycle[:6]]
        more = f" (+{len(cycle) - 6} more)" if len(cycle) > 6 else ""
        raise GraphError(f"dependency cycle through {len(cycle)} op(s): {' -> '.join(ops)}{more}")
    except nx.NetworkXNoCycle:  # a group spans nodes that wait on each other
        raise GraphError(f"{nodes.size} op(s) can never start, first {graph.node_label(int(nodes[0]))}") from None


# ---------------------------------------------------------------------------------------------
# the engine

def topological_order(graph: OpGraph) -> np.ndarray:
    """The issue order (in-order lanes serve in it); raises GraphError naming the ops of a cycle."""
    core = native()
    if core is not None:
        issue = np.empty(graph.n, INDEX)
        status, where, placed = core.topological_order(_arrays(graph), issue)
    else:
        status, where, placed, issue, _ = _kernels().topology(graph)
    _raise(graph, status, where, placed, issue)
    return issue


def is_acyclic(graph: OpGraph, extra_src: np.ndarray | None = None, extra_dst: np.ndarray | None = None) -> bool:
    """Whether :func:`topological_order` of ``graph`` plus the edges ``extra_src -> extra_dst``
    would succeed (same groups, same cycle rule), in linear time and without building that graph;
    call :func:`topological_order` on the graph with the edges when it is False, for the error."""
    core = native()
    if core is None:
        return _kernels().is_acyclic(graph, extra_src, extra_dst)
    if extra_src is None:
        extra_src = extra_dst = np.zeros(0, np.int64)
    return bool(core.is_acyclic(_arrays(graph), np.ascontiguousarray(extra_src, np.int64),
                                np.ascontiguousarray(extra_dst, np.int64)))


def schedule(graph: OpGraph) -> Schedule:
    """Replay a graph. Deterministic: the same graph always gives the same schedule."""
    graph.validate()
    core = native()
    if core is None:
        status, where, placed, out = _kernels().schedule(graph)
        order = out[0] if status in (_GROUP_EDGE, _CYCLE) else out[4]
    else:
        n = graph.n
        out = (np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, INDEX), np.empty(n, np.int8),
               np.empty(n, INDEX), np.empty(n, np.int64), np.empty(len(graph.lanes), np.int64))
        status, where, placed = core.schedule(_arrays(graph), out)
        order = out[4]
    _raise(graph, status, where, placed, order)
    start, finish, pred, bound, seq, slot_wait, size = out
    return Schedule(start=start, finish=finish, crit_pred=pred, bound_by=bound, order=seq, slot_wait=slot_wait,
                    lane_servers=size)


def retime(graph: OpGraph, seq: np.ndarray, pool_size: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Start and finish of every node placed in the order ``seq`` (the ``order`` of a schedule of a
    graph with the same nodes, edges, lanes and holds; only durations, lags and releases differ),
    with ``pool_size`` servers per pool from the start (at most the pool's maximum): each node starts when its prerequisites and
    its lane allow and, for a holder, when a pool server frees, but a shared lane (and a pool)
    serves in ``seq`` order instead of by ready time. On the durations ``seq`` came from it gives
    that schedule's start and finish; on others an estimate of them, which the work-conserving
    pass (:func:`schedule`) would give only where no shared lane reorders (docs/model.md,
    "Prediction ranges"). One pass in ``seq`` order, no heap, no issue order: a fraction of a
    schedule. None when ``seq`` does not fit the graph (see replay/cpp/fastrack/engine.hh,
    ``retimeWith``): the caller schedules instead."""
    n = graph.n
    seq = np.ascontiguousarray(seq, INDEX)
    if seq.shape != (n,) or np.shape(pool_size) != (len(graph.lanes),):
        return None
    # a pool grows past its maximum only to break a deadlock, at a time a fixed order cannot
    # know: re-timed within the maximum, such an order runs out of servers and is declined
    pool_size = np.ascontiguousarray(np.minimum(pool_size, graph.lanes.max_servers), np.int64)
    core = native()
    if core is None:
        return _kernels().retime(graph, seq, pool_size)
    start, finish = np.empty(n, np.int64), np.empty(n, np.int64)
    if not core.retime(_arrays(graph), seq, pool_size, start, finish):
        return None
    return start, finish


@dataclass(frozen=True)
class LaneSlack:
    """What one schedule of a graph says about its lanes' sizes (:func:`lane_slack`), enough to
    tell whether resizing lanes leaves that schedule as it is (:func:`resize_keeps_schedule`)."""

    bound: np.ndarray  # bool per lane: a node running on it started later for a free server (BOUND_LANE)
    # bool per lane: a holder of one of its servers started later for it (slot_wait > 0) or, perhaps
    # after waiting for it, for a free server of the lane it runs on (a wait then not recorded)
    waited: np.ndarray
    final: np.ndarray  # int64 per lane: its servers at the end (Schedule.lane_servers: a pool's grown size)
    monotone: bool  # no edge of the graph has a negative lag: the pass pops events in time order
    runs: np.ndarray  # bool per lane: a node runs on it
    holds: np.ndarray  # bool per lane: a node holds one of its servers (a pool)


def lane_slack(graph: OpGraph, sched: Schedule) -> LaneSlack:
    """The lanes' slack in ``sched``, a schedule of ``graph`` (a few values per lane)."""
    nl = len(graph.lanes)
    on, holder = graph.lane >= 0, graph.hold_lane >= 0
    lane_bound = sched.bound_by == BOUND_LANE
    bound = np.bincount(graph.lane[on & lane_bound], minlength=nl) > 0
    waited = np.bincount(graph.hold_lane[holder & ((sched.slot_wait > 0) | lane_bound)], minlength=nl) > 0
    return LaneSlack(bound=bound, waited=waited, final=np.asarray(sched.lane_servers, np.int64).copy(),
                     monotone=not bool(graph.dep_lag.size and graph.dep_lag.min() < 0),
                     runs=np.bincount(graph.lane[on], minlength=nl) > 0,
                     holds=np.bincount(graph.hold_lane[holder], minlength=nl) > 0)


def resize_keeps_schedule(lanes, slack: LaneSlack, servers: np.ndarray, max_servers: np.ndarray) -> bool:
    """Whether the graph whose lanes are ``lanes``, with their servers and maximum servers set to
    ``servers`` and ``max_servers`` (per lane), starts and finishes every node as the schedule ``slack`` came from
    (:func:`lane_slack`): True only where the scheduling rule makes it certain, lane by lane for
    every lane whose size changed and that a node uses:

    * a lane nodes **run on** must be shared (an in-order lane with one server reads an explicit
      STREAM edge instead of the lane, so its count is not only a count), gain or keep servers, and
      have bound no node's start: each node then found a free server at its time, and with more
      servers the earliest free one is free no later;
    * a **pool** (nodes hold its servers; none runs on it) must have kept every holder waiting 0 ns,
      never grown past its maximum (a deadlock broken by growing it), and keep a maximum of at
      least the size it grew to. Then at every request the servers held, the same at the same
      times, are fewer than that size, so a request at any starting size either finds a free
      server or doubles to one: no holder waits, whatever the new starting size. This needs the
      pass to pop in time order (``slack.monotone``): after a negative lag a request may wait for a
      server returned at an earlier time, with no wait recorded.

    The times are then those of the old schedule; the servers a node was given, its
    ``crit_pred`` through a lane and the lanes' final sizes may differ. tests/test_native_engine.py
    checks this rule against schedules of random graphs; a prediction range skips such points
    (replay/pipeline/ranges.py)."""
    servers = np.asarray(servers, np.int64)
    max_servers = np.asarray(max_servers, np.int64)
    if servers.shape != lanes.servers.shape or max_servers.shape != lanes.max_servers.shape:
        return False
    runs, holds = slack.runs, slack.holds
    changed = ((servers != lanes.servers) | (max_servers != lanes.max_servers)) & (runs | holds)
    for k in np.flatnonzero(changed):
        if runs[k] and holds[k]:
            return False
        if runs[k]:
            if not lanes.shared[k] or servers[k] < lanes.servers[k] or slack.bound[k]:
                return False
        elif (not slack.monotone or slack.waited[k] or slack.final[k] > lanes.max_servers[k]
              or max_servers[k] < slack.final[k] or servers[k] < 1):
            return False
    return True


__all__ = ["Schedule", "schedule", "retime", "topological_order", "is_acyclic", "engine_name", "use_engine",
           "LaneSlack", "lane_slack", "resize_keeps_schedule",
           "BOUND_GROUP", "BOUND_LANE", "BOUND_RELEASE", "NO_LANE"]
