"""The dependency graph that the engine schedules: a struct of numpy arrays.

A trace (one row per op, deps as lists of op ids) becomes an :class:`OpGraph`:

* per-node arrays (kind, lane, duration, bytes, ...), indexed 0..n-1;
* dependencies in CSR form, grouped by the dependent node (``dep_ptr``/``dep_src``), each edge
  with a kind (:class:`fastrack_core.schema.DepKind`) and a lag in ns;
* lanes: the servers ops run on (host threads, GPU streams, and whatever the hardware model
  adds: copy engines, PCIe links, crypto engines). A lane may have several identical servers
  (``Lanes.servers``), e.g. a pool of CPU cores. Each lane is either *in order* (a stream, a host
  thread: it serves its nodes strictly in issue order) or *shared* (work-conserving: it serves
  whichever node is ready first), see ``Lanes.shared``;
* pools: lanes no node runs on, whose servers nodes *hold* across several nodes (a bounce-buffer
  slot from the node that fills it to the node that empties it): ``hold_lane``/``hold_until``.
  A pool may grow, doubling up to ``Lanes.max_servers``, when a request finds every server held;
* barrier groups: nodes that must start together (the members of one collective on all ranks).

Edge semantics (what the engine implements):

* ``LAUNCH`` edges are start-to-start: ``start[dst] >= start[src] + lag``.
* every other edge is finish-to-start: ``start[dst] >= finish[src] + lag``. A negative lag is
  allowed on ``STREAM`` edges: it reproduces the measured overlap of consecutive kernels on one
  stream (programmatic dependent launch, timestamp rounding).

Graphs are immutable values: protocol transforms build new ones (see :meth:`OpGraph.replace`).
Nodes keep ``origin``, the op id of the trace op they derive from (provenance).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field

from typing import Sequence

import numpy as np

from fastrack_core.errors import GraphError
from fastrack_core.schema import OpKind
from replay.causal import Calibration


class Category(enum.IntEnum):
    """Where time goes, for critical-path breakdowns. Every node has one."""

    COMPUTE = 0  # GPU kernels, memsets, on-GPU copies
    HOST = 1  # host CPU work and CUDA calls
    LAUNCH = 2  # launch latency and (encrypted) command submission
    CPU_CRYPTO = 3  # AES-GCM on the CPU (encrypt to / decrypt from bounce buffers)
    GPU_CRYPTO = 4  # copy-engine AES-GCM and GPU-side authentication
    PCIE = 5  # bytes on the host<->GPU link
    BOUNCE_WAIT = 6  # waiting for a free bounce-buffer slot
    SYNC_WAIT = 7  # host blocked in a synchronising call
    COMM = 8  # GPU<->GPU communication (collectives, NVLink)

    @property
    def label(self) -> str:
        return self.name.lower()


class LaneType(enum.IntEnum):
    """Kinds of servers. Hardware models may use any of them."""

    HOST_THREAD = 0
    STREAM = 1
    COPY_ENGINE = 2
    PCIE_H2D = 3
    PCIE_D2H = 4
    CPU_CRYPTO = 5
    GPU_CRYPTO = 6
    GPU_AUTH = 7
    SUBMIT = 8
    LINK = 9  # GPU<->GPU link (NVLink/NVSwitch/PCIe peer)
    BOUNCE_POOL = 10  # a rank's bounce-buffer (staging) slots: a pool nodes hold (hold_lane)

    @property
    def label(self) -> str:
        return self.name.lower()


# the key of a rank's channel lock among its BOUNCE_POOL lanes, H2D / D2H (key 0: its bounce pool;
# replay/protocols/cc.py makes the locks, replay/pipeline/reprice.py resizes them)
LOCK_KEYS = {True: 1, False: 2}

# Lanes that serve in issue order (the hardware is in order: a stream is a FIFO, a host thread runs
# its program in sequence, the p2p proxy is one thread). Every other type is shared: a
# work-conserving server that serves whichever node is ready first.
IN_ORDER_TYPES = frozenset({LaneType.HOST_THREAD, LaneType.STREAM, LaneType.SUBMIT})


# Default category of each trace op kind (protocol transforms set categories of derived nodes).
KIND_CATEGORY = {
    OpKind.CPU: Category.HOST,
    OpKind.RUNTIME: Category.HOST,
    OpKind.SYNC: Category.SYNC_WAIT,
    OpKind.KERNEL: Category.COMPUTE,
    OpKind.MEMCPY: Category.COMPUTE,
    OpKind.MEMSET: Category.COMPUTE,
    OpKind.COLLECTIVE: Category.COMM,
}

NO_LANE = -1

# Bounds that keep a replay's memory and arithmetic in check (docs/model.md "Parameter ranges").
MAX_NODES = 2**26  # nodes a graph may have after a protocol transform (about 10 GiB of replay state)
MAX_TIME_NS = 2**62  # no schedule may reach this: every time stays inside int64 with room to add
# A node's index where the graph's arrays store one (edge sources, pool returners; a schedule's
# binding predecessors and placement order): 32 bits, since MAX_NODES is far below 2^31. Half the
# memory of int64 on arrays of tens of millions of entries (docs/performance.md, "Memory");
# replay/cpp/fastrack/view.hh NodeIndex is the same type.
INDEX = np.dtype(np.int32)
# the OpGraph arrays that hold node indices, and the barrier group ids (numbered below the node
# count): stored as INDEX whatever their dtype on construction
INDEX_ARRAYS = ("dep_src", "hold_until", "group")


MIN_NODE_BUDGET = 2**22  # any trace may grow to this many nodes (about 1-2 GB of replay state)
NODE_GROWTH = 16  # ... or to this many times its own size: memory stays proportional to the input


def node_budget(current: int) -> int:
    """The most nodes a graph of ``current`` nodes may grow to through a protocol transform."""
    return min(MAX_NODES, max(MIN_NODE_BUDGET, NODE_GROWTH * current))


def check_node_budget(current: int, added: int, what: str) -> None:
    """Refuse a transform that would grow the graph past :func:`node_budget`, before allocating."""
    limit = node_budget(current)
    if current + added > limit:
        raise GraphError(f"{what} needs up to {current + added:,} graph nodes, more than the {limit:,} a replay of "
                         f"this trace may hold; use larger chunks (e.g. --set bounce.slot_bytes) or check the trace's "
                         "byte counts")


@dataclass(frozen=True)
class Lanes:
    """The servers of a graph. Lane ``i`` has ``servers[i]`` identical servers.

    ``shared[i]``: False for an in-order lane (it serves its nodes in issue order: a node waits
    for the lane's previous node even when it is ready first), True for a shared, work-conserving
    one (it serves whichever node is ready first). Defaults from the type (:data:`IN_ORDER_TYPES`).
    ``max_servers[i]``: what a pool lane may grow to (doubling on demand); defaults to ``servers``.
    """

    rank: np.ndarray  # int32
    type: np.ndarray  # int8 (LaneType)
    key: np.ndarray  # int64: thread id, stream id, engine index, ...
    servers: np.ndarray  # int32 >= 1 (a pool's initial size)
    names: tuple[str, ...]  # human-readable, e.g. "rank0/thread 1234", "rank0/pcie_h2d"
    shared: np.ndarray | None = None  # bool; None: by type
    max_servers: np.ndarray | None = None  # int32 >= servers; None: = servers

    def __post_init__(self) -> None:
        if self.shared is None:
            in_order = np.isin(self.type, np.array(sorted(int(t) for t in IN_ORDER_TYPES), np.int8))
            object.__setattr__(self, "shared", ~in_order)
        else:
            object.__setattr__(self, "shared", np.asarray(self.shared, bool))
        if self.max_servers is None:
            object.__setattr__(self, "max_servers", np.asarray(self.servers, np.int32).copy())
        else:
            object.__setattr__(self, "max_servers", np.asarray(self.max_servers, np.int32))

    def __len__(self) -> int:
        return len(self.names)

    def add(self, rank: int, type_: LaneType, key: int, name: str, servers: int = 1, *,
            shared: bool | None = None, max_servers: int | None = None) -> tuple["Lanes", int]:
        """A new Lanes with one more lane; returns it and the new lane's index. ``shared``
        defaults by type; ``max_servers`` (pools that grow) defaults to ``servers``."""
        if servers < 1:
            raise GraphError(f"lane '{name}' needs at least one server, got {servers}")
        top = servers if max_servers is None else max_servers
        if top < servers:
            raise GraphError(f"lane '{name}' may grow to {top} servers, fewer than its {servers}")
        sh = LaneType(type_) not in IN_ORDER_TYPES if shared is None else bool(shared)
        return (
            Lanes(
                rank=np.append(self.rank, np.int32(rank)).astype(np.int32),
                type=np.append(self.type, np.int8(type_)).astype(np.int8),
                key=np.append(self.key, np.int64(key)).astype(np.int64),
                servers=np.append(self.servers, np.int32(servers)).astype(np.int32),
                names=self.names + (name,),
                shared=np.append(self.shared, sh).astype(bool),
                max_servers=np.append(self.max_servers, np.int32(top)).astype(np.int32),
            ),
            len(self.names),
        )

    def extend(self, rank, type_, key, names: Sequence[str], servers, *, shared=None,
               max_servers=None) -> tuple["Lanes", int]:
        """A new Lanes with ``len(names)`` more lanes, in the order given (each argument a scalar
        or one value per lane; ``shared`` defaults by type, ``max_servers`` to ``servers``);
        returns it and the index of the first new lane. One copy of the arrays, whatever the
        number of lanes added (adding them one by one with :meth:`add` copies them each time)."""
        k = len(names)
        if k == 0:
            return self, len(self.names)

        def col(v, dtype):
            return np.broadcast_to(np.asarray(v, dtype), (k,)).astype(dtype)

        srv = col(servers, np.int32)
        top = srv.copy() if max_servers is None else col(max_servers, np.int32)
        if (srv < 1).any():
            raise GraphError(f"a lane needs at least one server, got {int(srv.min())}")
        if (top < srv).any():
            raise GraphError("a lane may not grow to fewer servers than it starts with")
        typ = col(type_, np.int8)
        if shared is None:
            sh = ~np.isin(typ, np.array(sorted(int(t) for t in IN_ORDER_TYPES), np.int8))
        else:
            sh = col(shared, bool)
        return (
            Lanes(
                rank=np.concatenate([self.rank, col(rank, np.int32)]),
                type=np.concatenate([self.type, typ]),
                key=np.concatenate([self.key, col(key, np.int64)]),
                servers=np.concatenate([self.servers, srv]),
                names=self.names + tuple(names),
                shared=np.concatenate([self.shared, sh]),
                max_servers=np.concatenate([self.max_servers, top]),
            ),
            len(self.names),
        )

    def find_many(self, ranks, type_: LaneType, key: int = 0) -> np.ndarray:
        """:meth:`find` for every rank of ``ranks`` at once (int32, NO_LANE where missing; the
        first such lane where a rank has several)."""
        ranks = np.asarray(ranks, np.int64)
        sel = np.flatnonzero((self.type == int(type_)) & (self.key == int(key)))
        if sel.size == 0 or ranks.size == 0:
            return np.full(ranks.shape, NO_LANE, np.int32)
        lane_rank = self.rank[sel].astype(np.int64)
        order = np.argsort(lane_rank, kind="stable")  # stable: the first lane of a rank wins, as in find
        lane_rank, sel = lane_rank[order], sel[order]
        pos = np.minimum(np.searchsorted(lane_rank, ranks), lane_rank.size - 1)
        return np.where(lane_rank[pos] == ranks, sel[pos], NO_LANE).astype(np.int32)

    def with_max_servers(self, lane: int, max_servers: int) -> "Lanes":
        """A copy with lane ``lane`` allowed to grow to ``max_servers`` (at least its servers)."""
        top = self.max_servers.copy()
        top[lane] = max(int(max_servers), int(self.servers[lane]))
        return dataclasses.replace(self, max_servers=top)

    def find(self, rank: int, type_: LaneType, key: int = 0) -> int:
        hit = np.flatnonzero((self.rank == rank) & (self.type == type_) & (self.key == key))
        return int(hit[0]) if hit.size else NO_LANE

    @staticmethod
    def empty() -> "Lanes":
        return Lanes(
            rank=np.zeros(0, np.int32),
            type=np.zeros(0, np.int8),
            key=np.zeros(0, np.int64),
            servers=np.zeros(0, np.int32),
            names=(),
        )


def _per_node(dtype, doc: str):
    """A per-node array field of :class:`OpGraph` (length n, ``dtype``); :data:`NODE_FIELDS` lists them."""
    return field(metadata={"per_node": np.dtype(dtype), "doc": doc})


@dataclass(frozen=True)
class OpGraph:
    """An immutable dependency graph of n nodes. All arrays have length n unless noted."""

    # --- nodes ---
    op_id: np.ndarray = _per_node(np.int64, "trace op id; derived nodes get ids above the trace's maximum")
    origin: np.ndarray = _per_node(np.int64, "op id (in the trace) of the op this node derives from (provenance)")
    rank: np.ndarray = _per_node(np.int32, "rank (GPU process) the node belongs to")
    kind: np.ndarray = _per_node(np.int8, "OpKind for trace ops; protocol-defined codes >= 16 for derived nodes")
    category: np.ndarray = _per_node(np.int8, "Category")
    lane: np.ndarray = _per_node(np.int32, "index into lanes, or NO_LANE for nodes that occupy no server")
    dur: np.ndarray = _per_node(np.int64, "ns: time the node occupies its server once started")
    bytes: np.ndarray = _per_node(np.int64, "bytes moved or touched")
    copy_dir: np.ndarray = _per_node(np.int8, "CopyDir")
    host_mem: np.ndarray = _per_node(np.int8, "HostMem")
    name: np.ndarray = _per_node(np.int32, "index into names")
    order: np.ndarray = _per_node(np.int64, "priority among ready nodes (captured start, ns); ties by index")
    release: np.ndarray = _per_node(np.int64, "ns: earliest start (nodes without deps: their captured start)")
    group: np.ndarray = _per_node(INDEX, "barrier group id (collective instance; below 2^31) or -1")
    # --- edges (CSR by dependent node) ---
    dep_ptr: np.ndarray  # int64, length n+1
    dep_src: np.ndarray  # INDEX (int32): node index of the prerequisite
    dep_kind: np.ndarray  # uint8: DepKind
    dep_lag: np.ndarray  # int64 ns
    # --- tables ---
    lanes: Lanes
    names: tuple[str, ...]
    # --- what was measured (for fidelity checks), per node; -1 for derived nodes ---
    captured_start: np.ndarray = _per_node(np.int64, "ns: measured start, -1 for derived nodes")
    captured_dur: np.ndarray = _per_node(np.int64, "ns: measured duration, -1 for derived nodes")
    step: np.ndarray = _per_node(np.int32, "profiler step, -1 when unknown")
    kind_names: dict[int, str] = field(default_factory=dict)  # labels of derived kinds
    # offset (ns) added to each rank's measured clock to align ranks on their collectives
    rank_shift: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    # what the builder derived from the measurement (launch latency per rank, unexplained waits);
    # None for graphs not built from a trace
    calibration: Calibration | None = None
    # --- pool holds, per node (None: no node holds anything) ---
    # hold_lane: int32, the pool lane (no node runs on it) one of whose servers the node takes when
    # it is ready to start (waiting while all are held), or NO_LANE; hold_until: INDEX, the node at
    # whose finish that server is returned (-1 where hold_lane is NO_LANE).
    hold_lane: np.ndarray | None = None
    hold_until: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = int(self.dur.shape[0])
        if self.hold_lane is None:
            object.__setattr__(self, "hold_lane", np.full(n, NO_LANE, np.int32))
        if self.hold_until is None:
            object.__setattr__(self, "hold_until", np.full(n, -1, INDEX))
        for name in INDEX_ARRAYS:  # (node indices: INDEX, whatever the constructor was given)
            object.__setattr__(self, name, as_index(getattr(self, name), name))

    @property
    def n(self) -> int:
        return int(self.dur.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.dep_src.shape[0])

    def replace(self, **changes) -> "OpGraph":
        return dataclasses.replace(self, **changes)

    def deps_of(self, i: int) -> np.ndarray:
        return self.dep_src[self.dep_ptr[i] : self.dep_ptr[i + 1]]

    def kind_label(self, code: int) -> str:
        code = int(code)
        if code in self.kind_names:
            return self.kind_names[code]
        try:
            return OpKind(code).label
        except ValueError:
            return f"kind{code}"

    def used_lanes(self) -> np.ndarray:
        """Per lane: whether a node runs on it or holds one of its servers (a lane neither is true of
        cannot change a schedule, whatever its size)."""
        used = np.zeros(len(self.lanes), bool)
        used[self.lane[self.lane >= 0]] = True
        if self.hold_lane is not None:
            used[self.hold_lane[self.hold_lane >= 0]] = True
        return used

    def same_used_sizes(self, other: "OpGraph", used: np.ndarray | None = None) -> bool:
        """Whether ``other``, a graph with the same lanes, has this graph's lane sizes (servers and
        maximum servers) wherever a node runs on a lane or holds one of its servers (``used``: this
        graph's :meth:`used_lanes`, when the caller has it)."""
        a, b = self.lanes, other.lanes
        if a is b:
            return True
        used = self.used_lanes() if used is None else used
        differ = (a.servers != b.servers) | (a.max_servers != b.max_servers)
        return not np.any(differ & used)

    def node_label(self, i: int) -> str:
        """A node for a message: its op id, kind and rank, never its name (names come from the
        trace, and traces carry secrets: docs/robustness.md)."""
        return f"op {int(self.op_id[i])} ({self.kind_label(self.kind[i])}, rank {int(self.rank[i])})"

    def validate(self) -> None:
        """Structural checks; raise GraphError naming the first offending node."""
        n = self.n
        for arr_name in NODE_FIELDS:
            if getattr(self, arr_name).shape[0] != n:
                raise GraphError(f"graph array '{arr_name}' has {getattr(self, arr_name).shape[0]} entries, expected {n}")
        if self.dep_ptr.shape[0] != n + 1 or self.dep_ptr[-1] != self.dep_src.shape[0]:
            raise GraphError("graph dependency index (dep_ptr) is inconsistent with its edges")
        bad = np.flatnonzero(self.dur < 0)
        if bad.size:
            raise GraphError(f"{self.node_label(int(bad[0]))} has negative duration {int(self.dur[bad[0]])} ns")
        if self.dep_src.size and (self.dep_src.min() < 0 or self.dep_src.max() >= n):
            raise GraphError("graph has an edge to a node that does not exist")
        bad = np.flatnonzero((self.lane < NO_LANE) | (self.lane >= len(self.lanes)))
        if bad.size:
            raise GraphError(f"{self.node_label(int(bad[0]))} is on lane {int(self.lane[bad[0]])}, which does not exist")
        lanes = self.lanes
        for arr_name in ("type", "key", "servers", "shared", "max_servers"):
            if getattr(lanes, arr_name).shape[0] != len(lanes):
                raise GraphError(f"lane array '{arr_name}' has {getattr(lanes, arr_name).shape[0]} entries, "
                                 f"expected {len(lanes)}")
        bad = np.flatnonzero((lanes.servers < 1) | (lanes.max_servers < lanes.servers))
        if bad.size:
            k = int(bad[0])
            raise GraphError(f"lane '{lanes.names[k]}' has {int(lanes.servers[k])} servers and may grow to "
                             f"{int(lanes.max_servers[k])}: expected 1 <= servers <= max_servers")
        self._validate_holds()
        self._validate_time_range()

    def _validate_time_range(self) -> None:
        """No schedule can reach :data:`MAX_TIME_NS`: a node finishes at most at the latest release
        plus every duration and every positive lag added up (computed in floating point, so the
        check itself cannot overflow)."""
        rel = float(self.release.max()) if self.n else 0.0
        total = rel + float(np.sum(self.dur, dtype=np.float64))
        if self.dep_lag.size:
            total += float(np.sum(np.maximum(self.dep_lag, 0), dtype=np.float64))
        if total >= MAX_TIME_NS:
            raise GraphError(f"the graph's durations add up to {total:.3g} ns, beyond the {MAX_TIME_NS:.3g} ns a "
                             "replay can represent; check the parameters that price it (rates, latencies)")

    def _validate_holds(self) -> None:
        n = self.n
        hl, hu = self.hold_lane, self.hold_until
        if hl.shape[0] != n or hu.shape[0] != n:
            raise GraphError(f"graph arrays 'hold_lane'/'hold_until' have {hl.shape[0]}/{hu.shape[0]} entries, "
                             f"expected {n}")
        holds = np.flatnonzero(hl != NO_LANE)
        if not holds.size:
            if np.any(hu != -1):
                raise GraphError(f"{self.node_label(int(np.flatnonzero(hu != -1)[0]))} returns a pool server "
                                 "it never holds (hold_until without hold_lane)")
            return
        if np.any(hu[hl == NO_LANE] != -1):
            i = int(np.flatnonzero((hl == NO_LANE) & (hu != -1))[0])
            raise GraphError(f"{self.node_label(i)} returns a pool server it never holds (hold_until without hold_lane)")
        bad = holds[(hl[holds] < 0) | (hl[holds] >= len(self.lanes)) | (hu[holds] < 0) | (hu[holds] >= n)]
        if bad.size:
            i = int(bad[0])
            raise GraphError(f"{self.node_label(i)} holds a server of lane {int(hl[i])} until node {int(hu[i])}; "
                             "one of them does not exist")
        pools = np.zeros(len(self.lanes), bool)
        pools[hl[holds]] = True
        on = self.lane[self.lane >= 0]
        busy = np.flatnonzero(pools[on])
        if busy.size:
            i = int(np.flatnonzero(self.lane >= 0)[busy[0]])
            raise GraphError(f"{self.node_label(i)} runs on lane '{self.lanes.names[int(self.lane[i])]}', which is "
                             "a pool that nodes hold (a pool serves holds only)")
        grouped = holds[self.group[holds] >= 0]
        if grouped.size:
            raise GraphError(f"{self.node_label(int(grouped[0]))} is in a barrier group and holds a pool server "
                             "(not supported)")


# The per-node arrays of OpGraph, in declaration order, and their dtypes: the one list that graph
# editors, transforms and test helpers iterate over (a new per-node field is declared only above).
NODE_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(OpGraph) if "per_node" in f.metadata)
NODE_DTYPES: dict[str, np.dtype] = {f.name: f.metadata["per_node"] for f in dataclasses.fields(OpGraph)
                                    if "per_node" in f.metadata}


def as_index(a: np.ndarray, what: str) -> np.ndarray:
    """``a`` (integers) as :data:`INDEX`, refusing a value no node index can have instead of
    wrapping it (an index array's own checks, against the node count, are OpGraph.validate's)."""
    a = np.asarray(a)
    if a.dtype == INDEX:
        return a
    if a.size and (a.dtype.kind not in "iu" or int(a.min()) < -1 or int(a.max()) > np.iinfo(INDEX).max):
        raise GraphError(f"graph array '{what}' holds a value outside -1 .. 2^31 - 1 (an index, or -1 for none)")
    return a.astype(INDEX)


def edges_by_dependent(dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Stable order of edges grouped by dependent node, and the CSR pointer array."""
    if dst.size and np.all(dst[1:] >= dst[:-1]):
        order = np.arange(dst.shape[0])
    else:
        order = stable_argsort(dst)
    counts = np.bincount(dst, minlength=n)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    return order, ptr


def stable_argsort(keys: np.ndarray) -> np.ndarray:
    """Exactly ``np.argsort(keys, kind="stable")`` for integer keys, about twice as fast on the
    graph's index arrays: non-negative keys below 2^31 (and fewer than 2^32 of them) are packed
    with their position into one int64 (key << 32 | position), so an unstable sort of the packed
    values is the stable order, and its low 32 bits are the positions."""
    keys = np.asarray(keys)
    m = keys.shape[0]
    if m < 2 or m >= 1 << 32 or keys.dtype.kind not in "iu" or keys.min() < 0 or keys.max() >= 1 << 31:
        return np.argsort(keys, kind="stable")
    packed = keys.astype(np.int64) << 32
    packed |= np.arange(m, dtype=np.int64)
    packed.sort()
    packed &= 0xFFFFFFFF
    return packed
