"""Stream order and the GPU-op lookups the synchronization rules share.

* ``stream``: each GPU op depends on the previous op of the same (rank, device, stream) in issue
  order (ties: GPU start), which keeps the graph acyclic.
"""

from __future__ import annotations

import numpy as np

from fastrack_core.schema import DepKind
from tracegen.deps.edges import Edges
from tracegen.deps.launches import GpuOps
from tracegen.deps.search import EMPTY, Ordered, group_ids, key_ids


def stream_edges(g: GpuOps, gpu_base: int, edges: Edges) -> None:
    nG = g.n
    sk = group_ids(g.rank, g.device, g.stream) if nG else EMPTY
    so = np.lexsort((np.arange(nG), g.start, g.issue, sk)) if nG else EMPTY
    if nG > 1:
        same_s = sk[so][1:] == sk[so][:-1]
        edges.add(gpu_base + so[1:][same_s], gpu_base + so[:-1][same_s], DepKind.STREAM)


class GpuLookup:
    """GPU ops in issue order, queried by stream or launching thread (answers: GPU op index or -1)."""

    def __init__(self, g: GpuOps):
        self.g = g

    def _find(self, item_cols: list[np.ndarray], query_cols: list[np.ndarray], q_t: np.ndarray,
              after: bool = False) -> np.ndarray:
        ik, qk = key_ids(item_cols, query_cols)
        o = Ordered(ik, self.g.issue, self.g.start)
        return o.first_after(qk, q_t) if after else o.last_before(qk, q_t)

    def last_on_stream(self, q_rank, q_stream, q_t) -> np.ndarray:
        """Last op issued on (rank, stream) before ``q_t``."""
        return self._find([self.g.rank, self.g.stream], [q_rank, q_stream], q_t)

    def first_on_stream(self, q_rank, q_stream, q_t) -> np.ndarray:
        """First op issued on (rank, stream) after ``q_t``."""
        return self._find([self.g.rank, self.g.stream], [q_rank, q_stream], q_t, after=True)

    def last_on_device_stream(self, q_rank, q_device, q_stream, q_t) -> np.ndarray:
        """Last op issued on (rank, device, stream) before ``q_t``."""
        return self._find([self.g.rank, self.g.device, self.g.stream], [q_rank, q_device, q_stream], q_t)

    def by_thread(self, q_rank, q_thread, q_t, after: bool = False) -> np.ndarray:
        """Last (first, ``after``) op launched by (rank, thread) before (after) ``q_t``."""
        return self._find([self.g.rank, self.g.launch_thread], [q_rank, q_thread], q_t, after)

    def stream_of(self, gi: np.ndarray) -> np.ndarray:
        return np.where(gi >= 0, self.g.stream[np.maximum(gi, 0)], -1)
