"""Import PyTorch execution traces (``torch.profiler.ExecutionTraceObserver`` JSON) linked with Kineto.

A PyTorch ET records every framework operator of one process (name, thread, parent, record
function id ``rf_id``, tensor inputs with their sizes) but **no times**: schema 1.0.1 (the files
of ``../shared/traces/real/v100_dlrm_8rank/pytorch_et/``) has no duration field at all, and the
``exclusive_dur``/``ts`` of later schemas are written by Chakra's trace linker, not by PyTorch. So
an ET is imported together with the Kineto trace of the same process (the same ``pid``), as
Chakra's trace linker does:

* the ops, their timings and dependencies come from the Kineto trace (:mod:`tracegen.importers.kineto`);
* the ET is linked to the Kineto CPU operators: by ``Record function id`` == ``rf_id`` when the
  Kineto trace has it (newer PyTorch), else thread by thread in order (ET nodes by ``rf_id``,
  Kineto ``cpu_op``/``user_annotation`` events by ``External id``) matching names, skipping
  unmatched ones (the DLRM files link 1672 of 1673 operators per rank this way);
* what the ET adds: each collective's type, size (numel x element size of its tensors) and c10d
  sequence number, from the ``record_param_comms`` node, given to the NCCL kernel launched inside
  the linked Kineto ``record_param_comms`` (older Kineto traces, like DLRM's, have no sizes).

An ET without its Kineto trace is refused (one line naming the file: it holds no timings, and
pricing every operator with a cost model would be a different, emulated trace). Accepted schema
versions: 1.0.x and 1.1.x (``1.0.1``, ``1.0.2-chakra.0.0.4`` ... ``1.1.1-chakra.1.0.0``).
"""

from __future__ import annotations

import json
import os
import re
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from fastrack_core.chakra import read_bytes
from fastrack_core.errors import TraceFormatError
from fastrack_core.schema import MAX_NAME_CHARS, MAX_NODES_PER_FILE, OpKind
from tracegen.deps.raw import as_frame
from tracegen.importers import kineto
from tracegen.importers.common import RawImport, read_head_plain

SNIFF_BYTES = 4096
SUPPORTED = ((1, 0), (1, 1))  # (major, minor) of the ET schema versions read
_HEAD_RE = re.compile(rb'^\s*\{\s*"schema"\s*:\s*"')
_VERSION_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)")
_ROOT_PREFIX = "[pytorch|profiler|execution_"  # thread/process root nodes of the graph
_WINDOW = 32  # how far the in-order linker looks ahead to re-synchronise after a mismatch
_COLL = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "allgather": "all_gather", "all_gather": "all_gather",
    "_allgather_base": "all_gather", "all_gather_into_tensor": "all_gather", "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter", "all_to_all": "all_to_all",
    "all_to_allv": "all_to_all", "alltoall": "all_to_all", "alltoall_base": "all_to_all", "broadcast": "broadcast",
    "reduce": "reduce", "gather": "gather", "scatter": "scatter", "send": "send_recv", "recv": "send_recv",
    "barrier": "barrier",
}  # fmt: skip


def _head(path: str) -> bytes:
    return read_head_plain(path, SNIFF_BYTES)


def _is_et(path: str) -> bool:
    return bool(_HEAD_RE.match(_head(path)))


def _json_files(d: str) -> list[str]:
    return sorted(os.path.join(d, f) for f in os.listdir(d)
                  if os.path.isfile(os.path.join(d, f)) and re.search(r"\.(json|gz)$", f, re.I))


def sniff(path: str | os.PathLike) -> bool:
    """A PyTorch ET file (JSON, plain or gzip, whose first key is ``"schema"``), or a directory
    whose first JSON file is one."""
    p = str(path)
    if os.path.isdir(p):
        files = _json_files(p)
        return bool(files) and _is_et(files[0])
    return _is_et(p)


# --------------------------------------------------------------------------- the ET file


@dataclass
class EtOp:
    id: int
    name: str
    rf_id: int
    tid: int
    inputs: list


@dataclass
class EtFile:
    path: str
    schema: str
    pid: int
    ops: list[EtOp] = field(default_factory=list)


# a PyTorch ET is parsed whole with ``json``, whose objects take about ten times the text: the
# decompressed document is capped lower than a protobuf ET (docs/robustness.md "Reader limits")
MAX_ET_JSON_BYTES = 256 << 20


def _load_json(path: str) -> Any:
    data = read_bytes(path, MAX_ET_JSON_BYTES)  # gzip or plain, capped, with one-line errors (fastrack_core.chakra)
    try:
        return json.loads(data)
    except RecursionError:
        raise TraceFormatError("JSON nested too deep", path=path) from None
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError) and (exc.pos >= len(exc.doc.rstrip()) - 1
                                                      or exc.msg.startswith("Unterminated string")):
            raise TraceFormatError("truncated JSON (the file ends in the middle of the document)", path=path) from None
        raise TraceFormatError(f"invalid JSON at byte {getattr(exc, 'pos', '?')}", path=path) from None


def check_schema(version: Any, path: str) -> None:
    if not isinstance(version, str):
        raise TraceFormatError("field 'schema' is missing or not a string (not a PyTorch ET?)", path=path)
    m = _VERSION_RE.match(version)
    if not m or (int(m.group(1)), int(m.group(2))) not in SUPPORTED:
        shown = version if len(version) <= 32 and re.fullmatch(r"[\w.\-]+", version) else "?"
        raise TraceFormatError(f"field 'schema': PyTorch ET schema version {shown!r} is not supported (expected "
                               f"{' or '.join(f'{a}.{b}.x' for a, b in SUPPORTED)})", path=path)


def _attrs(node: dict) -> dict[str, Any]:
    """The ``attrs`` list of schemas >= 1.0.2 ([{name, type, value}]) as a dict."""
    out = {}
    for a in node.get("attrs") or ():
        if isinstance(a, dict) and isinstance(a.get("name"), str):
            out[a["name"]] = a.get("value")
    return out


def _int_field(node: dict, attrs: dict, key: str, i: int, path: str, default: int | None = None) -> int:
    v = node.get(key, attrs.get(key, default))
    if isinstance(v, bool) or not isinstance(v, int):
        raise TraceFormatError(f"node {i}: field '{key}' is missing or not an integer", path=path)
    return v


def read_et(path: str) -> EtFile:
    """Parse and check one ET file (schema version, node fields)."""
    doc = _load_json(path)
    if not isinstance(doc, dict):
        raise TraceFormatError("not a PyTorch ET: the JSON top level is not an object", path=path)
    check_schema(doc.get("schema"), path)
    pid = doc.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise TraceFormatError("field 'pid' is missing or not an integer", path=path)
    nodes = doc.get("nodes")
    if not isinstance(nodes, list):
        raise TraceFormatError("field 'nodes' is missing or not an array", path=path)
    if len(nodes) > MAX_NODES_PER_FILE:
        raise TraceFormatError(f"holds more than {MAX_NODES_PER_FILE:,} nodes (the limit of one file: "
                               "fastrack_core.schema.MAX_NODES_PER_FILE)", path=path)
    et = EtFile(path=path, schema=doc["schema"], pid=pid)
    for i, n in enumerate(nodes):
        if not isinstance(n, dict):
            raise TraceFormatError(f"node {i}: not an object", path=path)
        name = n.get("name")
        if not isinstance(name, str):
            raise TraceFormatError(f"node {i}: field 'name' is missing or not a string", path=path)
        if len(name) > MAX_NAME_CHARS:
            raise TraceFormatError(f"node {i}: field 'name' is longer than {MAX_NAME_CHARS:,} characters "
                                   "(fastrack_core.schema.MAX_NAME_CHARS)", path=path)
        if name.startswith(_ROOT_PREFIX):
            continue
        a = _attrs(n)
        inputs = n.get("inputs")
        if isinstance(inputs, dict):  # schemas >= 1.0.2: {"values": [...], "shapes": ..., "types": ...}
            inputs = inputs.get("values")
        et.ops.append(EtOp(id=_int_field(n, a, "id", i, path), name=name, rf_id=_int_field(n, a, "rf_id", i, path),
                           tid=_int_field(n, a, "tid", i, path), inputs=inputs if isinstance(inputs, list) else []))
    return et


# --------------------------------------------------------------------------- the Kineto side


@dataclass
class KinetoOps:
    """What linking needs from one Kineto file."""

    path: str
    pids: set
    cpu: list  # (tid, ts, dur, ext_id, rf_id, name)
    launches: dict  # tid -> sorted [(ts, correlation)]


def read_kineto_ops(path: str) -> KinetoOps:
    doc = _load_json(path)
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise TraceFormatError("not a Kineto trace: no 'traceEvents' array", path=path)
    cpu, pids, launches = [], set(), {}
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = e.get("cat")
        a = e.get("args") if isinstance(e.get("args"), dict) else {}
        if cat in ("cpu_op", "user_annotation", "Operator"):
            pids.add(e.get("pid"))
            cpu.append((e.get("tid"), e.get("ts", 0), e.get("dur", 0), a.get("External id", -1),
                        a.get("Record function id"), e.get("name", "")))
        elif cat in ("cuda_runtime", "Runtime", "cuda_driver") and isinstance(a.get("correlation"), int):
            launches.setdefault(e.get("tid"), []).append((e.get("ts", 0), a["correlation"]))
    for v in launches.values():
        v.sort()
    return KinetoOps(path=path, pids=pids, cpu=cpu, launches=launches)


def _align(a: list[str], b: list[str]) -> list[tuple[int, int]]:
    """Index pairs of equal names, in order, re-synchronising within a window after a mismatch."""
    pairs, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        if a[i] == b[j]:
            pairs.append((i, j))
            i += 1
            j += 1
            continue
        best = None
        for step in range(1, _WINDOW):
            if j + step < len(b) and a[i] == b[j + step]:
                best = (0, step)
                break
            if i + step < len(a) and a[i + step] == b[j]:
                best = (step, 0)
                break
        if best is None:
            i += 1
            j += 1
        else:
            i += best[0]
            j += best[1]
    return pairs


def link(et: EtFile, k: KinetoOps) -> dict[int, tuple]:
    """ET op id -> the Kineto CPU event (tid, ts, dur, ext_id, rf_id, name) it records."""
    events = [c for c in k.cpu if not str(c[5]).startswith("ProfilerStep#")]
    by_rf = {c[4]: c for c in events if isinstance(c[4], int)}
    if by_rf:  # Kineto with record function ids: exact
        return {op.id: by_rf[op.rf_id] for op in et.ops if op.rf_id in by_rf and by_rf[op.rf_id][5] == op.name}
    et_threads: dict[int, list[EtOp]] = {}
    for op in et.ops:
        et_threads.setdefault(op.tid, []).append(op)
    k_threads: dict[Any, list[tuple]] = {}
    for c in events:
        k_threads.setdefault(c[0], []).append(c)
    for v in et_threads.values():
        v.sort(key=lambda o: o.rf_id)
    for v in k_threads.values():
        v.sort(key=lambda c: (c[3] if isinstance(c[3], int) and c[3] >= 0 else 0, c[1]))
    scored = []
    for et_tid, ops in et_threads.items():
        names = [o.name for o in ops]
        for k_tid, evs in k_threads.items():
            pairs = _align(names, [c[5] for c in evs])
            scored.append((len(pairs), et_tid, k_tid, pairs))
    out: dict[int, tuple] = {}
    used_et, used_k = set(), set()
    for _score, et_tid, k_tid, pairs in sorted(scored, key=lambda s: -s[0]):
        if et_tid in used_et or k_tid in used_k or not pairs:
            continue
        used_et.add(et_tid)
        used_k.add(k_tid)
        ops, evs = et_threads[et_tid], k_threads[k_tid]
        out.update({ops[i].id: evs[j] for i, j in pairs})
    return out


# --------------------------------------------------------------------------- collectives


def _tensors(v: Any) -> list[list]:
    """ET tensor values ([tensor_id, storage_id, offset, numel, elem_bytes, device]) in ``v``."""
    if isinstance(v, list) and len(v) == 6 and all(isinstance(x, int) for x in v[:5]) and isinstance(v[5], str):
        return [v]
    if isinstance(v, list):
        return [t for x in v for t in _tensors(x)]
    return []


def collective_info(op: EtOp) -> tuple[str, int, int] | None:
    """(type, bytes, c10d sequence number) of a ``record_param_comms`` node that moves tensors."""
    if op.name != "record_param_comms" or not op.inputs:
        return None
    tensors = _tensors(op.inputs[0])
    ctype = next((_COLL[x] for x in op.inputs if isinstance(x, str) and x in _COLL), None)
    seq = op.inputs[1] if len(op.inputs) > 1 and isinstance(op.inputs[1], int) else -1
    if not tensors or ctype is None:
        return None
    return ctype, sum(t[3] * t[4] for t in tensors), seq


def collective_links(et: EtFile, k: KinetoOps, linked: dict[int, tuple],
                     kernels: set[int]) -> dict[int, tuple[str, int, int]]:
    """Kernel correlation id -> (type, bytes, seq): the first launch of a collective kernel (its
    correlation in ``kernels``) inside each linked ``record_param_comms`` event, on its thread."""
    out = {}
    for op in et.ops:
        info = collective_info(op)
        ev = linked.get(op.id)
        if info is None or ev is None:
            continue
        tid, ts, dur = ev[0], ev[1], ev[2]
        lst = k.launches.get(tid, [])
        j = bisect_right(lst, (ts, -1))
        while j < len(lst) and lst[j][0] <= ts + dur:
            if lst[j][1] in kernels and lst[j][1] not in out:
                out[lst[j][1]] = info
                break
            j += 1
    return out


# --------------------------------------------------------------------------- public API


def _expand(paths: Iterable[str]) -> list[str]:
    out = []
    for p in paths:
        if os.path.isdir(p):
            files = _json_files(p)
            if not files:
                raise TraceFormatError("directory holds no trace files (*.json, *.json.gz)", path=p)
            out.extend(files)
        else:
            out.append(p)
    return out


def read(paths: Iterable[str | os.PathLike] | str | os.PathLike) -> RawImport:
    """PyTorch ET files and the Kineto traces of the same processes (files or directories, in
    any order) -> the Kineto import with the ET's collective sizes and sequence numbers."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = _expand([str(p) for p in paths])
    et_paths = [p for p in files if _is_et(p)]
    k_paths = [p for p in files if p not in et_paths]
    if not et_paths:
        raise TraceFormatError("not a PyTorch ET (field 'schema' missing at the top of the JSON), and no other input "
                               "is one", path=files[0] if files else None)
    ets = [read_et(p) for p in et_paths]
    if not k_paths:
        raise TraceFormatError("PyTorch ET holds no operator timings; give the Kineto trace of the same run too "
                               "(tracegen convert ET.json KINETO.json -o OUT)", path=et_paths[0])
    kops = [read_kineto_ops(p) for p in k_paths]
    pairs: list[tuple[EtFile, KinetoOps]] = []
    for et in ets:
        match = [k for k in kops if et.pid in k.pids]
        if len(match) != 1:
            why = "no Kineto input has" if not match else f"{len(match)} Kineto inputs have"
            raise TraceFormatError(f"field 'pid': {why} CPU operators of this process; give exactly one Kineto trace "
                                   "per PyTorch ET (it holds no timings)", path=et.path)
        pairs.append((et, match[0]))
    paired = {id(k) for _, k in pairs}
    for k in kops:
        if id(k) not in paired:
            raise TraceFormatError("Kineto trace without a PyTorch ET of the same process (pid) among the inputs",
                                   path=k.path)
        if sum(k is k2 for _, k2 in pairs) > 1:
            raise TraceFormatError("two PyTorch ETs share this Kineto trace's process id", path=k.path)
    frames, num_events, infos, counts = [], 0, [], []
    datas = []
    for et, k in pairs:
        imp = kineto.read([k.path])
        raw = as_frame(imp.raw)  # edited below (.loc): a pandas frame
        linked = link(et, k)
        kernels = set(raw.loc[raw["kind"] == int(OpKind.COLLECTIVE), "correlation"].astype(int).tolist())
        colls = collective_links(et, k, linked, kernels)
        counts.append((len(linked), len(et.ops), len(colls)))
        infos.append((raw, colls))
        frames.append(raw)
        datas.append(imp)
        num_events += imp.num_events + len(et.ops)
    ranks = [int(f["rank"].iloc[0]) for f in frames]
    if len(set(ranks)) != len(ranks):
        raise TraceFormatError("two Kineto traces claim the same rank")
    import pandas as pd  # (this format's frames are pandas ones; imported here so that a Kineto convert does not)

    complete = True
    for raw, colls in infos:
        coll = (raw["kind"] == int(OpKind.COLLECTIVE)).to_numpy()
        corr = raw["correlation"].to_numpy()
        hit = coll & pd.Series(corr).isin(colls.keys()).to_numpy()
        complete &= bool(hit.sum() == coll.sum())
        if hit.any():
            vals = [colls[int(c)] for c in corr[hit]]
            raw.loc[hit, "coll_type"] = [v[0] for v in vals]
            raw.loc[hit, "coll_bytes"] = [v[1] for v in vals]
            raw.loc[hit, "bytes"] = [v[1] for v in vals]
            raw.loc[hit, "coll_seq"] = [v[2] for v in vals]
    for raw, _ in infos:  # sequence numbers only when every collective of every rank got one
        if "coll_seq" in raw:
            if not complete:
                raw["coll_seq"] = -1
            raw["coll_seq"] = raw["coll_seq"].fillna(-1).astype("int64")
    meta = dict(datas[0].metadata)
    for imp in datas[1:]:
        meta["ranks"] = sorted(set(meta["ranks"]) | set(imp.metadata["ranks"]))
    meta.update(source_format="pytorch-et", capture_tool="PyTorch ExecutionTraceObserver + Profiler",
                source_files=[Path(p).name for p in et_paths + k_paths])
    meta["tool_versions"] = {**meta.get("tool_versions", {}), "pytorch_et_schema": ets[0].schema}
    if len(pairs) > 1:
        meta["trace_name"] = Path(et_paths[0]).parent.name
    raw = pd.concat(frames, ignore_index=True, sort=False)
    result = RawImport(raw=raw, metadata=meta, num_events=num_events, files=et_paths + k_paths)
    result.link_counts = counts  # (linked ET ops, ET ops, collectives sized) per rank, for tests and reports
    return result


__all__ = ["sniff", "read", "read_et", "read_kineto_ops", "link", "collective_info", "collective_links",
           "check_schema"]
