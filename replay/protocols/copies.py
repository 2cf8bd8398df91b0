"""Finding the host<->GPU copies of a graph, their launching calls, and splitting them into chunks.

A *copy* is a MEMCPY node with direction H2D or D2H. Its *launcher* is the host op with a
LAUNCH edge to it (the CUDA call that issued it), or -1 when the trace has none. A copy of ``b``
bytes is cut into ``max(1, ceil(b / slot_bytes))`` chunks: every chunk has ``slot_bytes`` bytes
except the last, which has the rest, so the chunk bytes of a copy always sum to its bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastrack_core.schema import HOST_KINDS, GPU_KINDS, CopyDir, DepKind, OpKind
from replay.graph import OpGraph, check_node_budget

_IS_HOST = np.zeros(256, bool)
_IS_HOST[[int(k) for k in HOST_KINDS]] = True
_IS_GPU = np.zeros(256, bool)
_IS_GPU[[int(k) for k in GPU_KINDS]] = True


def _lut(table: np.ndarray, kind: np.ndarray) -> np.ndarray:
    return table[kind.astype(np.uint8)]  # kind codes are int8 >= 0


def dependents(graph: OpGraph, e: np.ndarray, edge_dst: np.ndarray | None = None) -> np.ndarray:
    """Dependent node of each edge of ``e``: from ``edge_dst`` (every edge's, when the caller has
    it) or by binary search in the CSR pointer (no edge-sized array)."""
    if edge_dst is not None:
        return edge_dst[e]
    return np.searchsorted(graph.dep_ptr, e, side="right") - 1


def launch_edges(graph: OpGraph, edge_dst: np.ndarray | None = None) -> np.ndarray:
    """Indices of the LAUNCH edges from a host op to a GPU op."""
    return launch_edges_with_dependents(graph, edge_dst)[0]


def launch_edges_with_dependents(graph: OpGraph, edge_dst: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`launch_edges` and the dependent (launched op) of each."""
    e = np.flatnonzero(graph.dep_kind == DepKind.LAUNCH)
    dst = dependents(graph, e, edge_dst)
    keep = _lut(_IS_HOST, graph.kind[graph.dep_src[e]]) & _lut(_IS_GPU, graph.kind[dst])
    return e[keep], dst[keep]


def launchers(graph: OpGraph, edge_dst: np.ndarray | None = None, e: np.ndarray | None = None,
              dst: np.ndarray | None = None) -> np.ndarray:
    """Per node: the host op that launched it (first LAUNCH edge from a host op), or -1.
    ``e``: the result of :func:`launch_edges`, when already computed (``dst``: their dependents)."""
    out = np.full(graph.n, -1, np.int64)
    e = launch_edges(graph, edge_dst) if e is None else e
    if e.size:
        dst = dependents(graph, e, edge_dst) if dst is None else dst
        # first edge per dependent: edges are grouped by dst in CSR order, keep the first occurrence
        first = np.r_[True, dst[1:] != dst[:-1]]
        out[dst[first]] = graph.dep_src[e[first]]
    return out


@dataclass(frozen=True)
class Copies:
    node: np.ndarray  # int64: graph index of the MEMCPY node
    launcher: np.ndarray  # int64: host op that issued it, or -1
    nbytes: np.ndarray  # int64
    direction: np.ndarray  # int8: CopyDir.H2D or CopyDir.D2H
    rank: np.ndarray  # int32

    def __len__(self) -> int:
        return int(self.node.shape[0])


def host_copies(graph: OpGraph, launcher_of: np.ndarray) -> Copies:
    """The H2D and D2H copies of a graph, in node order."""
    node = np.flatnonzero((graph.kind == OpKind.MEMCPY) & ((graph.copy_dir == CopyDir.H2D) |
                                                           (graph.copy_dir == CopyDir.D2H)))
    node = node.astype(np.int64)
    return Copies(node=node, launcher=launcher_of[node], nbytes=np.maximum(graph.bytes[node], 0).astype(np.int64),
                  direction=graph.copy_dir[node].astype(np.int8), rank=graph.rank[node].astype(np.int32))


@dataclass(frozen=True)
class Chunks:
    copy: np.ndarray  # int64: index into Copies of the chunk's copy
    j: np.ndarray  # int64: chunk index within its copy
    k: np.ndarray  # int64: number of chunks of its copy
    nbytes: np.ndarray  # int64: bytes of the chunk
    first: np.ndarray  # int64 per copy: index of its first chunk
    count: np.ndarray  # int64 per copy: its number of chunks

    def __len__(self) -> int:
        return int(self.copy.shape[0])

    def last_of_copy(self) -> np.ndarray:
        """Per copy: index of its last chunk."""
        return self.first + self.count - 1

    def of_copy_at(self, j: np.ndarray) -> np.ndarray:
        """Per chunk: index of the chunk ``j[i]`` of the same copy (``j`` clipped to the copy)."""
        jj = np.clip(j, 0, self.k - 1)
        return self.first[self.copy] + jj


NODES_PER_CHUNK = 8  # an upper bound on the nodes a protocol builds per chunk (the CC path builds at most 6)


def chunk(nbytes: np.ndarray, slot_bytes: int, graph_nodes: int = 0) -> Chunks:
    """Split each copy into bounce-slot-sized chunks (bytes conserved per copy)."""
    nbytes = np.asarray(nbytes, dtype=np.int64)
    count = np.maximum(1, -((-nbytes) // np.int64(slot_bytes)))
    first = np.zeros(count.shape[0], np.int64)
    if count.size:
        np.cumsum(count[:-1], out=first[1:])
    total = int(count.sum()) if count.size else 0
    check_node_budget(graph_nodes, NODES_PER_CHUNK * total, f"cutting {count.size:,} copies into {slot_bytes:,}-byte bounce slots")
    copy = np.repeat(np.arange(count.shape[0], dtype=np.int64), count)
    j = np.arange(total, dtype=np.int64) - first[copy]
    k = count[copy]
    size = np.where(j < k - 1, np.int64(slot_bytes), nbytes[copy] - (k - 1) * np.int64(slot_bytes))
    return Chunks(copy=copy, j=j, k=k, nbytes=size.astype(np.int64), first=first, count=count)
