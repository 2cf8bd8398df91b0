"""The bounce-buffer (staging) pool of a rank: slots held by chunks, served by the engine.

Every CPU-staged chunk holds one slot of its rank's pool, a ``BOUNCE_POOL`` lane shared by both
directions, all threads and all copies: an H2D chunk from the CPU encryption that fills the slot
to the PCIe transfer that drains it; a D2H chunk from the PCIe write that fills it to the CPU
decryption that empties it. In the graph that is one hold per chunk (``OpGraph.hold_lane`` on the
filling node, ``hold_until`` = the emptying node); the engine (replay/pipeline/engine.py) hands a slot to
a chunk when the chunk is ready, takes it back as soon as the emptying node finishes (not in any
ring order), and, when a chunk finds every slot in use, doubles the pool up to the model's
maximum, as the driver's staging pool does ([S7] uvm_conf_computing.c:
32 buffers, expanded by its own size whenever none is free). Beyond the maximum the chunk waits
for a slot: that wait is the critical path's ``bounce_wait``.

A transfer that must hold several slots at once (``need``; none of the protocols of .cc does: each
D2H chunk is decrypted as it lands) raises its rank's maximum to that many slots: the pool grows
to hold it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from replay.graph import LaneType, NO_LANE

from .editor import GraphEditor

POOL_NAME = "bounce_pool"


def add_pool_holds(ed: GraphEditor, rank: np.ndarray, holder: np.ndarray, until: np.ndarray, slots: int,
                   max_slots: int, need: np.ndarray | int = 1) -> None:
    """One slot hold per chunk: chunk ``i`` of rank ``rank[i]`` takes a slot when ``holder[i]`` is
    ready to start and returns it when ``until[i]`` finishes. ``slots``/``max_slots``: the pool's
    initial size and the size it may double up to; ``need``: slots the chunk's transfer holds at
    once (a rank's maximum is raised to its largest need). Creates each rank's pool lane."""
    holder = np.asarray(holder, np.int64)
    if holder.size == 0:
        return
    rank = np.asarray(rank, np.int64)
    need = np.broadcast_to(np.asarray(need, np.int64), holder.shape)
    ranks, inv = np.unique(rank, return_inverse=True)
    top = np.zeros(ranks.size, np.int64)
    np.maximum.at(top, inv, need)
    lanes = ed.lanes
    cap = np.maximum(top, max(int(max_slots), int(slots)))
    pool = lanes.find_many(ranks, LaneType.BOUNCE_POOL, 0)
    have = pool != NO_LANE
    if have.any():  # existing pools may have to grow further
        grown = lanes.max_servers.copy()
        grown[pool[have]] = np.maximum(grown[pool[have]], cap[have])
        if not np.array_equal(grown, lanes.max_servers):
            lanes = dataclasses.replace(lanes, max_servers=grown)
    new = np.flatnonzero(~have)
    if new.size:  # one copy of the lane arrays for every rank's new pool
        lanes, first = lanes.extend(ranks[new], int(LaneType.BOUNCE_POOL), 0,
                                    [f"rank{int(r)}/{POOL_NAME}" for r in ranks[new].tolist()], int(slots),
                                    max_servers=cap[new])
        pool[new] = first + np.arange(new.size, dtype=np.int32)
    ed.lanes = lanes
    ed.add_holds(holder, until, pool[inv])
