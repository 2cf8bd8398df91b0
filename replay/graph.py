"""The dependency graph that the engine schedules: a struct of numpy arrays.

A trace (one row per op, deps as lists of op ids) becomes an :class:`OpGraph`:

* per-node arrays (kind, lane, duration, bytes, ...), indexed 0..n-1;
* dependencies in CSR form, grouped by the dependent node (``dep_ptr``/``dep_src``), each edge
  with a kind (:class:`fastrack.schema.DepKind`) and a lag in ns;
* lanes: the in-order servers ops run on (host threads, GPU streams, and whatever the hardware
  model adds: copy engines, PCIe links, crypto engines). A lane may have several identical
  servers (``lane_servers``), e.g. a pool of CPU cores;
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

import numpy as np

from fastrack.errors import GraphError
from fastrack.schema import OpKind
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
    """Kinds of in-order servers. Hardware models may use any of them."""

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

    @property
    def label(self) -> str:
        return self.name.lower()


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


@dataclass(frozen=True)
class Lanes:
    """The servers of a graph. Lane ``i`` has ``servers[i]`` identical in-order servers."""

    rank: np.ndarray  # int32
    type: np.ndarray  # int8 (LaneType)
    key: np.ndarray  # int64: thread id, stream id, engine index, ...
    servers: np.ndarray  # int32 >= 1
    names: tuple[str, ...]  # human-readable, e.g. "rank0/thread 1234", "rank0/pcie_h2d"

    def __len__(self) -> int:
        return len(self.names)

    def add(self, rank: int, type_: LaneType, key: int, name: str, servers: int = 1) -> tuple["Lanes", int]:
        """A new Lanes with one more lane; returns it and the new lane's index."""
        if servers < 1:
            raise GraphError(f"lane '{name}' needs at least one server, got {servers}")
        return (
            Lanes(
                rank=np.append(self.rank, np.int32(rank)).astype(np.int32),
                type=np.append(self.type, np.int8(type_)).astype(np.int8),
                key=np.append(self.key, np.int64(key)).astype(np.int64),
                servers=np.append(self.servers, np.int32(servers)).astype(np.int32),
                names=self.names + (name,),
            ),
            len(self.names),
        )

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
    group: np.ndarray = _per_node(np.int64, "barrier group id (collective instance) or -1")
    # --- edges (CSR by dependent node) ---
    dep_ptr: np.ndarray  # int64, length n+1
    dep_src: np.ndarray  # int64, node index of the prerequisite
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

    def node_label(self, i: int) -> str:
        return f"op {int(self.op_id[i])} ({self.names[int(self.name[i])]}, rank {int(self.rank[i])})"

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


# The per-node arrays of OpGraph, in declaration order, and their dtypes: the one list that graph
# editors, transforms and test helpers iterate over (a new per-node field is declared only above).
NODE_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(OpGraph) if "per_node" in f.metadata)
NODE_DTYPES: dict[str, np.dtype] = {f.name: f.metadata["per_node"] for f in dataclasses.fields(OpGraph)
                                    if "per_node" in f.metadata}


def edges_by_dependent(dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Stable order of edges grouped by dependent node, and the CSR pointer array."""
    if dst.size and np.all(dst[1:] >= dst[:-1]):
        order = np.arange(dst.shape[0])
    else:
        order = np.argsort(dst, kind="stable")
    counts = np.bincount(dst, minlength=n)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    return order, ptr
