"""Building OpGraphs by hand for tests (no trace files involved): the one test helper that knows
the graph's fields.

* :func:`make_graph`: any graph from per-node columns (every column of
  :data:`replay.graph.NODE_FIELDS` not given gets a default) and an edge list;
* :func:`graph`: engine-rule graphs from durations, lanes and ``(src, dst, kind, lag)`` edges;
* :class:`HandGraph`: ops added in issue order on host threads and GPU streams, PROGRAM/STREAM
  edges added automatically;
* :func:`big_graph`: a large numpy-built graph (one host thread launching kernels and copies).
* :func:`collective_graph`: one collective per rank, each launched by its own call, in one group.
"""

from __future__ import annotations

import numpy as np

from fastrack_core.schema import CopyDir, DepKind, HostMem, OpKind
from replay.graph import KIND_CATEGORY, NO_LANE, NODE_DTYPES, NODE_FIELDS, Lanes, LaneType, OpGraph


def _defaults(n: int, given: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The value of every per-node column not in ``given`` (a function of the ones that are)."""
    idx = np.arange(n, dtype=np.int64)
    order = given.get("order", idx)
    dur = given.get("dur", np.zeros(n, np.int64))
    return {
        "op_id": idx, "origin": idx, "rank": np.zeros(n), "kind": np.full(n, int(OpKind.KERNEL)),
        "category": np.zeros(n), "lane": np.full(n, NO_LANE), "dur": dur, "bytes": np.zeros(n),
        "copy_dir": np.full(n, int(CopyDir.NONE)), "host_mem": np.full(n, int(HostMem.NONE)), "name": np.zeros(n),
        "order": order, "release": np.zeros(n), "group": np.full(n, -1), "captured_start": order,
        "captured_dur": dur, "step": np.full(n, -1),
    }


def lanes_for(lane: np.ndarray, servers=None, types=None, max_servers=None, count: int = 0) -> Lanes:
    """Lanes 0..max(lane) (at least ``count``, at least ``len(types)``) on rank 0 (type ``types[l]``,
    default 0 = host thread, in order; key = index, names ``lane<i>``; ``max_servers``: default
    the servers)."""
    nl = max(int(np.max(lane, initial=-1)) + 1, int(count), len(types) if types is not None else 0)
    srv = np.array(servers if servers is not None else [1] * nl, np.int32)
    typ = np.array(types if types is not None else [0] * nl, np.int8)
    return Lanes(rank=np.zeros(nl, np.int32), type=typ, key=np.arange(nl, dtype=np.int64),
                 servers=srv, names=tuple(f"lane{i}" for i in range(nl)),
                 max_servers=None if max_servers is None else np.array(max_servers, np.int32))


def make_graph(n: int, edges=(), lanes: Lanes | None = None, names: tuple[str, ...] = ("op",),
               hold_lane=None, hold_until=None, **columns) -> OpGraph:
    """A graph of ``n`` nodes. ``edges``: ``(src, dst, kind, lag)`` tuples, or a tuple of four
    arrays; stored grouped by dependent, keeping their given order within a dependent.
    ``columns``: per-node arrays (any of :data:`NODE_FIELDS`; the others get defaults: ids and
    order = index, no lane, duration 0, captured start/duration = order/duration, group and step -1).
    ``lanes``: default :func:`lanes_for` the ``lane`` column. ``hold_lane``/``hold_until``: the
    pool holds (default: none)."""
    unknown = set(columns) - set(NODE_FIELDS)
    if unknown:
        raise TypeError(f"not per-node fields of OpGraph: {sorted(unknown)}")
    cols = {f: np.asarray(v) for f, v in columns.items()}
    defaults = _defaults(n, cols)
    nodes = {f: np.asarray(cols.get(f, defaults[f])).astype(NODE_DTYPES[f]) for f in NODE_FIELDS}
    if isinstance(edges, tuple) and len(edges) == 4 and all(isinstance(e, np.ndarray) for e in edges):
        src, dst, kind, lag = edges
    else:
        rows = list(edges)
        src, dst, kind, lag = (np.array([int(e[i]) for e in rows], np.int64) for i in range(4))
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    by_dst = np.argsort(dst, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=ptr[1:])
    return OpGraph(**nodes, dep_ptr=ptr, dep_src=src[by_dst], dep_kind=np.asarray(kind, np.uint8)[by_dst],
                   dep_lag=np.asarray(lag, np.int64)[by_dst],
                   lanes=lanes if lanes is not None else lanes_for(nodes["lane"]), names=tuple(names),
                   hold_lane=None if hold_lane is None else np.asarray(hold_lane, np.int32),
                   hold_until=None if hold_until is None else np.asarray(hold_until, np.int64))


def graph(durs, deps=(), lanes=None, servers=None, release=None, order=None, group=None, types=None, holds=(),
          max_servers=None) -> OpGraph:
    """Engine-rule graph: node i lasts ``durs[i]`` on lane ``lanes[i]`` (-1: none); lane l has
    ``servers[l]`` servers, type ``types[l]`` (default host thread: in order) and may grow to
    ``max_servers[l]``. ``deps``: ``(src, dst, kind, lag)``; ``holds``: ``(holder, until, pool lane)``."""
    n = len(durs)
    cols = {"dur": durs, "lane": lanes if lanes is not None else [NO_LANE] * n}
    for name, value in (("release", release), ("order", order), ("group", group)):
        if value is not None:
            cols[name] = value
    lane = np.asarray(cols["lane"], np.int32)
    hold_lane = np.full(n, NO_LANE, np.int32)
    hold_until = np.full(n, -1, np.int64)
    for holder, until, pool in holds:
        hold_lane[holder], hold_until[holder] = pool, until
    count = max((int(h[2]) + 1 for h in holds), default=0)
    return make_graph(n, deps, lanes=lanes_for(lane, servers, types, max_servers, count), names=("x",),
                      hold_lane=hold_lane, hold_until=hold_until, **cols)


class HandGraph:
    """Add ops in issue order; PROGRAM/STREAM edges are added automatically.

    host ops live on (rank, thread); GPU ops on (rank, stream). ``order`` = the op's issue index x 10.
    """

    def __init__(self):
        self.ops = []
        self.edges = []  # (src, dst, kind, lag)
        self.last_on = {}

    def _add(self, kind, dur, lane_key, rank, nbytes=0, copy_dir=CopyDir.NONE, host_mem=HostMem.NONE, name="op"):
        i = len(self.ops)
        self.ops.append({"kind": int(kind), "dur": int(dur), "lane_key": lane_key, "rank": rank, "bytes": int(nbytes),
                         "copy_dir": int(copy_dir), "host_mem": int(host_mem), "name": name})
        prev = self.last_on.get(lane_key)
        if prev is not None:
            self.edges.append((prev, i, DepKind.PROGRAM if lane_key[1] == "thread" else DepKind.STREAM, 0))
        self.last_on[lane_key] = i
        return i

    def cpu(self, dur, thread=0, rank=0, kind=OpKind.CPU):
        return self._add(kind, dur, (rank, "thread", thread), rank, name=kind.name.lower())

    def call(self, dur, thread=0, rank=0):
        return self.cpu(dur, thread, rank, OpKind.RUNTIME)

    def gpu(self, kind, dur, stream, launched_by, rank=0, nbytes=0, copy_dir=CopyDir.NONE,
            host_mem=HostMem.NONE, lag=0):
        i = self._add(kind, dur, (rank, "stream", stream), rank, nbytes, copy_dir, host_mem, kind.name.lower())
        if launched_by is not None:
            self.edges.append((launched_by, i, DepKind.LAUNCH, lag))
        return i

    def kernel(self, dur, stream, launched_by, rank=0):
        return self.gpu(OpKind.KERNEL, dur, stream, launched_by, rank)

    def copy(self, nbytes, direction, stream, launched_by, rank=0, dur=1, host_mem=HostMem.PINNED):
        return self.gpu(OpKind.MEMCPY, dur, stream, launched_by, rank, nbytes, direction, host_mem)

    def sync(self, waits_for, dur=0, thread=0, rank=0):
        i = self.cpu(dur, thread, rank, OpKind.SYNC)
        for w in np.atleast_1d(waits_for):
            self.edges.append((int(w), i, DepKind.SYNC, 0))
        return i

    def dep(self, src, dst, kind=DepKind.EVENT, lag=0):
        self.edges.append((src, dst, kind, lag))

    def build(self) -> OpGraph:
        n = len(self.ops)
        keys = sorted({o["lane_key"] for o in self.ops})
        lane_of = {k: i for i, k in enumerate(keys)}
        lanes = Lanes(rank=np.array([k[0] for k in keys], np.int32),
                      type=np.array([LaneType.HOST_THREAD if k[1] == "thread" else LaneType.STREAM for k in keys],
                                    np.int8),
                      key=np.array([k[2] for k in keys], np.int64), servers=np.ones(len(keys), np.int32),
                      names=tuple(f"rank{k[0]}/{k[1]} {k[2]}" for k in keys))
        names = sorted({o["name"] for o in self.ops})
        kind = [o["kind"] for o in self.ops]
        column = {f: [o[f] for o in self.ops] for f in ("rank", "dur", "bytes", "copy_dir", "host_mem")}
        return make_graph(
            n, self.edges, lanes=lanes, names=tuple(names), kind=kind,
            category=[KIND_CATEGORY[OpKind(k)] for k in kind],
            lane=[lane_of[o["lane_key"]] for o in self.ops],
            name=[names.index(o["name"]) for o in self.ops],
            order=np.arange(n, dtype=np.int64) * 10, **column)


def big_graph(n_ops: int, copy_share: float = 0.1, streams: int = 4, seed: int = 0) -> OpGraph:
    """A large graph built with numpy: one host thread alternating CUDA calls and the GPU ops they
    launch on ``streams`` streams; ``copy_share`` of all ops are H2D/D2H copies of 4 KiB..16 MiB
    (log-uniform), the other GPU ops kernels of 2-200 us."""
    rng = np.random.default_rng(seed)
    calls = n_ops // 2
    n = 2 * calls
    call = np.arange(0, n, 2)
    gpu = call + 1
    stream = rng.integers(0, streams, calls)
    is_copy = rng.random(calls) < 2 * copy_share
    kind = np.empty(n, np.int8)
    kind[call] = OpKind.RUNTIME
    kind[gpu] = np.where(is_copy, OpKind.MEMCPY, OpKind.KERNEL)
    nbytes = np.zeros(n, np.int64)
    nbytes[gpu] = np.where(is_copy, np.exp(rng.uniform(np.log(4096), np.log(16 << 20), calls)).astype(np.int64), 0)
    copy_dir = np.zeros(n, np.int8)
    copy_dir[gpu] = np.where(is_copy, np.where(rng.random(calls) < 0.6, CopyDir.H2D, CopyDir.D2H), CopyDir.NONE)
    host_mem = np.zeros(n, np.int8)
    host_mem[gpu] = np.where(is_copy, HostMem.PINNED, HostMem.NONE)
    dur = np.empty(n, np.int64)
    dur[call] = rng.integers(2_000, 8_000, calls)
    dur[gpu] = rng.integers(2_000, 200_000, calls)
    lane = np.empty(n, np.int32)
    lane[call] = 0
    lane[gpu] = 1 + stream
    # edges: PROGRAM call->next call, LAUNCH call->gpu op, STREAM previous op of the stream
    src = [call[:-1], call]
    dst = [call[1:], gpu]
    kinds = [np.full(calls - 1, DepKind.PROGRAM), np.full(calls, DepKind.LAUNCH)]
    o = np.lexsort((gpu, stream))
    same = stream[o][1:] == stream[o][:-1]
    src.append(gpu[o][:-1][same])
    dst.append(gpu[o][1:][same])
    kinds.append(np.full(int(same.sum()), DepKind.STREAM))
    src, dst, kinds = np.concatenate(src), np.concatenate(dst), np.concatenate(kinds).astype(np.uint8)
    start = np.cumsum(dur[call])
    order = np.empty(n, np.int64)
    order[call] = start
    order[gpu] = start + 1
    category = np.array([KIND_CATEGORY[OpKind(k)] for k in range(7)], np.int8)[kind]
    lanes = Lanes(rank=np.zeros(1 + streams, np.int32),
                  type=np.array([LaneType.HOST_THREAD] + [LaneType.STREAM] * streams, np.int8),
                  key=np.arange(1 + streams, dtype=np.int64), servers=np.ones(1 + streams, np.int32),
                  names=("rank0/thread 0",) + tuple(f"rank0/stream {s}" for s in range(streams)))
    return make_graph(n, (src, dst, kinds, np.zeros(src.size, np.int64)), lanes=lanes, kind=kind, category=category,
                      lane=lane, dur=dur, bytes=nbytes, copy_dir=copy_dir, host_mem=host_mem, order=order)


def collective_graph(ranks: int, nbytes: int, name: str = "ncclKernel_AllReduce_RING_LL_Sum_float"):
    """Every rank: one call (1 us) launching one collective (measured 5 ns) on its stream."""
    h = HandGraph()
    coll = []
    for r in range(ranks):
        call = h.call(1000, rank=r)
        c = h.gpu(OpKind.COLLECTIVE, 5, 0, call, rank=r, nbytes=nbytes)
        h.ops[c]["name"] = name
        coll.append(c)
    g = h.build()
    group = g.group.copy()
    group[coll] = 7
    return g.replace(group=group), coll
