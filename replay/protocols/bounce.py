"""The bounce-buffer (staging) pool of a rank: a ring of ``slots`` slots, reclaimed in order.

Every CPU-staged chunk of a rank (H2D: the CPU writes ciphertext into a slot, the PCIe transfer
of the chunk frees it; D2H: the GPU's PCIe write fills a slot, the CPU decryption frees it) takes
the next slot of the ring. Chunks take slots in *pool order*: copies in a topological order of
the trace graph augmented with the host-synchronous waits every CC protocol adds (so the ring
never waits on work that itself waits for the ring), chunks of a copy in sequence. Like a ring
buffer's tail pointer, slots are reclaimed in order: the chunk at ring position ``g`` may take
its slot only when the chunks at positions ``0..g-slots`` have all released theirs.

In the graph: a zero-time ``bounce_release`` node per ring position ``h`` (RESOURCE edges from
the freeing node of chunk ``h`` and from release node ``h-1``), and a RESOURCE edge from release
node ``g-slots`` to the acquiring node of chunk ``g``. The pool is shared by all copies of a rank,
both directions and all threads. Because a later position only ever waits on earlier ones, more
slots (or faster work) can never delay anything.
"""

from __future__ import annotations

import numpy as np

from fastrack.schema import DepKind
from replay.graph import NO_LANE

from .editor import GraphEditor
from .kinds import DerivedKind


def add_ring(ed: GraphEditor, rank: np.ndarray, pool_pos: np.ndarray, seq: np.ndarray, anchor: np.ndarray,
             acquirer: np.ndarray, freer: np.ndarray, slots: np.ndarray | int) -> int:
    """Add the ring for the given chunks (one entry per chunk that uses a slot).

    rank, pool_pos (position of the chunk's copy in pool order), seq (chunk index in its copy):
    define the ring order per rank. anchor: the trace node of the chunk's copy (provenance).
    slots: ring size seen by each chunk (the pool's slot count, or more where the pool grows).
    Returns the number of RESOURCE edges to acquirers (chunks that may wait for a slot).
    """
    m = rank.shape[0]
    if m == 0:
        return 0
    o = np.lexsort((seq, pool_pos, rank))
    r, acq, fre, anc = rank[o], acquirer[o], freer[o], anchor[o]
    window = np.broadcast_to(np.asarray(slots, np.int64), (m,))[o]
    new_rank = np.r_[True, r[1:] != r[:-1]]
    seg = np.cumsum(new_rank) - 1
    start = np.flatnonzero(new_rank)[seg]
    g = np.arange(m) - start  # ring position within the rank
    waits = np.flatnonzero(g >= window)
    if waits.size == 0:
        return 0
    target = waits - window[waits]  # the release a waiting chunk needs (same rank)
    last_needed = np.full(int(seg[-1]) + 1, -1, np.int64)
    np.maximum.at(last_needed, seg[target], target)
    pos = np.flatnonzero(np.arange(m) <= last_needed[seg])  # a prefix of each rank's ring
    rel = ed.add_nodes(DerivedKind.BOUNCE_RELEASE, anc[pos], np.int32(NO_LANE), 0)
    rel_at = np.full(m, -1, np.int64)
    rel_at[pos] = rel
    ed.add_edges(fre[pos], rel, DepKind.RESOURCE, 0)
    chained = pos[g[pos] > 0]
    ed.add_edges(rel_at[chained - 1], rel_at[chained], DepKind.RESOURCE, 0)
    ed.add_edges(rel_at[target], acq[waits], DepKind.RESOURCE, 0)
    return int(waits.size)
