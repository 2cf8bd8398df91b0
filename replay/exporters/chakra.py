"""``replay export-chakra``: a replay's transformed graph as MLCommons Chakra execution traces.

Registered as ``chakra`` in the ``fastrack.exporters`` entry-point group (pyproject.toml). It is
model-free: it writes whatever graph the protocol produced, TEE nodes included, so ASTRA-sim (or
any Chakra consumer) can run TEE what-ifs at cluster scale. Files written into the export
directory (docs/chakra.md has the mapping and what is approximate):

* ``fastrack.<rank>.et``: one Chakra ET per rank (ASTRA-sim's workload prefix is
  ``DIR/fastrack``): a ``GlobalMetadata`` (version ``1.0.0``), then one ``Node`` per graph node;
* ``manifest.json``: what was exported from what, counts per Chakra node type, and what the
  format could not carry.

Node ids are the graph's node indices (unique over all ranks). ``data_deps`` list the node's
prerequisites on its own rank. Exact values that Chakra's fields cannot hold travel as attributes
(``fastrack_*``: nanosecond durations and starts, dependency kinds and lags, prerequisites on
other ranks, barrier groups, lanes), so :mod:`tracegen.importers.chakra` gets the graph back.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from fastrack_core.atomic import atomic_path, write_text_atomic
from fastrack_core.chakra import WRITE_VERSION, Attr, CollectiveCommType, GlobalMetadata, Node, NodeType, write_et
from fastrack_core.errors import GraphError
from fastrack_core.schema import CopyDir, DepKind, OpKind
from replay.exporters.exporter import Exporter, ExportJob
from replay.graph import NO_LANE, Category, LaneType, OpGraph

FILE_PREFIX = "fastrack"
MANIFEST = "manifest.json"
_ET_RE = re.compile(rf"^{FILE_PREFIX}\.\d+\.et$")

# Lanes whose nodes run on the host CPU (COMP_NODE with is_cpu_op = true).
_CPU_LANES = frozenset({LaneType.HOST_THREAD, LaneType.CPU_CRYPTO, LaneType.SUBMIT})
_CPU_CATEGORIES = frozenset({Category.HOST, Category.LAUNCH, Category.CPU_CRYPTO, Category.SYNC_WAIT,
                             Category.BOUNCE_WAIT})
_HOST_KINDS = frozenset(int(k) for k in (OpKind.CPU, OpKind.RUNTIME, OpKind.SYNC))

# Collective type of a node, from the trace's coll_type or else the kernel name (normalised: no
# '_'/'-', lower case), as Chakra's converter does. NCCL SendRecv kernels implement all-to-all.
_COMM_BY_LABEL = {
    "all_reduce": CollectiveCommType.ALL_REDUCE, "reduce": CollectiveCommType.REDUCE,
    "all_gather": CollectiveCommType.ALL_GATHER, "gather": CollectiveCommType.GATHER,
    "scatter": CollectiveCommType.SCATTER, "broadcast": CollectiveCommType.BROADCAST,
    "all_to_all": CollectiveCommType.ALL_TO_ALL, "reduce_scatter": CollectiveCommType.REDUCE_SCATTER,
    "barrier": CollectiveCommType.BARRIER, "send_recv": CollectiveCommType.ALL_TO_ALL,
}  # fmt: skip
_COMM_NAME_KEYS = (("allreduce", CollectiveCommType.ALL_REDUCE), ("alltoall", CollectiveCommType.ALL_TO_ALL),
                   ("allgather", CollectiveCommType.ALL_GATHER), ("reducescatter", CollectiveCommType.REDUCE_SCATTER),
                   ("broadcast", CollectiveCommType.BROADCAST), ("sendrecv", CollectiveCommType.ALL_TO_ALL))


class _Files(tuple):
    """The names the exporter writes: ``fastrack.<rank>.et`` for any rank, and the manifest."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name == MANIFEST or bool(_ET_RE.match(name)))


def et_file(rank: int) -> str:
    return f"{FILE_PREFIX}.{rank}.et"


def comm_type_of(name: str, label: str | None) -> CollectiveCommType | None:
    """The Chakra collective type of a collective node (None: not recognised)."""
    if label and label in _COMM_BY_LABEL:
        return _COMM_BY_LABEL[label]
    flat = name.replace("_", "").replace("-", "").lower()
    for key, typ in _COMM_NAME_KEYS:
        if key in flat:
            return typ
    return None


def node_type(graph: OpGraph, i: int) -> tuple[NodeType, bool]:
    """(Chakra node type, runs on the CPU) of node ``i`` (docs/chakra.md, "Mapping")."""
    kind = int(graph.kind[i])
    lane = int(graph.lane[i])
    ltype = LaneType(int(graph.lanes.type[lane])) if lane != NO_LANE else None
    if kind == OpKind.COLLECTIVE:
        return NodeType.COMM_COLL_NODE, False
    if kind in _HOST_KINDS:
        return NodeType.COMP_NODE, True
    if ltype == LaneType.PCIE_H2D:
        return NodeType.MEM_LOAD_NODE, False
    if ltype == LaneType.PCIE_D2H:
        return NodeType.MEM_STORE_NODE, False
    if kind == OpKind.MEMCPY:  # a copy of the trace, wherever the protocol put it
        d = int(graph.copy_dir[i])
        return {CopyDir.H2D: NodeType.MEM_LOAD_NODE, CopyDir.D2H: NodeType.MEM_STORE_NODE}.get(d, NodeType.COMP_NODE), False
    if kind < 16:  # kernel, memset
        return NodeType.COMP_NODE, False
    if ltype is not None:
        return NodeType.COMP_NODE, ltype in _CPU_LANES
    return NodeType.COMP_NODE, Category(int(graph.category[i])) in _CPU_CATEGORIES


def _trace_collectives(trace: str, graph: OpGraph) -> dict[int, tuple[str | None, str | None, int]]:
    """op id -> (coll_type, coll_group, coll_bytes) of the trace's collectives, when the trace
    file is there to read (the graph keeps none of them)."""
    from fastrack_core.traceio import read_trace

    if not trace or not Path(trace).is_file() or not (graph.kind == OpKind.COLLECTIVE).any():
        return {}
    tr = read_trace(trace, columns=["op_id", "kind", "coll_type", "coll_group", "coll_bytes"])
    sel = np.flatnonzero(tr.column("kind") == OpKind.COLLECTIVE.label)
    ids, types, groups, sizes = (tr.column(c) for c in ("op_id", "coll_type", "coll_group", "coll_bytes"))
    return {int(ids[j]): (types[j], groups[j], int(sizes[j])) for j in sel}


def build_nodes(graph: OpGraph, start: np.ndarray, trace: str = "") -> tuple[dict[int, list[Node]], dict[str, Any]]:
    """The Chakra nodes of every rank and the export's counts (what was approximate or lost)."""
    lanes = graph.lanes
    colls = _trace_collectives(trace, graph)
    origin = {int(r): int(start[graph.rank == r].min()) for r in np.unique(graph.rank)} if graph.n else {}
    per_rank: dict[int, list[Node]] = {r: [] for r in origin}
    counts: dict[str, int] = {t.name: 0 for t in NodeType if t not in (NodeType.INVALID_NODE, NodeType.METADATA_NODE)}
    lost = {"cross_rank_deps": 0, "launch_edges_as_finish_to_start": 0, "nonzero_lags": 0, "pool_holds": 0,
            "collectives_of_unknown_type": 0, "durations_rounded_to_us": 0}
    dep_ptr, dep_src, dep_kind, dep_lag = graph.dep_ptr, graph.dep_src, graph.dep_kind, graph.dep_lag
    for i in range(graph.n):
        rank = int(graph.rank[i])
        ntype, on_cpu = node_type(graph, i)
        counts[ntype.name] += 1
        dur = int(graph.dur[i])
        st = int(start[i]) - origin[rank]
        lo, hi = int(dep_ptr[i]), int(dep_ptr[i + 1])
        local, kinds, lags, remote, rkinds = [], [], [], [], []
        for e in range(lo, hi):
            s = int(dep_src[e])
            if int(graph.rank[s]) == rank:
                local.append(s)
                kinds.append(int(dep_kind[e]))
                lags.append(int(dep_lag[e]))
            else:
                remote.append(s)
                rkinds.append(int(dep_kind[e]))
            lost["launch_edges_as_finish_to_start"] += int(dep_kind[e]) == DepKind.LAUNCH
            lost["nonzero_lags"] += int(dep_lag[e]) != 0
        lost["cross_rank_deps"] += len(remote)
        lost["durations_rounded_to_us"] += dur % 1000 != 0
        lane = int(graph.lane[i])
        attrs = [
            Attr("is_cpu_op", "bool", on_cpu),
            Attr("fastrack_kind", "string", graph.kind_label(int(graph.kind[i]))),
            Attr("fastrack_op_id", "int64", int(graph.op_id[i])),
            Attr("fastrack_dur_ns", "int64", dur),
            Attr("fastrack_start_ns", "int64", st),
        ]
        if lane != NO_LANE:
            ltype = LaneType(int(lanes.type[lane]))
            if ltype == LaneType.HOST_THREAD:
                attrs.append(Attr("tid", "int64", int(lanes.key[lane])))
            elif ltype == LaneType.STREAM:
                attrs.append(Attr("stream", "int64", int(lanes.key[lane])))
            attrs.append(Attr("fastrack_lane", "int64", lane))  # names and types: in the GlobalMetadata
        nbytes = int(graph.bytes[i])
        if ntype in (NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE):
            attrs.append(Attr("tensor_size", "uint64", nbytes))
        if int(graph.copy_dir[i]):
            attrs.append(Attr("fastrack_copy_dir", "string", CopyDir(int(graph.copy_dir[i])).label or ""))
        if nbytes:
            attrs.append(Attr("fastrack_bytes", "int64", nbytes))
        if ntype == NodeType.COMM_COLL_NODE:
            label, group, size = colls.get(int(graph.origin[i]), (None, None, nbytes))
            ctype = comm_type_of(graph.names[int(graph.name[i])], label)
            if ctype is None:
                lost["collectives_of_unknown_type"] += 1
                ctype = CollectiveCommType.ALL_REDUCE
                attrs.append(Attr("fastrack_comm_type_unknown", "bool", True))
            attrs += [Attr("comm_type", "int64", int(ctype)), Attr("comm_size", "int64", int(size or nbytes))]
            if group:
                attrs.append(Attr("pg_name", "string", str(group)))
        if int(graph.group[i]) >= 0:
            attrs.append(Attr("fastrack_group", "int64", int(graph.group[i])))
        if int(graph.hold_lane[i]) != NO_LANE:
            lost["pool_holds"] += 1
            attrs += [Attr("fastrack_hold_lane", "int64", int(graph.hold_lane[i])),
                      Attr("fastrack_hold_until", "int64", int(graph.hold_until[i]))]
        if local:
            attrs += [Attr("fastrack_dep_kinds", "int32_list", kinds), Attr("fastrack_dep_lags_ns", "int64_list", lags)]
        if remote:
            attrs += [Attr("fastrack_remote_deps", "int64_list", remote),
                      Attr("fastrack_remote_dep_kinds", "int32_list", rkinds)]
        per_rank[rank].append(Node(id=i, name=graph.names[int(graph.name[i])], type=ntype, data_deps=local,
                                   start_time_micros=max(0, round(st / 1000)), duration_micros=round(dur / 1000),
                                   attrs=attrs))
    return per_rank, {"node_types": counts, "approximate_or_lost": lost}


class ChakraExporter(Exporter):
    name = "chakra"
    description = ("Replay TRACE under a protocol and write the transformed graph (TEE operations as nodes) as "
                   "MLCommons Chakra execution traces, one fastrack.<rank>.et per rank, for ASTRA-sim.")
    protocols = ()
    files = _Files((f"{FILE_PREFIX}.<rank>.et", MANIFEST))

    def write(self, out: Path, job: ExportJob) -> dict[str, Any]:
        graph, sched = job.graph, job.schedule
        if graph.n == 0:
            raise GraphError("the transformed graph has no nodes; nothing to export")
        per_rank, counts = build_nodes(graph, sched.start, job.trace)
        ranks = sorted(per_rank)
        for r in ranks:
            meta = GlobalMetadata(version=WRITE_VERSION, attrs=[
                Attr("fastrack_rank", "int64", r), Attr("fastrack_world", "int64", len(ranks)),
                Attr("fastrack_protocol", "string", job.protocol),
                Attr("fastrack_trace", "string", Path(job.trace).name if job.trace else ""),
                Attr("fastrack_time_unit", "string", "duration_micros/start_time_micros in us; fastrack_*_ns in ns"),
                Attr("fastrack_lane_names", "string_list", [str(x) for x in graph.lanes.names]),
                Attr("fastrack_lane_types", "string_list", [LaneType(int(x)).label for x in graph.lanes.type]),
            ])
            with atomic_path(out / et_file(r)) as tmp, open(tmp, "wb") as fh:
                write_et(fh, meta, per_rank[r])
        summary = {"format": "chakra-et", "chakra_version": WRITE_VERSION, **job.identity(),
                   "trace": Path(job.trace).name if job.trace else "", "ranks": ranks,
                   "files": [et_file(r) for r in ranks], "nodes": graph.n,
                   "makespan_ns": int(job.result.makespan_ns), **counts}
        write_text_atomic(out / MANIFEST, json.dumps(summary, indent=2, sort_keys=True) + "\n")
        return summary

    def done_message(self, out_dir, summary: dict[str, Any]) -> str:
        lost = summary["approximate_or_lost"]
        notes = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in lost.items() if v)
        return (f"wrote {out_dir}: {summary['nodes']} nodes in {len(summary['files'])} Chakra ET file(s)"
                + (f" (approximate: {notes}; see {MANIFEST})" if notes else ""))


CHAKRA = ChakraExporter()

__all__ = ["CHAKRA", "ChakraExporter", "build_nodes", "node_type", "comm_type_of", "et_file", "FILE_PREFIX",
           "MANIFEST"]
