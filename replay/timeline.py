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
        f.write("\n]}\n")
