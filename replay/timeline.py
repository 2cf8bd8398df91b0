"""Perfetto / chrome://tracing timeline of a replay: one process per rank, one track per lane.

Hardware-model lanes (CPU crypto, bounce slots, PCIe links, copy engines, ...) appear as tracks
of their own next to host threads and streams, so the TEE data path can be read off the picture.
"""

from __future__ import annotations

import json
import os

import numpy as np

from fastrack.atomic import atomic_path
from replay.engine import Schedule
from replay.graph import OpGraph


def write_timeline(path: str | os.PathLike, graph: OpGraph, sched: Schedule, protocol: str) -> None:
    """Write the Chrome-trace JSON atomically. Times in us with ns precision (3 decimals)."""
    lanes = graph.lanes
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        f.write('{"displayTimeUnit": "ns", "otherData": ')
        f.write(json.dumps({"tool": "fastrack replay", "protocol": protocol}))
        f.write(', "traceEvents": [\n')
        first = True

        def emit(obj: dict) -> None:
            nonlocal first
            f.write(("" if first else ",\n") + json.dumps(obj, separators=(",", ":")))
            first = False

        for r in np.unique(lanes.rank):
            emit({"ph": "M", "name": "process_name", "pid": int(r), "args": {"name": f"rank {int(r)} (replayed: {protocol})"}})
        for li, name in enumerate(lanes.names):
            emit({"ph": "M", "name": "thread_name", "pid": int(lanes.rank[li]), "tid": li,
                  "args": {"name": name.split("/", 1)[-1]}})
            emit({"ph": "M", "name": "thread_sort_index", "pid": int(lanes.rank[li]), "tid": li,
                  "args": {"sort_index": li}})
        unlaned = len(lanes.names)
        names = graph.names
        for i in np.argsort(sched.start, kind="stable"):
            i = int(i)
            lane = int(graph.lane[i])
            emit({
                "ph": "X",
                "name": names[int(graph.name[i])],
                "cat": graph.kind_label(int(graph.kind[i])),
                "pid": int(graph.rank[i]),
                "tid": lane if lane >= 0 else unlaned,
                "ts": round(int(sched.start[i]) / 1000, 3),
                "dur": round(int(sched.finish[i] - sched.start[i]) / 1000, 3),
                "args": {"op_id": int(graph.op_id[i]), "origin_op": int(graph.origin[i]), "bytes": int(graph.bytes[i])},
            })
        for r, t, v in bounce_occupancy(graph, sched):
            emit({"ph": "C", "name": "bounce slots in use", "pid": r, "ts": round(t / 1000, 3), "args": {"slots": v}})
        f.write("\n]}\n")


def bounce_occupancy(graph: OpGraph, sched: Schedule) -> list[tuple[int, int, int]]:
    """(rank, time ns, slots in use) steps of the bounce-buffer pool, for a counter track.

    A chunk holds a slot from the start of the node that fills it to the finish of the node that
    empties it: H2D, CPU encryption to the PCIe transfer; D2H, the PCIe transfer to the CPU
    decryption. Chunks of one copy are paired in order (the i-th filler with the i-th emptier).
    Derived nodes are recognised by their labels in ``graph.kind_names``.
    """
    code = {label: k for k, label in graph.kind_names.items()}
    enc, dec, pcie = code.get("cpu_encrypt"), code.get("cpu_decrypt"), code.get("pcie")
    if pcie is None or (enc is None and dec is None):
        return []
    deltas: list[tuple[int, int, int]] = []
    for filler_kind, emptier_kind, fill_first in ((enc, pcie, True), (pcie, dec, False)):
        if filler_kind is None or emptier_kind is None:
            continue
        owner_kind = enc if fill_first else dec
        owners = set(graph.origin[graph.kind == owner_kind].tolist())
        if not owners:
            continue
        in_owner = np.isin(graph.origin, list(owners))
        fill = np.flatnonzero(in_owner & (graph.kind == filler_kind))
        empty = np.flatnonzero(in_owner & (graph.kind == emptier_kind))
        fill = fill[np.lexsort((fill, graph.origin[fill]))]
        empty = empty[np.lexsort((empty, graph.origin[empty]))]
        if fill.size != empty.size:
            continue  # not a one-slot-per-chunk pattern; show nothing rather than something wrong
        deltas += [(int(graph.rank[i]), int(sched.start[i]), 1) for i in fill]
        deltas += [(int(graph.rank[i]), int(sched.finish[i]), -1) for i in empty]
    deltas.sort(key=lambda d: (d[0], d[1], d[2]))
    out, level, cur_rank = [], 0, None
    for r, t, d in deltas:
        if r != cur_rank:
            level, cur_rank = 0, r
        level += d
        out.append((r, t, level))
    return out
