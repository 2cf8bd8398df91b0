"""The model-free export format: the transformed graph and the replay's own results, as files.

An export directory (``replay export-<simulator>``, :mod:`replay.frontend.export`) holds, whatever the
hardware model or the simulator:

* ``graph.bin``: the transformed graph, binary format version 2 (header with counts, lanes
  with their discipline and pool maximum, nodes with their pool holds, CSR edges, end marker; :func:`write_graph`, layout in docs/gem5.md);
* ``lanes.csv``: ``index,type,rank,servers,name`` of every lane (:func:`lanes_csv`);
* ``expected.json``: the Python replay's makespan, per-rank makespans and per-lane busy time, and
  the simulated time a simulator must reach (:func:`expected_summary`; tick 0 is the first
  node's start).

The exporter plug-in (:class:`replay.exporters.exporter.Exporter`) adds its simulator's files (parameters,
configuration). Readers of the format (the C++ core in the H100 plug-in) may dump a schedule,
which :func:`read_schedule` reads. Nothing here knows a hardware model.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from fastrack_core.atomic import atomic_path, write_text_atomic
from fastrack_core.errors import FastrackError, GraphError
from fastrack_core.schema import DepKind
from replay.pipeline.engine import Schedule
from replay.graph import LaneType, OpGraph
from replay.pipeline.results import ReplayResult

FORMAT_VERSION = 2
MAGIC = b"FTRKGRPH"
END_MAGIC = b"FTRKEND\0"
HEADER_BYTES = 64
SCHEDULE_MAGIC = b"FTRKSCHD"
TICKS_PER_NS = 1000  # simulated ticks per ns in expected.json (gem5's default tick is 1 ps)
MAX_TIME_NS = 1 << 60  # |durations|, lags and release times the format's readers accept
MAX_TICK = (1 << 64) - 1  # simulated times are unsigned 64-bit tick counts (gem5's Tick)

GRAPH_FILE = "graph.bin"
LANES_FILE = "lanes.csv"
EXPECTED_FILE = "expected.json"


def graph_bytes_layout(graph: OpGraph) -> list[tuple[str, np.ndarray]]:
    """The arrays of format version 2, in file order, with their on-disk dtypes."""
    lanes = graph.lanes
    le = "<"
    return [
        ("lane_servers", np.ascontiguousarray(lanes.servers, dtype=le + "i4")),
        ("lane_type", np.ascontiguousarray(lanes.type, dtype="i1")),
        ("lane_rank", np.ascontiguousarray(lanes.rank, dtype=le + "i4")),
        ("lane_shared", np.ascontiguousarray(lanes.shared, dtype="i1")),
        ("lane_max_servers", np.ascontiguousarray(lanes.max_servers, dtype=le + "i4")),
        ("op_id", np.ascontiguousarray(graph.op_id, dtype=le + "i8")),
        ("rank", np.ascontiguousarray(graph.rank, dtype=le + "i4")),
        ("lane", np.ascontiguousarray(graph.lane, dtype=le + "i4")),
        ("kind", np.ascontiguousarray(graph.kind, dtype="i1")),
        ("category", np.ascontiguousarray(graph.category, dtype="i1")),
        ("dur", np.ascontiguousarray(graph.dur, dtype=le + "i8")),
        ("bytes", np.ascontiguousarray(graph.bytes, dtype=le + "i8")),
        ("order", np.ascontiguousarray(graph.order, dtype=le + "i8")),
        ("release", np.ascontiguousarray(graph.release, dtype=le + "i8")),
        ("group", np.ascontiguousarray(graph.group, dtype=le + "i8")),
        ("hold_lane", np.ascontiguousarray(graph.hold_lane, dtype=le + "i4")),
        ("hold_until", np.ascontiguousarray(graph.hold_until, dtype=le + "i8")),
        ("dep_ptr", np.ascontiguousarray(graph.dep_ptr, dtype=le + "i8")),
        ("dep_src", np.ascontiguousarray(graph.dep_src, dtype=le + "i8")),
        ("dep_kind", np.ascontiguousarray(graph.dep_kind, dtype="u1")),
        ("dep_lag", np.ascontiguousarray(graph.dep_lag, dtype=le + "i8")),
    ]


def write_graph(path: str | Path, graph: OpGraph) -> None:
    """Write ``graph`` in format version 2 (atomically)."""
    header = MAGIC + np.array([FORMAT_VERSION, HEADER_BYTES], "<u4").tobytes() + np.array(
        [graph.n, graph.num_edges, len(graph.lanes), 0, 0, 0], "<u8").tobytes()
    assert len(header) == HEADER_BYTES
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(header)
        for _, arr in graph_bytes_layout(graph):
            fh.write(arr.tobytes())
        fh.write(END_MAGIC)


def read_schedule(path: str | Path) -> dict[str, np.ndarray]:
    """A schedule written by ``fastrack_replay --schedule`` (version 2; tests compare it node by node)."""
    raw = Path(path).read_bytes()
    if raw[:8] != SCHEDULE_MAGIC:
        raise FastrackError("not a Fastrack schedule file", path=path)
    version = int(np.frombuffer(raw, "<u4", 1, 8)[0])
    if version != 2:
        raise FastrackError(f"schedule file version {version} is not supported (expected 2)", path=path)
    n, lanes = (int(x) for x in np.frombuffer(raw, "<u8", 2, 16))
    off = 32
    out = {}
    for name, dt, count in (("start", "<i8", n), ("finish", "<i8", n), ("crit_pred", "<i8", n), ("bound_by", "i1", n),
                            ("order", "<i8", n), ("slot_wait", "<i8", n), ("lane_servers", "<i8", lanes)):
        out[name] = np.frombuffer(raw, dt, count, off)
        off += count * np.dtype(dt).itemsize
    if off != len(raw):
        raise FastrackError(f"schedule file has {len(raw)} bytes, expected {off}", path=path)
    return out


def lanes_csv(graph: OpGraph) -> str:
    """``lanes.csv``: the name is the last field, unquoted, with line breaks replaced by spaces."""
    lanes = graph.lanes
    buf = io.StringIO()
    buf.write("index,type,rank,servers,name\n")
    for i, name in enumerate(lanes.names):
        clean = str(name).replace("\r", " ").replace("\n", " ")
        buf.write(f"{i},{LaneType(int(lanes.type[i])).label},{int(lanes.rank[i])},{int(lanes.servers[i])},{clean}\n")
    return buf.getvalue()


def check_graph(graph: OpGraph, makespan_ns: int) -> None:
    """Values the format's readers represent (the C++ reader validates the same) and a makespan
    whose simulated time fits a 64-bit tick counter."""
    lanes = graph.lanes
    if len(lanes) and (lanes.type.min() < 0 or lanes.type.max() >= len(LaneType)):
        raise GraphError("the transformed graph has a lane type the C++ core does not know; export refused")
    if graph.num_edges and int(graph.dep_kind.max()) >= len(DepKind):
        raise GraphError(f"the transformed graph has dependency kind {int(graph.dep_kind.max())}, which the C++ "
                         "core does not know; export refused")
    for name, arr in (("duration", graph.dur), ("release time", graph.release), ("dependency lag", graph.dep_lag)):
        if arr.size and int(np.abs(arr).max()) > MAX_TIME_NS:
            raise GraphError(f"a {name} exceeds 2^60 ns, beyond what the C++ core accepts; export refused")
    if makespan_ns * TICKS_PER_NS > MAX_TICK:
        raise GraphError(f"the replay lasts {makespan_ns} ns, which is more than gem5's 64-bit tick counter holds at "
                         f"{TICKS_PER_NS} ticks/ns; export refused")


def expected_summary(graph: OpGraph, sched: Schedule, result: ReplayResult) -> dict[str, Any]:
    """The Python replay's numbers for ``expected.json`` (the caller adds the export's identity)."""
    origin = int(sched.start.min()) if graph.n else 0
    makespan = int(result.makespan_ns)
    if graph.n and makespan != int(sched.finish.max()) - origin:
        raise GraphError(f"the replay's makespan {makespan} ns is not its last finish minus its first start; "
                         "the gem5 export assumes it is")
    return {
        "format_version": FORMAT_VERSION,
        "makespan_ns": makespan,
        "per_rank": [{"rank": r.rank, "makespan_ns": int(r.makespan_ns)} for r in result.per_rank],
        "origin_ns": origin,
        "ticks_per_ns": TICKS_PER_NS,
        "expected_ticks": makespan * TICKS_PER_NS,
        "nodes": graph.n,
        "edges": graph.num_edges,
        "resources": [{"index": i, "name": r["name"], "type": r["type"], "rank": r["rank"], "servers": r["servers"],
                       "ops": r["ops"], "busy_ns": r["busy_ns"],
                       **({"peak_servers": r["peak_servers"]} if "peak_servers" in r else {})}
                      for i, r in enumerate(result.resources)],
    }


def write_graph_files(out_dir: str | Path, graph: OpGraph, sched: Schedule, result: ReplayResult,
                      identity: dict[str, Any]) -> dict[str, Any]:
    """Check the graph (:func:`check_graph`), then write ``graph.bin``, ``lanes.csv`` and
    ``expected.json`` (the replay's numbers and ``identity``: trace, protocol, model, preset,
    digest) into the existing directory ``out_dir``. Returns the content of ``expected.json``."""
    out = Path(out_dir)
    check_graph(graph, int(result.makespan_ns))
    expected = expected_summary(graph, sched, result)
    expected.update(identity)
    write_graph(out / GRAPH_FILE, graph)
    write_text_atomic(out / LANES_FILE, lanes_csv(graph))
    write_text_atomic(out / EXPECTED_FILE, json.dumps(expected, indent=2, sort_keys=True) + "\n")
    return expected


__all__ = ["FORMAT_VERSION", "MAGIC", "END_MAGIC", "HEADER_BYTES", "SCHEDULE_MAGIC", "TICKS_PER_NS", "MAX_TIME_NS",
           "MAX_TICK", "GRAPH_FILE", "LANES_FILE", "EXPECTED_FILE", "graph_bytes_layout", "write_graph",
           "read_schedule", "lanes_csv", "check_graph", "expected_summary", "write_graph_files"]
