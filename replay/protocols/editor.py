"""Vectorised editing of an :class:`~replay.graph.OpGraph` into a new one (the input is never touched).

Transforms append nodes in batches (numpy arrays, one entry per new node), append edges in
batches, change durations of existing nodes, rewrite the source of existing edges, and finally
:meth:`GraphEditor.build` a new graph with a fresh CSR. Every derived node copies provenance
(:data:`PROVENANCE`: ``origin``, ``rank``, ``step``, copy attributes) from an *anchor*: the trace
node it derives from. :func:`copy_in_edges` gives new nodes the prerequisites of existing ones.
"""

from __future__ import annotations

import numpy as np

from replay.graph import NO_LANE, NODE_FIELDS, OpGraph, stable_argsort

from .kinds import CATEGORY, KIND_NAMES, DerivedKind

# Per-node fields a derived node copies from its anchor.
PROVENANCE = ("origin", "rank", "copy_dir", "host_mem", "step")


class GraphEditor:
    def __init__(self, graph: OpGraph):
        self.g = graph
        self.n0 = graph.n
        self._count = graph.n
        self._nodes: list[dict[str, np.ndarray]] = []
        self._edges: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        # existing arrays that transforms may change (copied on first write)
        self._dur: np.ndarray | None = None
        self._src: np.ndarray | None = None
        self._lag: np.ndarray | None = None
        self._names = list(graph.names)
        self._name_index = {nm: i for i, nm in enumerate(self._names)}
        self._dst: np.ndarray | None = None
        self.lanes = graph.lanes  # transforms may add lanes (pools)
        self._holds: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        base = int(graph.op_id.max()) + 1 if graph.n else 0
        self._op_base = base
        self._release = np.int64(min(0, int(graph.release.min()))) if graph.n else np.int64(0)

    # ----------------------------------------------------------------------- existing graph
    @property
    def edge_dst(self) -> np.ndarray:
        """Dependent node of every existing edge (CSR expanded)."""
        if self._dst is None:
            self._dst = np.repeat(np.arange(self.n0, dtype=np.int64), np.diff(self.g.dep_ptr))
        return self._dst

    @property
    def dur(self) -> np.ndarray:
        if self._dur is None:
            self._dur = self.g.dur.astype(np.int64, copy=True)
        return self._dur

    @property
    def edge_src(self) -> np.ndarray:
        if self._src is None:
            self._src = self.g.dep_src.astype(np.int64, copy=True)
        return self._src

    @property
    def edge_lag(self) -> np.ndarray:
        if self._lag is None:
            self._lag = self.g.dep_lag.astype(np.int64, copy=True)
        return self._lag

    @property
    def count(self) -> int:
        """Number of nodes so far (existing + added)."""
        return self._count

    # ------------------------------------------------------------------------------- adding
    def add_nodes(self, kind: DerivedKind, anchor: np.ndarray, lane: np.ndarray, dur: np.ndarray,
                  nbytes: np.ndarray | int = 0, order: np.ndarray | None = None) -> np.ndarray:
        """Append one node of ``kind`` per entry of ``anchor`` (existing node indices); returns
        the new nodes' indices. ``order`` defaults to the anchors' order key."""
        anchor = np.asarray(anchor, dtype=np.int64)
        m = anchor.shape[0]
        idx = np.arange(self._count, self._count + m, dtype=np.int64)
        if m == 0:
            return idx
        g = self.g
        name = self._name_index.get(kind.label)
        if name is None:
            name = len(self._names)
            self._names.append(kind.label)
            self._name_index[kind.label] = name
        cols = {f: getattr(g, f)[anchor] for f in PROVENANCE}
        cols.update(
            op_id=self._op_base + idx - self.n0,
            kind=np.full(m, int(kind), np.int8),
            category=np.full(m, int(CATEGORY[kind]), np.int8),
            lane=np.broadcast_to(np.asarray(lane, np.int32), (m,)).astype(np.int32),
            dur=np.broadcast_to(np.asarray(dur, np.int64), (m,)).astype(np.int64),
            bytes=np.broadcast_to(np.asarray(nbytes, np.int64), (m,)).astype(np.int64),
            name=np.full(m, name, np.int32),
            order=(g.order[anchor] if order is None else np.broadcast_to(np.asarray(order, np.int64), (m,))).astype(
                np.int64),
            release=np.full(m, self._release, np.int64),
            group=np.full(m, -1, np.int64),
            captured_start=np.full(m, -1, np.int64),
            captured_dur=np.full(m, -1, np.int64),
        )
        self._nodes.append(cols)
        self._count += m
        return idx

    def add_edges(self, src: np.ndarray, dst: np.ndarray, kind: int, lag: np.ndarray | int = 0) -> None:
        """Append edges ``src -> dst`` (broadcast ``kind``/``lag``); entries with src < 0 or dst < 0 are skipped."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        src, dst = np.broadcast_arrays(src, dst)
        lag = np.broadcast_to(np.asarray(lag, np.int64), src.shape)
        kinds = np.broadcast_to(np.asarray(kind, np.uint8), src.shape)
        keep = (src >= 0) & (dst >= 0)
        if not keep.all():
            src, dst, lag, kinds = src[keep], dst[keep], lag[keep], kinds[keep]
        if src.size:
            self._edges.append((src.copy(), dst.copy(), kinds.astype(np.uint8), lag.astype(np.int64)))

    def add_holds(self, holder: np.ndarray, until: np.ndarray, pool_lane: np.ndarray | int) -> None:
        """Node ``holder[i]`` takes a server of pool lane ``pool_lane[i]`` when it is ready to start
        and returns it when node ``until[i]`` finishes (see :class:`~replay.graph.OpGraph`)."""
        holder = np.asarray(holder, dtype=np.int64)
        until = np.broadcast_to(np.asarray(until, np.int64), holder.shape)
        pool = np.broadcast_to(np.asarray(pool_lane, np.int32), holder.shape)
        if holder.size:
            self._holds.append((holder.copy(), until.astype(np.int64), pool.astype(np.int32)))

    # -------------------------------------------------------------------------------- build
    def build(self) -> OpGraph:
        g = self.g
        cols = {}
        for f in NODE_FIELDS:
            base = self.dur if (f == "dur" and self._dur is not None) else getattr(g, f)
            parts = [base] + [nd[f] for nd in self._nodes]
            cols[f] = np.concatenate(parts).astype(base.dtype, copy=False) if len(parts) > 1 else base.copy()
        n = self._count
        src = self.edge_src if self._src is not None else g.dep_src
        lag = self.edge_lag if self._lag is not None else g.dep_lag
        if self._edges:
            e_src = np.concatenate([e[0] for e in self._edges])
            e_dst = np.concatenate([e[1] for e in self._edges])
            e_kind = np.concatenate([e[2] for e in self._edges])
            e_lag = np.concatenate([e[3] for e in self._edges])
            # one stable sort: timsort merges the presorted runs (existing edges are grouped by
            # dependent; each batch of new edges mostly is), and keeps existing edges first
            all_dst = np.concatenate([self.edge_dst, e_dst])
            order = stable_argsort(all_dst)
            dep_src = np.concatenate([src, e_src])[order]
            dep_kind = np.concatenate([g.dep_kind, e_kind])[order]
            dep_lag = np.concatenate([lag, e_lag])[order]
            counts = np.bincount(all_dst, minlength=n)
        else:
            dep_src, dep_kind, dep_lag = src.copy(), g.dep_kind.copy(), lag.copy()
            counts = np.bincount(self.edge_dst, minlength=n)
        dep_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=dep_ptr[1:])
        kind_names = dict(g.kind_names)
        kind_names.update(KIND_NAMES)
        hold_lane = np.full(n, NO_LANE, np.int32)
        hold_until = np.full(n, -1, np.int64)
        hold_lane[: self.n0] = g.hold_lane
        hold_until[: self.n0] = g.hold_until
        for holder, until, pool in self._holds:
            hold_lane[holder] = pool
            hold_until[holder] = until
        return OpGraph(
            **cols,
            dep_ptr=dep_ptr,
            dep_src=dep_src.astype(np.int64, copy=False),
            dep_kind=dep_kind.astype(np.uint8, copy=False),
            dep_lag=dep_lag.astype(np.int64, copy=False),
            lanes=self.lanes,
            names=tuple(self._names),
            kind_names=kind_names,
            hold_lane=hold_lane,
            hold_until=hold_until,
        )


def copy_in_edges(ed: GraphEditor, node: np.ndarray, head: np.ndarray) -> None:
    """Give each ``head[i]`` a copy of every prerequisite edge of the existing node ``node[i]``
    (with the edges' current sources and lags)."""
    g = ed.g
    lo, hi = g.dep_ptr[node], g.dep_ptr[node + 1]
    cnt = hi - lo
    if cnt.sum() == 0:
        return
    rep_head = np.repeat(head, cnt)
    offs = np.arange(int(cnt.sum()), dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    e = np.repeat(lo, cnt) + offs
    kinds = g.dep_kind[e]
    src = ed.edge_src[e]
    lag = ed.edge_lag[e]
    for k in np.unique(kinds):
        sel = kinds == k
        ed.add_edges(src[sel], rep_head[sel], int(k), lag[sel])


def lanes_required(lane: np.ndarray, what: str) -> None:
    from fastrack.errors import GraphError

    if np.any(lane == NO_LANE):
        raise GraphError(f"hardware model did not provide the {what} lane for every rank (call model.add_lanes)")
