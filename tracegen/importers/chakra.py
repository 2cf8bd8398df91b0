"""Import MLCommons Chakra execution traces (protobuf ``.et``, one file per rank) into a trace.

A Chakra ET states its dependencies, so this importer builds the finished trace itself (the
``table`` of :class:`~tracegen.importers.common.RawImport`) instead of handing raw ops to
:func:`tracegen.deps.derive_dependencies`. The wire format is read by :mod:`fastrack_core.chakra`.
Mapping (docs/chakra.md):

* ``COMP_NODE``: ``cpu`` when ``is_cpu_op`` is true, else ``kernel``; ``MEM_LOAD_NODE``: a ``memcpy``
  H2D; ``MEM_STORE_NODE``: a ``memcpy`` D2H; ``COMM_SEND_NODE``/``COMM_RECV_NODE``: a ``memcpy`` P2P
  of ``comm_size`` bytes; ``COMM_COLL_NODE``: a ``collective`` (``comm_type``, ``comm_size``,
  ``pg_name``); ``METADATA_NODE``/``INVALID_NODE`` carry no work: dropped, and dependencies through
  them are bridged. A ``fastrack_kind`` attribute naming a trace kind (files of ``replay
  export-chakra``) takes precedence.
* ``data_deps`` are the dependencies (ASTRA-sim's feeder reads only those); ``ctrl_deps`` are the
  caller -> callee relation in Chakra's PyTorch converter, not an execution order, and are ignored.
  Dependency kinds come from ``fastrack_dep_kinds`` when present, else from the two ends:
  host -> host ``program``, host -> GPU ``launch``, GPU -> host ``sync``, GPU -> GPU ``stream``
  on one stream and ``event`` across streams; a file without ``fastrack_dep_kinds`` also gets
  the thread and stream orders a trace states (``program``/``stream`` on the previous node of the
  same thread or stream, by start).
* Times: ``fastrack_dur_ns``/``fastrack_start_ns`` when present (exact), else ``duration_micros`` and
  ``start_time_micros`` x 1000. A file whose nodes all have ``start_time_micros`` 0 (Chakra's
  converter does not set it) gets as-soon-as-possible starts from its dependencies, durations
  and one node at a time per thread and per stream.
* Threads and streams: the ``tid`` and ``stream`` attributes, else (nodes of other lanes in
  exports) ``SYNTHETIC_LANE_BASE`` + the ``fastrack_lane`` index, else 0.
* Collectives are matched across ranks by ``fastrack_group`` when present, else by (``pg_name``,
  type, order on the rank), and linked with ``collective`` dependencies.
"""

from __future__ import annotations

import heapq
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from fastrack_core.chakra import CollectiveCommType, Node, NodeType, looks_like_et, read_et
from fastrack_core.errors import TraceFormatError
from fastrack_core.schema import MAX_DEPS_PER_NODE, MAX_EDGES, OP_KIND_BY_LABEL, DepKind, OpKind
from fastrack_core.traceio import make_table, validate_table
from tracegen.importers.common import SQLITE_MAGIC, RawImport, read_head_plain

SNIFF_BYTES = 1 << 16
SYNTHETIC_LANE_BASE = 1 << 32  # thread/stream id of an exported node on a lane that is no thread or stream
_FILE_RE = re.compile(r"\.et(\.gz)?$", re.I)
_RANK_RE = re.compile(r"\.(\d+)\.et(\.gz)?$", re.I)
_HOST = frozenset(int(k) for k in (OpKind.CPU, OpKind.RUNTIME, OpKind.SYNC))
_NO_WORK = (NodeType.METADATA_NODE, NodeType.INVALID_NODE)
_COLL_LABEL = {
    CollectiveCommType.ALL_REDUCE: "all_reduce", CollectiveCommType.REDUCE: "reduce",
    CollectiveCommType.ALL_GATHER: "all_gather", CollectiveCommType.GATHER: "gather",
    CollectiveCommType.SCATTER: "scatter", CollectiveCommType.BROADCAST: "broadcast",
    CollectiveCommType.ALL_TO_ALL: "all_to_all", CollectiveCommType.REDUCE_SCATTER: "reduce_scatter",
    CollectiveCommType.REDUCE_SCATTER_BLOCK: "reduce_scatter", CollectiveCommType.BARRIER: "barrier",
}  # fmt: skip


def _head(path: str) -> bytes:
    return read_head_plain(path, SNIFF_BYTES)


def sniff(path: str | os.PathLike) -> bool:
    """A Chakra ET file (plain or gzip), or a directory holding ``*.et`` files that are."""
    p = str(path)
    if os.path.isdir(p):
        files = [f for f in sorted(os.listdir(p)) if _FILE_RE.search(f) and os.path.isfile(os.path.join(p, f))]
        return bool(files) and looks_like_et(_head(os.path.join(p, files[0])))
    return looks_like_et(_head(p))


def expand_inputs(paths: Iterable[str | os.PathLike]) -> list[str]:
    out: list[str] = []
    for p in map(str, paths):
        if os.path.isdir(p):
            files = sorted(os.path.join(p, f) for f in os.listdir(p) if _FILE_RE.search(f))
            if not files:
                raise TraceFormatError("directory holds no Chakra ET files (*.et)", path=p)
            out.extend(files)
        else:
            out.append(p)
    if not out:
        raise TraceFormatError("no input files")
    return out


def _rank_of(path: str, meta_rank: Any, index: int) -> int:
    if isinstance(meta_rank, int) and meta_rank >= 0:
        return meta_rank
    m = _RANK_RE.search(Path(path).name)
    return int(m.group(1)) if m else index


def _kind(node: Node) -> tuple[int, str | None]:
    """(OpKind, copy direction label) of a node that does work."""
    fk = node.attr("fastrack_kind")
    t = node.type
    if isinstance(fk, str) and fk in OP_KIND_BY_LABEL:
        kind = int(OP_KIND_BY_LABEL[fk])
    elif t == NodeType.COMM_COLL_NODE:
        kind = int(OpKind.COLLECTIVE)
    elif t in (NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
        kind = int(OpKind.MEMCPY)
    elif t == NodeType.COMP_NODE:
        kind = int(OpKind.CPU) if node.attr("is_cpu_op") is True else int(OpKind.KERNEL)
    else:
        raise ValueError(t)
    cd = node.attr("fastrack_copy_dir")
    if kind == OpKind.MEMCPY and not cd:
        cd = {NodeType.MEM_LOAD_NODE: "H2D", NodeType.MEM_STORE_NODE: "D2H"}.get(t, "P2P")
    return kind, (cd if kind == OpKind.MEMCPY and cd in ("H2D", "D2H", "D2D", "P2P") else None)


def _int_attr(node: Node, name: str, path: str, *, default: int | None = None, nonneg: bool = False) -> int | None:
    v = node.attr(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or (nonneg and v < 0):
        raise TraceFormatError(f"node {node.id}: field 'attr.{name}' must be a{' non-negative' if nonneg else 'n'} "
                               "integer", path=path)
    return v


def _bridge(by_id: dict[int, Node], path: str):
    """``real_deps(node)``: the dependencies of ``node`` with every no-work node replaced by its own
    (bridged, transitively), each node once, in first-seen order. Iterative (a chain of any length
    needs no recursion) and memoised per no-work node; the work is bounded by
    :data:`~fastrack_core.schema.MAX_EDGES` steps and each result by
    :data:`~fastrack_core.schema.MAX_DEPS_PER_NODE` entries, so layers of no-work nodes that each
    depend on all of the layer before (2^layers paths) cost their distinct ends only."""
    memo: dict[int, list[int]] = {}  # no-work node -> its bridged real deps
    budget = [MAX_EDGES]

    def spend(k: int) -> None:
        budget[0] -= k
        if budget[0] < 0:
            raise TraceFormatError(f"bridging dependencies through no-work nodes takes more than {MAX_EDGES:,} steps "
                                   "(fastrack_core.schema.MAX_EDGES)", path=path)

    def merged(nid: int, deps: list[int]) -> list[int]:
        out: dict[int, None] = {}
        for d in deps:
            src = by_id.get(d)
            if src is None:
                raise TraceFormatError(f"node {nid}: field 'Node.data_deps' names node {d}, which is not in the file",
                                       path=path)
            if src.type in _NO_WORK:
                got = memo[d]
                spend(len(got) + 1)
                out.update(dict.fromkeys(got))
            else:
                spend(1)
                out[d] = None
            if len(out) > MAX_DEPS_PER_NODE:
                raise TraceFormatError(f"node {nid}: field 'Node.data_deps' bridges to more than {MAX_DEPS_PER_NODE:,} "
                                       "dependencies (fastrack_core.schema.MAX_DEPS_PER_NODE)", path=path)
        return list(out)

    def resolve(root: int) -> None:
        """Fills ``memo`` for the no-work node ``root`` and every no-work node it reaches (DFS
        with an explicit stack; a node on the stack met again is a cycle)."""
        on_stack: set[int] = {root}
        stack = [(root, iter(by_id[root].data_deps))]
        while stack:
            nid, it = stack[-1]
            for d in it:
                src = by_id.get(d)
                if src is not None and src.type in _NO_WORK and d not in memo:
                    if d in on_stack:
                        raise TraceFormatError(f"node {d}: field 'Node.data_deps' forms a cycle", path=path)
                    on_stack.add(d)
                    stack.append((d, iter(src.data_deps)))
                    break
            else:
                stack.pop()
                on_stack.discard(nid)
                memo[nid] = merged(nid, by_id[nid].data_deps)

    def real_deps(node: Node) -> list[int]:
        bridging = False
        for d in node.data_deps:
            src = by_id.get(d)
            if src is not None and src.type in _NO_WORK:
                bridging = True
                if d not in memo:
                    resolve(d)
        if not bridging and all(d in by_id for d in node.data_deps):  # as stated (a repeated dep kept)
            spend(len(node.data_deps))
            return list(node.data_deps)
        return merged(node.id, node.data_deps)

    return real_deps


def _file_rows(path: str, nodes: list[Node], rank: int) -> list[dict[str, Any]]:
    """One row per node that does work, with its local dependencies as node ids (bridged)."""
    by_id: dict[int, Node] = {}
    for n in nodes:
        if n.id in by_id:
            raise TraceFormatError(f"field 'Node.id': node id {n.id} appears twice", path=path)
        if n.type not in set(NodeType):
            raise TraceFormatError(f"node {n.id}: field 'Node.type' has unknown value {n.type}", path=path)
        by_id[n.id] = n
    real_deps = _bridge(by_id, path)
    rows = []
    for n in nodes:
        if n.type in _NO_WORK:
            continue
        kind, cd = _kind(n)
        dur = _int_attr(n, "fastrack_dur_ns", path, nonneg=True)
        start = _int_attr(n, "fastrack_start_ns", path)
        lane = _int_attr(n, "fastrack_lane", path, nonneg=True)
        host = kind in _HOST
        key = _int_attr(n, "tid" if host else "stream", path)
        if key is None and not host:  # Chakra's older converter put a GPU op's stream (Kineto tid) in tid
            key = _int_attr(n, "tid", path)
        if key is None:
            key = SYNTHETIC_LANE_BASE + lane if lane is not None else 0
        deps = real_deps(n)
        kinds = n.attr("fastrack_dep_kinds")
        lags_ok = isinstance(kinds, list) and len(kinds) == len(n.data_deps) and deps == list(n.data_deps)
        nbytes = _int_attr(n, "fastrack_bytes", path, nonneg=True)
        if nbytes is None:
            nbytes = _int_attr(n, "comm_size" if kind == OpKind.COLLECTIVE or n.type in (
                NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE) else "tensor_size", path, default=0, nonneg=True)
        row = {
            "node": n.id, "rank": rank, "kind": kind, "name": n.name or NodeType(n.type).name.lower(),
            "thread": key if host else -1, "stream": -1 if host else key, "device": -1 if host else 0,
            "dur_ns": dur if dur is not None else int(n.duration_micros) * 1000,
            "start_ns": start, "start_us": int(n.start_time_micros), "bytes": int(nbytes), "copy_dir": cd,
            "deps": deps, "dep_kinds": [int(k) for k in kinds] if lags_ok else None,
            "remote": n.attr("fastrack_remote_deps") or [], "remote_kinds": n.attr("fastrack_remote_dep_kinds") or [],
            "group": _int_attr(n, "fastrack_group", path, default=-1),
        }
        if kind == OpKind.COLLECTIVE:
            ct = _int_attr(n, "comm_type", path)
            if ct is not None and ct not in _COLL_LABEL:
                raise TraceFormatError(f"node {n.id}: field 'attr.comm_type' has unknown value {ct}", path=path)
            row["coll_type"] = _COLL_LABEL[CollectiveCommType(ct)] if ct is not None else "unknown"
            row["coll_bytes"] = int(nbytes)
            pg = n.attr("pg_name")
            row["coll_group"] = pg if isinstance(pg, str) and pg else None
        rows.append(row)
    return rows


def _asap(rows: list[dict[str, Any]], path: str) -> None:
    """Starts for a file without times: nodes are placed in dependency order (ties: file order),
    each as soon as its local dependencies have finished and its thread or stream is free (one
    node at a time per thread and per stream, as the replay serves them)."""
    idx = {r["node"]: i for i, r in enumerate(rows)}
    waiting = [len(r["deps"]) for r in rows]
    users: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        for d in r["deps"]:
            users[idx[d]].append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    finish = [0] * len(rows)
    free: dict[tuple, int] = {}
    done = 0
    while ready:
        i = heapq.heappop(ready)
        r = rows[i]
        lane = ("t", r["thread"]) if r["kind"] in _HOST else ("s", r["stream"])
        r["start_ns"] = max([free.get(lane, 0)] + [finish[idx[d]] for d in r["deps"]])
        finish[i] = free[lane] = r["start_ns"] + r["dur_ns"]
        done += 1
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if done < len(rows):
        stuck = next(r["node"] for i, r in enumerate(rows) if waiting[i] > 0)
        raise TraceFormatError(f"node {stuck}: field 'Node.data_deps' is part of a dependency cycle", path=path)


def _lane_order(rows: list[dict[str, Any]]) -> None:
    """``program`` (host) and ``stream`` (GPU) dependencies on the previous node of the same
    thread or stream, by start (docs/conventions.md rule 2): Chakra states only the dependencies
    of its converter, while a trace states these orders too."""
    last: dict[tuple, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: (r["start_ns"], r["node"])):
        host = r["kind"] in _HOST
        lane = ("t", r["thread"]) if host else ("s", r["stream"])
        prev = last.get(lane)
        if prev is not None and prev["node"] not in r["deps"]:
            r["order_deps"].append((prev["node"], int(DepKind.PROGRAM if host else DepKind.STREAM)))
        last[lane] = r


def _default_kind(src: dict[str, Any], dst: dict[str, Any]) -> int:
    s_host, d_host = src["kind"] in _HOST, dst["kind"] in _HOST
    if s_host and d_host:
        return int(DepKind.PROGRAM)
    if s_host:
        return int(DepKind.LAUNCH)
    if d_host:
        return int(DepKind.SYNC)
    return int(DepKind.STREAM) if src["stream"] == dst["stream"] else int(DepKind.EVENT)


def _collective_deps(rows: list[dict[str, Any]], path: str | None = None) -> None:
    """``collective`` dependencies between the members of each collective on different ranks."""
    members: dict[Any, list[int]] = defaultdict(list)
    seq: dict[tuple, int] = defaultdict(int)
    ordered = sorted((i for i, r in enumerate(rows) if r["kind"] == OpKind.COLLECTIVE),
                     key=lambda i: (rows[i]["rank"], rows[i]["start_ns"], rows[i]["node"]))
    for i in ordered:
        r = rows[i]
        if r["group"] >= 0:
            key: Any = ("g", r["group"])
        else:
            k = (r["rank"], r.get("coll_group"), r.get("coll_type"))
            key = ("s", r.get("coll_group"), r.get("coll_type"), seq[k])
            seq[k] += 1
        members[key].append(i)
    pairs = sum(len(idxs) * (len(idxs) - 1) for idxs in members.values())
    if pairs > MAX_EDGES:  # (each member names every other: the fan-out of a collective over many ranks)
        raise TraceFormatError(f"collectives across the ranks need {pairs:,} 'collective' dependencies, more than "
                               f"{MAX_EDGES:,} (fastrack_core.schema.MAX_EDGES)", path=path)
    for idxs in members.values():
        for i in idxs:
            for j in idxs:
                if rows[j]["rank"] != rows[i]["rank"]:
                    rows[i]["edges"].append((j, int(DepKind.COLLECTIVE)))


def read(paths: Iterable[str | os.PathLike] | str | os.PathLike) -> RawImport:
    """Read Chakra ET files (or directories of them) into a finished trace table."""
    return read_with_ids(paths)[0]


def read_with_ids(paths: Iterable[str | os.PathLike] | str | os.PathLike) -> tuple[RawImport, list[int]]:
    """:func:`read`, and the Chakra node id of each op of the table (in op id order)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = expand_inputs(paths)
    rows: list[dict[str, Any]] = []
    by_rank: dict[int, str] = {}
    protocols, num_nodes = set(), 0
    for i, p in enumerate(files):
        head = _head(p)
        if head.lstrip()[:1] in (b"{", b"[") or head.startswith(SQLITE_MAGIC):
            raise TraceFormatError("is JSON or SQLite (a profiler trace?), not a Chakra ET protobuf stream", path=p)
        meta, nodes = read_et(p)
        num_nodes += len(nodes)
        rank = _rank_of(p, meta.attr("fastrack_rank"), i)
        if rank in by_rank:
            raise TraceFormatError(f"rank {rank} appears twice: in {by_rank[rank]} and in {p}", path=p)
        by_rank[rank] = p
        if meta.attr("fastrack_protocol"):
            protocols.add(str(meta.attr("fastrack_protocol")))
        frows = _file_rows(p, nodes, rank)
        if not frows:
            raise TraceFormatError(f"empty trace: no node that does work among {len(nodes)} nodes", path=p)
        if not any(r["dur_ns"] for r in frows):  # (Chakra's converter may leave every duration unset)
            raise TraceFormatError(f"no node carries a duration ('duration_micros' and 'attr.fastrack_dur_ns' are 0 or "
                                   f"absent on all {len(frows)} nodes that do work): a replay would take 0 ns", path=p)
        if any(r["start_ns"] is None for r in frows):
            if any(r["start_us"] for r in frows):
                for r in frows:
                    r["start_ns"] = r["start_us"] * 1000
            else:
                _asap(frows, p)
        base = min(r["start_ns"] for r in frows)
        for r in frows:
            r["start_ns"] -= base
            r["file"] = i
            r["order_deps"] = []
        if all(r["dep_kinds"] is None for r in frows):  # a foreign file: state the lane orders
            _lane_order(frows)
        rows.extend(frows)
    # resolve dependencies to row indices
    local = {(r["file"], r["node"]): k for k, r in enumerate(rows)}
    glob = {r["node"]: k for k, r in enumerate(rows)}
    for r in rows:
        kinds = r["dep_kinds"]
        r["edges"] = []
        for pos, d in enumerate(r["deps"]):
            j = local[(r["file"], d)]
            r["edges"].append((j, kinds[pos] if kinds is not None else _default_kind(rows[j], r)))
        for d, k in r["order_deps"]:
            r["edges"].append((local[(r["file"], d)], k))
        for d, k in zip(r["remote"], r["remote_kinds"] or [int(DepKind.EVENT)] * len(r["remote"])):
            if d not in glob:
                raise TraceFormatError(f"node {r['node']}: field 'attr.fastrack_remote_deps' names node {d}, which "
                                       "is in none of the files", path=files[r["file"]])
            r["edges"].append((glob[d], int(k)))
    _collective_deps(rows, files[0] if len(files) == 1 else None)
    table, node_ids = _table(rows, files)
    metadata = {
        "source_format": "chakra-et", "source_files": [Path(f).name for f in files], "capture_tool": "Chakra ET",
        "ranks": sorted(by_rank), "world_size": len(by_rank),
        "emulated": bool(protocols - {"captured"}), "device_model": None,
        "trace_name": Path(files[0]).name if len(files) == 1 else Path(files[0]).parent.name,
    }
    from tracegen.deps.raw import RawColumns

    return RawImport(raw=RawColumns({}, 0), metadata=metadata, num_events=num_nodes, files=files, table=table), node_ids


def _table(rows: list[dict[str, Any]], files: list[str]):
    host_first = [0 if r["kind"] in _HOST else 1 for r in rows]
    order = sorted(range(len(rows)), key=lambda k: (rows[k]["rank"], rows[k]["start_ns"], host_first[k],
                                                     rows[k]["thread"], rows[k]["stream"], rows[k]["node"]))
    op_of = np.empty(len(rows), np.int64)
    op_of[np.array(order, np.int64)] = np.arange(len(rows))
    cols: dict[str, list] = defaultdict(list)
    for k in order:
        r = rows[k]
        for c in ("rank", "device", "thread", "stream", "start_ns", "dur_ns", "bytes", "copy_dir"):
            cols[c].append(r[c])
        cols["kind"].append(OpKind(r["kind"]).label)
        cols["name"].append(r["name"])
        cols["coll_type"].append(r.get("coll_type"))
        cols["coll_group"].append(r.get("coll_group"))
        cols["coll_bytes"].append(r.get("coll_bytes", 0))
        cols["deps"].append([int(op_of[j]) for j, _ in r["edges"]])
        cols["dep_kinds"].append([int(kd) for _, kd in r["edges"]])
        cols["chakra_node"].append(r["node"])
    cols["op_id"] = list(range(len(rows)))
    node_ids = cols.pop("chakra_node")
    table = make_table(cols)
    validate_table(table, files[0] if len(files) == 1 else None)
    return table, node_ids


__all__ = ["sniff", "read", "read_with_ids", "expand_inputs", "SYNTHETIC_LANE_BASE"]
