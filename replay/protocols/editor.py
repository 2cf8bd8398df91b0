"""Vectorised editing of an :class:`~replay.graph.OpGraph` into a new one (the input is never touched).

Transforms append nodes in batches (numpy arrays, one entry per new node; a scalar attribute
is kept once per batch), append edges in batches, change durations of existing nodes and the
sources and lags of existing edges (recorded as sparse edits over the input's arrays, which are
never written), and finally :meth:`GraphEditor.build` a new graph: node columns allocated once,
the new edges merged into the existing CSR in linear time (by the compiled
``replay.protocols._edit`` where it is built, else by numpy; both give the same arrays, see
tests/test_editor.py). Every derived node copies provenance (:data:`PROVENANCE`: ``origin``,
``rank``, ``step``, copy attributes) from an *anchor*: the trace node it derives from.
:func:`copy_in_edges` gives new nodes the prerequisites of existing ones.
"""

from __future__ import annotations

import numpy as np

from fastrack_core.memory import release_when_large

from replay.graph import INDEX, NO_LANE, NODE_FIELDS, OpGraph, stable_argsort

from .kinds import CATEGORY, KIND_NAMES, DerivedKind

try:  # the compiled edge merge (setup.py ACCELERATORS); the numpy merge below gives the same arrays
    from . import _edit
except ImportError:  # pragma: no cover - depends on the build
    _edit = None

# Per-node fields a derived node copies from its anchor.
PROVENANCE = ("origin", "rank", "copy_dir", "host_mem", "step")


class GraphEditor:
    def __init__(self, graph: OpGraph):
        self.g = graph
        self.n0 = graph.n
        self._count = graph.n
        self._nodes: list[_NodeBatch] = []
        self._edges: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._built = False
        # existing arrays that transforms may change: sparse edits over the input's arrays (a full
        # copy only where a caller asks for the whole array through .dur/.edge_src/.edge_lag)
        self._dur = _Overlay(graph.dur, np.int64)
        self._src = _Overlay(graph.dep_src, INDEX)
        self._lag = _Overlay(graph.dep_lag, np.int64)
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

    # Current values of existing nodes' durations and existing edges' sources and lags: read with
    # ``*_at``, change with ``set_*``. The properties give the whole array, writable (a full copy).
    def dur_at(self, i: np.ndarray) -> np.ndarray:
        return self._dur.get(i)

    def set_dur(self, i: np.ndarray, value: np.ndarray | int) -> None:
        self._dur.set(i, value)

    def edge_src_at(self, e: np.ndarray) -> np.ndarray:
        return self._src.get(e)

    def set_edge_src(self, e: np.ndarray, value: np.ndarray | int) -> None:
        self._src.set(e, value)

    def edge_lag_at(self, e: np.ndarray) -> np.ndarray:
        return self._lag.get(e)

    def set_edge_lag(self, e: np.ndarray, value: np.ndarray | int) -> None:
        self._lag.set(e, value)

    @property
    def dur(self) -> np.ndarray:
        return self._dur.dense()

    @property
    def edge_src(self) -> np.ndarray:
        return self._src.dense()

    @property
    def edge_lag(self) -> np.ndarray:
        return self._lag.dense()

    @property
    def count(self) -> int:
        """Number of nodes so far (existing + added)."""
        return self._count

    # ------------------------------------------------------------------------------- adding
    def add_nodes(self, kind: DerivedKind, anchor: np.ndarray, lane: np.ndarray, dur: np.ndarray,
                  nbytes: np.ndarray | int = 0, order: np.ndarray | None = None) -> np.ndarray:
        """Append one node of ``kind`` per entry of ``anchor`` (existing node indices); returns
        the new nodes' indices. ``order`` defaults to the anchors' order key. ``lane``, ``dur``,
        ``nbytes`` and ``order`` broadcast (a scalar is stored once, not once per node)."""
        anchor = np.asarray(anchor, dtype=np.int64)
        m = anchor.shape[0]
        idx = np.arange(self._count, self._count + m, dtype=np.int64)
        if m == 0:
            return idx
        name = self._name_index.get(kind.label)
        if name is None:
            name = len(self._names)
            self._names.append(kind.label)
            self._name_index[kind.label] = name

        def column(value, dtype):
            value = np.asarray(value, dtype)
            if value.ndim:  # an array: its values now (the caller may change its own later)
                return np.array(np.broadcast_to(value, (m,)), dtype)
            return value

        self._nodes.append(_NodeBatch(
            start=self._count, anchor=anchor.copy(), kind=int(kind), category=int(CATEGORY[kind]), name=name,
            lane=column(lane, np.int32), dur=column(dur, np.int64), nbytes=column(nbytes, np.int64),
            order=None if order is None else column(order, np.int64)))
        self._count += m
        return idx

    def add_edges(self, src: np.ndarray, dst: np.ndarray, kind: int, lag: np.ndarray | int = 0) -> None:
        """Append edges ``src -> dst`` (broadcast ``kind``/``lag``); entries with src < 0 or dst < 0 are skipped."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        src, dst = np.broadcast_arrays(src, dst)
        # a scalar kind or lag is kept once for the whole batch
        lag = np.asarray(lag, np.int64)
        kind = np.asarray(kind, np.uint8)
        lag = np.broadcast_to(lag, src.shape) if lag.ndim else lag
        kind = np.broadcast_to(kind, src.shape) if kind.ndim else kind
        keep = (src >= 0) & (dst >= 0)
        if keep.all():
            src, dst = src.copy(), dst.copy()
            lag, kind = (v.copy() if v.ndim else v for v in (lag, kind))
        else:
            src, dst = src[keep], dst[keep]
            lag, kind = (v[keep] if v.ndim else v for v in (lag, kind))
        if src.size:
            self._edges.append((src, dst, kind, lag))

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
        """The edited graph (once per editor: the edits are released as it builds). Node arrays: the existing nodes, then every batch in the order added.
        Edges (CSR by dependent): for each dependent, its existing edges first (in their order),
        then its new edges in the order they were added: exactly a stable sort of the existing
        edges followed by the new ones by dependent, computed as a linear merge of the existing
        CSR with the new edges (stable-sorted by dependent among themselves only)."""
        g = self.g
        n, n0 = self._count, self.n0
        if self._built:
            raise RuntimeError("GraphEditor.build() may be called once (it releases the edits as it builds)")
        self._built = True
        self._dst = None  # (memory: the expanded dependents of the input's edges are not needed to build)
        dep_ptr, dep_src, dep_kind, dep_lag = self._merged_edges()
        # (memory: the new edges and the edited sources and lags, full copies of the input's
        # arrays when a transform asked for them, are in the merged arrays: freed before the
        # node columns)
        self._edges = []
        self._src = self._lag = None
        release_when_large()
        # memory: the fields that read the batches' anchors first, then each batch array is released
        # once its column is built, so the build's peak holds little beyond the two graphs
        cols = {}
        anchored = [f for f in NODE_FIELDS if f in PROVENANCE or f == "order"]
        for f in anchored + [f for f in NODE_FIELDS if f not in anchored]:
            cols[f] = self._node_column(f)
            freed = f == anchored[-1] or f in _BATCH_ARRAYS  # (dur is one of those: the edited durations go too)
            if f == "dur":
                self._dur = None  # (the edited durations, perhaps a full copy, are in the column)
            if f == anchored[-1]:
                for b in self._nodes:
                    b.anchor = b.order = None
            elif f in _BATCH_ARRAYS:
                for b in self._nodes:
                    setattr(b, _BATCH_ARRAYS[f], None)
            if freed:  # (glibc keeps the freed batches' heap pages otherwise: 10M ops, -250 MiB; a trim
                release_when_large()  # where nothing was freed would only make the next column fault its pages in)
        self._nodes = []
        kind_names = dict(g.kind_names)
        kind_names.update(KIND_NAMES)
        hold_lane = np.full(n, NO_LANE, np.int32)
        hold_until = np.full(n, -1, INDEX)
        hold_lane[:n0] = g.hold_lane
        hold_until[:n0] = g.hold_until
        for holder, until, pool in self._holds:
            hold_lane[holder] = pool
            hold_until[holder] = until
        return OpGraph(
            **cols,
            dep_ptr=dep_ptr,
            dep_src=dep_src,
            dep_kind=dep_kind,
            dep_lag=dep_lag,
            lanes=self.lanes,
            names=tuple(self._names),
            kind_names=kind_names,
            hold_lane=hold_lane,
            hold_until=hold_until,
        )

    def _node_column(self, f: str) -> np.ndarray:
        """Per-node field ``f`` of the built graph, allocated once (dtype: the input graph's)."""
        g = self.g
        base = getattr(g, f)
        edited = f == "dur" and (self._dur.full is not None or self._dur.idx.size)
        out = np.empty(self._count, np.int64 if edited else base.dtype)  # (edited durations are int64)
        if f == "dur":
            self._dur.write_to(out[: self.n0])
        else:
            out[: self.n0] = base
        for b in self._nodes:
            part = out[b.start : b.start + b.count]
            if f in PROVENANCE or (f == "order" and b.order is None):
                np.take(base, b.anchor, out=part)  # (dur is no provenance field: base is g's own)
            elif f == "order":
                part[:] = b.order
            elif f == "op_id":  # ids above the trace's, in node order
                part[:] = np.arange(part.size, dtype=np.int64)
                part += self._op_base + b.start - self.n0
            else:
                part[:] = _BATCH_VALUE[f](self, b)
        return out

    def _merged_edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        g = self.g
        n, n0 = self._count, self.n0
        src, lag = self._src.array, self._lag.array  # the input's (or a full copy), edits applied after
        old_ptr = g.dep_ptr
        e0 = int(src.shape[0])
        if not self._edges:
            dep_ptr = np.empty(n + 1, np.int64)
            dep_ptr[: n0 + 1] = old_ptr
            dep_ptr[n0 + 1 :] = e0
            return (dep_ptr, self._src.write_to(np.empty(e0, INDEX)), g.dep_kind.astype(np.uint8, copy=True),
                    self._lag.write_to(np.empty(e0, np.int64)))
        if _edit is not None:
            m = sum(int(e[0].shape[0]) for e in self._edges)
            out = (np.empty(n + 1, np.int64), np.empty(e0 + m, INDEX), np.empty(e0 + m, np.uint8),
                   np.empty(e0 + m, np.int64))
            batches = [(s, d, np.asarray(k, np.uint8).reshape(-1), np.asarray(x, np.int64).reshape(-1))
                       for s, d, k, x in self._edges]
            _edit.merge_edges(np.ascontiguousarray(old_ptr, np.int64), np.ascontiguousarray(src, INDEX),
                              np.ascontiguousarray(g.dep_kind, np.uint8), np.ascontiguousarray(lag, np.int64),
                              batches, *out, self._src.idx, np.ascontiguousarray(self._src.val, INDEX),
                              self._lag.idx, np.ascontiguousarray(self._lag.val, np.int64))
            return out
        e_dst = np.concatenate([e[1] for e in self._edges]) if len(self._edges) > 1 else self._edges[0][1]
        m = int(e_dst.shape[0])
        counts = np.bincount(e_dst, minlength=n)
        counts[:n0] += np.diff(old_ptr)
        dep_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=dep_ptr[1:])
        del counts
        # the new edges in stable order of their dependent, and where each lands: after every
        # existing edge of a dependent <= its own, after the new edges sorted before it
        presorted = m < 2 or bool(np.all(e_dst[1:] >= e_dst[:-1]))
        order = None if presorted else stable_argsort(e_dst)
        if order is None:
            key = e_dst + 1
        else:
            key = e_dst[order]
            key += 1
        del e_dst
        np.minimum(key, n0, out=key)
        pos = np.take(old_ptr, key)
        del key
        pos += np.arange(m, dtype=np.int64)
        total = e0 + m
        old_slot = np.ones(total, bool)
        old_slot[pos] = False

        def merged(old: np.ndarray, which: int, dtype) -> np.ndarray:
            out = np.empty(total, dtype)
            out[old_slot] = old
            new = _concat_part(self._edges, which, dtype)
            out[pos] = new if order is None else new[order]
            return out

        dep_src = merged(src, 0, INDEX)
        dep_kind = merged(g.dep_kind, 2, np.uint8)
        dep_lag = merged(lag, 3, np.int64)
        return self._edited((dep_ptr, dep_src, dep_kind, dep_lag))

    def _edited(self, merged: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        """The sparse source/lag edits of existing edges written at their places in the merged CSR:
        existing edge ``e`` of dependent ``d`` moved by ``ptr[d] - old_ptr[d]``."""
        ptr, dep_src, _, dep_lag = merged
        old_ptr = self.g.dep_ptr
        for ov, out in ((self._src, dep_src), (self._lag, dep_lag)):
            if ov.idx.size:
                d = np.searchsorted(old_ptr, ov.idx, side="right") - 1  # their dependents
                out[ov.idx + (ptr[d] - old_ptr[d])] = ov.val
        return merged


class _Overlay:
    """An array of the input graph with sparse edits, never written itself: ``idx`` (sorted, unique)
    and ``val`` hold the changed entries, until :meth:`dense` makes a full copy (then that copy is
    the current array and ``idx`` is empty)."""

    def __init__(self, base: np.ndarray, dtype):
        self.base = base
        self.dtype = np.dtype(dtype)
        self.full: np.ndarray | None = None
        self.idx = np.zeros(0, np.int64)
        self.val = np.zeros(0, self.dtype)

    @property
    def array(self) -> np.ndarray:
        """The full copy if there is one, else the input's array (edits in ``idx``/``val``)."""
        return self.full if self.full is not None else self.base

    def get(self, i) -> np.ndarray:
        i = np.asarray(i, np.int64)
        if self.full is not None:
            return self.full[i]
        out = self.base[i].astype(self.dtype)
        if self.idx.size and i.size:
            pos = np.minimum(np.searchsorted(self.idx, i), self.idx.size - 1)
            hit = self.idx[pos] == i
            out[hit] = self.val[pos[hit]]
        return out

    def set(self, i, value) -> None:
        i = np.asarray(i, np.int64)
        value = np.broadcast_to(np.asarray(value, self.dtype), i.shape)
        if self.full is not None:
            self.full[i] = value
            return
        if not i.size:
            return
        # the latest value of every index: stable order by index, last of each run
        idx = np.concatenate([self.idx, i.ravel()])
        val = np.concatenate([self.val, value.ravel()])
        order = stable_argsort(idx)
        idx, val = idx[order], val[order]
        last = np.r_[idx[1:] != idx[:-1], True]
        self.idx, self.val = idx[last], val[last]

    def dense(self) -> np.ndarray:
        if self.full is None:
            self.full = self.write_to(np.empty(self.base.shape[0], self.dtype))
            self.idx, self.val = self.idx[:0], self.val[:0]
        return self.full

    def write_to(self, out: np.ndarray) -> np.ndarray:
        """The current values into ``out`` (the array's length)."""
        out[:] = self.array
        if self.idx.size:
            out[self.idx] = self.val
        return out


class _NodeBatch:
    """One :meth:`GraphEditor.add_nodes` call: nodes ``start .. start + len(anchor) - 1``."""

    __slots__ = ("start", "count", "anchor", "kind", "category", "name", "lane", "dur", "nbytes", "order")

    def __init__(self, start, anchor, kind, category, name, lane, dur, nbytes, order):
        self.start, self.anchor, self.kind, self.category, self.name = start, anchor, kind, category, name
        self.count = anchor.shape[0]
        self.lane, self.dur, self.nbytes, self.order = lane, dur, nbytes, order


# what a batch gives each per-node field that is neither provenance, order nor op_id
# per-node fields whose batch values live in a batch attribute of their own (released once built)
_BATCH_ARRAYS = {"lane": "lane", "dur": "dur", "bytes": "nbytes"}

_BATCH_VALUE = {
    "kind": lambda ed, b: b.kind,
    "category": lambda ed, b: b.category,
    "lane": lambda ed, b: b.lane,
    "dur": lambda ed, b: b.dur,
    "bytes": lambda ed, b: b.nbytes,
    "name": lambda ed, b: b.name,
    "release": lambda ed, b: ed._release,
    "group": lambda ed, b: -1,
    "captured_start": lambda ed, b: -1,
    "captured_dur": lambda ed, b: -1,
}


def _concat_part(edges: list, which: int, dtype) -> np.ndarray:
    """Field ``which`` of every edge batch (src, dst, kind, lag), scalars broadcast, as one array."""
    parts = [np.broadcast_to(np.asarray(e[which], dtype), e[0].shape) for e in edges]
    return np.concatenate(parts) if len(parts) > 1 else np.ascontiguousarray(parts[0])


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
    src = ed.edge_src_at(e)
    lag = ed.edge_lag_at(e)
    for k in np.flatnonzero(np.bincount(kinds, minlength=1)):
        sel = kinds == k
        ed.add_edges(src[sel], rep_head[sel], int(k), lag[sel])


def lanes_required(lane: np.ndarray, what: str) -> None:
    from fastrack_core.errors import GraphError

    if np.any(lane == NO_LANE):
        raise GraphError(f"hardware model did not provide the {what} lane for every rank (call model.add_lanes)")
