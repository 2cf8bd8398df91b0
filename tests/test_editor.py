"""GraphEditor.build against a plain reference: every batch materialised per node, every edge put
through one stable sort by dependent (what the editor computed before its linear merge).
Hypothesis draws the base graph and a sequence of edits; the built graphs must agree on every
field, edge order included, with both forms of the edge merge (the twins numpy /
``replay.protocols._edit``, through tests/twins.py)."""

from __future__ import annotations

import numpy as np
import pytest
import twins
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.graph import NO_LANE, NODE_FIELDS, OpGraph
from replay.protocols import editor as editor_module
from replay.protocols.editor import PROVENANCE, GraphEditor
from replay.protocols.kinds import CATEGORY, KIND_NAMES, DerivedKind
from graphs import make_graph

KINDS = list(DerivedKind)

class ReferenceEditor:
    """The editor's contract, written the obvious way."""

    def __init__(self, g: OpGraph):
        self.g, self.n0, self.count = g, g.n, g.n
        self.nodes: list[dict[str, np.ndarray]] = []
        self.edges: list[tuple[np.ndarray, ...]] = []
        self.holds: list[tuple[np.ndarray, ...]] = []
        self.dur = g.dur.astype(np.int64)
        self.src = g.dep_src.astype(np.int64)
        self.lag = g.dep_lag.astype(np.int64)
        self.names = list(g.names)
        self.lanes = g.lanes
        self.op_base = int(g.op_id.max()) + 1 if g.n else 0
        self.release = min(0, int(g.release.min())) if g.n else 0

    def add_nodes(self, kind, anchor, lane, dur, nbytes=0, order=None):
        anchor = np.asarray(anchor, np.int64)
        m = anchor.size
        idx = np.arange(self.count, self.count + m)
        if m == 0:
            return idx
        if kind.label not in self.names:
            self.names.append(kind.label)
        cols = {f: getattr(self.g, f)[anchor] for f in PROVENANCE}
        full = lambda v: np.broadcast_to(np.asarray(v), (m,)).astype(np.int64)  # noqa: E731
        cols.update(op_id=self.op_base + idx - self.n0, kind=full(int(kind)), category=full(int(CATEGORY[kind])),
                    lane=full(np.asarray(lane, np.int32)), dur=full(dur), bytes=full(nbytes),
                    name=full(self.names.index(kind.label)),
                    order=self.g.order[anchor] if order is None else full(order), release=full(self.release),
                    group=full(-1), captured_start=full(-1), captured_dur=full(-1))
        self.nodes.append(cols)
        self.count += m
        return idx

    def add_edges(self, src, dst, kind, lag=0):
        src, dst = np.broadcast_arrays(np.asarray(src, np.int64), np.asarray(dst, np.int64))
        lag = np.broadcast_to(np.asarray(lag, np.int64), src.shape)
        keep = (src >= 0) & (dst >= 0)
        self.edges.append((src[keep], dst[keep], np.full(int(keep.sum()), kind, np.uint8), lag[keep]))

    def add_holds(self, holder, until, pool):
        holder = np.asarray(holder, np.int64)
        self.holds.append((holder, np.broadcast_to(until, holder.shape), np.broadcast_to(pool, holder.shape)))

    def build(self) -> OpGraph:
        g, n = self.g, self.count
        cols = {}
        for f in NODE_FIELDS:
            base = self.dur if f == "dur" else getattr(g, f)
            cols[f] = np.concatenate([base] + [c[f] for c in self.nodes]).astype(base.dtype)
        old_dst = np.repeat(np.arange(self.n0), np.diff(g.dep_ptr))
        all_dst = np.concatenate([old_dst] + [e[1] for e in self.edges])
        order = np.argsort(all_dst, kind="stable")
        cat = lambda old, i, dt: np.concatenate([old] + [e[i] for e in self.edges]).astype(dt)[order]  # noqa: E731
        ptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(all_dst, minlength=n), out=ptr[1:])
        hold_lane = np.r_[g.hold_lane, np.full(n - self.n0, NO_LANE)].astype(np.int32)
        hold_until = np.r_[g.hold_until, np.full(n - self.n0, -1)].astype(np.int64)
        for holder, until, pool in self.holds:
            hold_lane[holder], hold_until[holder] = pool, until
        return OpGraph(**cols, dep_ptr=ptr, dep_src=cat(self.src, 0, np.int64), dep_kind=cat(g.dep_kind, 2, np.uint8),
                       dep_lag=cat(self.lag, 3, np.int64), lanes=self.lanes, names=tuple(self.names),
                       kind_names={**g.kind_names, **KIND_NAMES}, hold_lane=hold_lane, hold_until=hold_until)


@st.composite
def base_graphs(draw):
    n = draw(st.integers(1, 12))
    m = draw(st.integers(0, 30))
    ints = lambda lo, hi, k: np.array(draw(st.lists(st.integers(lo, hi), min_size=k, max_size=k)), np.int64)  # noqa: E731
    edges = (ints(0, n - 1, m), ints(0, n - 1, m), ints(0, 7, m), ints(-50, 50, m))
    return make_graph(n, edges, dur=ints(0, 100, n), order=ints(0, 1000, n), lane=ints(-1, 2, n),
                      rank=ints(0, 1, n), bytes=ints(0, 10**6, n), release=ints(-5, 5, n))


@st.composite
def edits(draw, g: OpGraph):
    """A list of (operation, arguments) applied to both editors in turn."""
    ops, count = [], g.n
    ints = lambda lo, hi, k: np.array(draw(st.lists(st.integers(lo, hi), min_size=k, max_size=k)), np.int64)  # noqa: E731
    for _ in range(draw(st.integers(0, 8))):
        what = draw(st.sampled_from(["nodes", "edges", "edges", "dur", "src", "lag", "dur", "src", "lag", "holds"]))
        if what == "nodes":
            k = draw(st.integers(0, 6))
            scalar = draw(st.booleans())
            lane = int(ints(-1, 2, 1)[0]) if scalar else ints(-1, 2, k)
            dur = int(ints(0, 99, 1)[0]) if scalar else ints(0, 99, k)
            order = draw(st.sampled_from([None, "scalar", "array"]))
            order = None if order is None else (5 if order == "scalar" else ints(0, 2000, k))
            ops.append(("add_nodes", (draw(st.sampled_from(KINDS)), ints(0, g.n - 1, k), lane, dur,
                                      ints(0, 9, k) if draw(st.booleans()) else 7, order)))
            count += k
        elif what == "edges":
            k = draw(st.integers(0, 10))
            lag = ints(-9, 9, k) if draw(st.booleans()) else 3
            dst = ints(-1, count - 1, k)
            if draw(st.booleans()):
                dst = np.sort(dst)  # presorted batches take the no-sort path
            ops.append(("add_edges", (ints(-1, count - 1, k), dst, draw(st.integers(0, 7)), lag)))
        elif what == "holds" and count > 1:
            k = draw(st.integers(0, 3))
            ops.append(("add_holds", (ints(0, count - 1, k), ints(0, count - 1, k), 1)))
        elif what in ("dur", "src", "lag"):
            size = g.n if what == "dur" else g.num_edges
            if size:
                k = draw(st.integers(1, 3))
                ops.append((what, (ints(0, size - 1, k), ints(0, g.n - 1 if what == "src" else 50, k),
                                   draw(st.booleans()))))
    return ops


def _apply(ed, ops) -> OpGraph:
    for name, args in ops:
        if name in ("dur", "src", "lag"):
            idx, value, sparse = args
            if isinstance(ed, ReferenceEditor):
                getattr(ed, name)[idx] = value
            elif sparse:  # recorded as edits over the input's array; read back through *_at
                setter = {"dur": ed.set_dur, "src": ed.set_edge_src, "lag": ed.set_edge_lag}[name]
                getter = {"dur": ed.dur_at, "src": ed.edge_src_at, "lag": ed.edge_lag_at}[name]
                setter(idx, value)
                assert np.array_equal(getter(idx[-1:]), value[-1:])
            else:  # the whole array, materialised
                {"dur": ed.dur, "src": ed.edge_src, "lag": ed.edge_lag}[name][idx] = value
        else:
            getattr(ed, name)(*args)
    return ed.build()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_build_equals_reference(data):
    g = data.draw(base_graphs())
    ops = data.draw(edits(g))
    twins.agree("edit", lambda: _apply(GraphEditor(g), ops), expect=_apply(ReferenceEditor(g), ops))


def test_input_graph_untouched_and_batches_snapshot_their_arrays():
    twins.agree("edit", _untouched_and_snapshot)


def _untouched_and_snapshot():
    g = make_graph(3, [(0, 1, 0, 5), (1, 2, 0, 0)], dur=[1, 2, 3])
    before = {f: getattr(g, f).copy() for f in NODE_FIELDS}
    ed = GraphEditor(g)
    lane = np.array([0, 1])
    ed.add_nodes(DerivedKind.PCIE, np.array([0, 2]), lane, np.array([4, 5]))
    lag = np.array([7, 8])
    ed.add_edges(np.array([3, 4]), np.array([2, 0]), 1, lag)
    lane[:] = 9  # later changes to the caller's arrays do not reach the graph
    lag[:] = 9
    ed.dur[0] = 42
    out = ed.build()
    assert all(np.array_equal(getattr(g, f), before[f]) for f in NODE_FIELDS)
    assert out.lane[3:].tolist() == [0, 1] and out.dur.tolist() == [42, 2, 3, 4, 5]
    # dependent 0 gets its new edge; dependent 2 keeps its old edge first, then the new one
    assert out.dep_ptr.tolist() == [0, 1, 2, 4, 4, 4]
    assert out.dep_src.tolist() == [4, 0, 1, 3] and out.dep_lag.tolist() == [8, 5, 0, 7]
    return out


@twins.needs_native("edit")
@pytest.mark.parametrize("src, dst", [(0, 5), (5, 1), (2**31, 1), (-1, 1)])
def test_compiled_merge_refuses_an_edge_from_or_to_no_node(src, dst):
    """A new edge's source is stored as a 32-bit node index: one that is not a node is refused,
    never wrapped. (That the module is built wherever it can be: tests/test_native_engine.py.)"""
    g = make_graph(2, [(0, 1, 0, 0)])
    with pytest.raises(ValueError, match="source or dependent is not a node"):
        editor_module._edit.merge_edges(g.dep_ptr, g.dep_src, g.dep_kind, g.dep_lag,
                                        [(np.array([src]), np.array([dst]), np.zeros(1, np.uint8),
                                          np.zeros(1, np.int64))],
                                        np.empty(3, np.int64), np.empty(2, np.int32), np.empty(2, np.uint8),
                                        np.empty(2, np.int64))
