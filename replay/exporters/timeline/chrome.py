"""A replay as Chrome-trace JSON shaped like a Kineto (PyTorch profiler) trace, streamed out.

What is written where is :mod:`replay.exporters.timeline.layout`'s business; this module only spells it
the way Kineto does (docs/timelines.md lists the fields): ``X`` slices with Kineto's categories
and ``args`` (``stream``, ``device``, ``correlation``, ``bytes``, ``memory bandwidth (GB/s)``, the
collective members of NCCL kernels), ``ac2g`` flow pairs (``s`` on the launching call, ``f`` with
``bp: "e"`` on the GPU op, the id being the launch's correlation id, as Kineto writes it), ``M``
naming events, ``C`` counters, and a header with ``schemaVersion`` and ``distributedInfo``
(Holistic Trace Analysis finds the rank there).

Speed (docs/timelines.md, "Speed"): events are formatted a block at a time with one ``%``
template per shape of event (which optional members it has), mapped over the block's columns in
C (``map(template.__mod__, zip(...))``) instead of an f-string and branches per event; the blocks
go out as bytes, through the gzip compressor when the name ends in ``.gz``. Memory stays bounded
by the graph itself; times are in microseconds with nanosecond precision (three decimals), as
Kineto writes them.
"""

from __future__ import annotations

import json
import zlib
from typing import IO, Iterable, Iterator

import numpy as np

from fastrack_core.schema import OpKind
from replay.pipeline.engine import Schedule
from replay.graph import OpGraph
from replay.exporters.timeline.layout import HOST_CRYPTO_CAT, KINETO_CAT, TEE_CAT, Layout

# The deflate of .json.gz: ISA-L (the isal package) at its level 1 where it is installed (a
# dependency), else zlib at level 1. On replay timelines (long runs of near-identical JSON events)
# ISA-L 1 is 12x faster than zlib's default level 6 for files 1.2x larger, and both faster and
# smaller than zlib 1 (docs/timelines.md, "Speed"). Either writes standard gzip; the bytes differ
try:
    from isal import isal_zlib as _deflate
except ImportError:  # pragma: no cover - isal is a dependency; zlib only where it cannot install
    _deflate = zlib
GZIP_LEVEL = 1
BLOCK = 50_000  # events formatted per write


def _us(ns: int) -> str:
    return f"{ns / 1000:.3f}"


class GzipSink:
    """A binary sink onto ``raw`` that writes one gzip member (no file name, mtime 0, so equal
    timelines give equal bytes) deflated at ``level``."""

    def __init__(self, raw: IO[bytes], level: int = GZIP_LEVEL):
        self.raw = raw
        self.z = _deflate.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
        self.crc = 0
        self.size = 0
        xfl = 4 if level == 1 else (2 if level == 9 else 0)
        raw.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00" + bytes([xfl]) + b"\xff")

    def write(self, data: bytes) -> None:
        self.crc = _deflate.crc32(data, self.crc)
        self.size += len(data)
        self.raw.write(self.z.compress(data))

    def close(self) -> None:
        self.raw.write(self.z.flush())
        self.raw.write(self.crc.to_bytes(4, "little") + (self.size & 0xFFFFFFFF).to_bytes(4, "little"))
        self.raw.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()
        else:
            self.raw.close()


def open_sink(path: str, gz: bool):
    """A binary stream onto ``path``, gzip-compressed when ``gz``."""
    raw = open(path, "wb")
    return GzipSink(raw) if gz else raw


def _metadata(layout: Layout, pids: set[int] | None) -> Iterator[list[str]]:
    out = []
    for p in layout.processes:
        if pids is not None and p.pid not in pids:
            continue
        out.append(json.dumps({"name": "process_name", "ph": "M", "pid": p.pid, "tid": 0, "args": {"name": p.name}}))
        out.append(json.dumps({"name": "process_labels", "ph": "M", "pid": p.pid, "tid": 0,
                               "args": {"labels": p.label}}))
        out.append(json.dumps({"name": "process_sort_index", "ph": "M", "pid": p.pid, "tid": 0,
                               "args": {"sort_index": p.sort}}))
    counts = layout.track_counts()
    for i, t in enumerate(layout.tracks):
        if (counts[i] == 0 and t.name != "steps") or (pids is not None and t.pid not in pids):
            continue
        out.append(json.dumps({"name": "thread_name", "ph": "M", "pid": t.pid, "tid": t.tid, "args": {"name": t.name}}))
        out.append(json.dumps({"name": "thread_sort_index", "ph": "M", "pid": t.pid, "tid": t.tid,
                               "args": {"sort_index": t.sort}}))
    yield out


def _objects(items: list) -> np.ndarray:
    a = np.empty(len(items), object)
    a[:] = items
    return a


class _SliceContext:
    """Per-track, per-kind and per-name strings a block of slices is formatted from."""

    def __init__(self, graph: OpGraph, layout: Layout):
        self.names = _objects([json.dumps(s) for s in layout.names])
        self.head = _objects([f'"pid":{t.pid},"tid":{t.tid},' for t in layout.tracks])
        self.gpu = _objects([f'"device":{t.device},"stream":{t.stream},' if t.stream >= 0 else ""
                             for t in layout.tracks])
        kinds = np.unique(graph.kind).tolist()
        width = 256
        self.cat = _objects([json.dumps(TEE_CAT)] * width)
        for k, c in KINETO_CAT.items():
            self.cat[int(k) & 0xFF] = json.dumps(c)
        self.label = _objects([""] * width)
        for k in kinds:
            if k >= 16 or k not in KINETO_CAT:
                self.label[k & 0xFF] = f'"fastrack_kind":{json.dumps(graph.kind_label(k))},'
        self.host_crypto_cat = json.dumps(HOST_CRYPTO_CAT)
        self.memcpy = int(OpKind.MEMCPY)
        self.lane_names = graph.lanes.names


# optional members of a slice's args, in the order they are written: (bit, template piece)
_CORR, _BYTES, _BW, _STAGED = 1, 2, 4, 8
_TEMPLATES: dict[tuple[int, bool], str] = {}


def _template(pattern: int, mirror: bool) -> str:
    key = (pattern, mirror)
    if key not in _TEMPLATES:
        t = '{"ph":"X","cat":%s,"name":%s,%s"ts":%.3f,"dur":%.3f,"args":{%s'
        if pattern & _CORR:
            t += '"correlation":%d,'
        if pattern & _BYTES:
            t += '"bytes":%d,'
        if pattern & _BW:
            t += '"memory bandwidth (GB/s)":%.6g,'
        t += "%s"  # fastrack_kind, or a collective's members
        if pattern & _STAGED:
            t += '"staged":true,'
        t += '"op_id":%d,"origin_op":%d'
        if mirror:
            t += ',"mirror_of":%s'
        _TEMPLATES[key] = t + "}}"
    return _TEMPLATES[key]


def _slices(graph: OpGraph, sched: Schedule, layout: Layout, nodes: np.ndarray, tracks: np.ndarray,
            mirror: bool, ctx: _SliceContext) -> Iterator[list[str]]:
    thread_of = None
    if mirror and nodes.size:
        lanes = np.unique(graph.lane[nodes])
        thread_of = {int(ln): json.dumps(ctx.lane_names[ln].split("/", 1)[-1]) for ln in lanes.tolist()}
    for lo in range(0, nodes.size, BLOCK):  # one block of Python strings at a time: memory stays flat
        yield _slice_block(graph, sched, layout, nodes[lo:lo + BLOCK], tracks[lo:lo + BLOCK], ctx, thread_of)


def _slice_block(graph, sched, layout, nodes, tracks, ctx, thread_of) -> list[str]:
    k = graph.kind[nodes]
    k8 = k.astype(np.int64) & 0xFF
    s = layout.start[nodes]
    f = sched.finish[nodes]
    b = graph.bytes[nodes]
    c = layout.correlation[nodes]
    has_b = b > 0
    pattern = ((c >= 0) * _CORR + has_b * _BYTES + (has_b & (k == ctx.memcpy) & (f > s)) * _BW
               + layout.staged[nodes] * _STAGED)
    cat = ctx.cat[k8]
    if thread_of is None:  # CPU crypto on a host thread is CPU work there (its mirror keeps "tee")
        hc = layout.host_crypto[nodes]
        if hc.any():
            cat[hc] = ctx.host_crypto_cat
    label = ctx.label[k8]
    if layout.collective:
        coll = np.flatnonzero(k == OpKind.COLLECTIVE)
        if coll.size:
            label[coll] = _objects([layout.collective.get(i, "") for i in nodes[coll].tolist()])
    name = ctx.names[layout.name[nodes]]
    head = ctx.head[tracks]
    gpu = ctx.gpu[tracks]
    ts = s / 1000
    dur = (f - s) / 1000
    bw = np.divide(b, f - s, out=np.zeros(nodes.size), where=f > s)
    oid, org = graph.op_id[nodes], graph.origin[nodes]
    mirror_of = None
    if thread_of is not None:
        mirror_of = _objects([thread_of[ln] for ln in graph.lane[nodes].tolist()])
    out = np.empty(nodes.size, object)
    for p in np.unique(pattern).tolist():
        idx = np.flatnonzero(pattern == p)
        cols = [cat[idx], name[idx], head[idx], ts[idx].tolist(), dur[idx].tolist(), gpu[idx]]
        if p & _CORR:
            cols.append(c[idx].tolist())
        if p & _BYTES:
            cols.append(b[idx].tolist())
        if p & _BW:
            cols.append(bw[idx].tolist())
        cols += [label[idx], oid[idx].tolist(), org[idx].tolist()]
        if mirror_of is not None:
            cols.append(mirror_of[idx])
        out[idx] = _objects(list(map(_template(p, mirror_of is not None).__mod__, zip(*cols))))
    return out.tolist()


_FLOW_S = '{"ph":"s","id":%d,"pid":%d,"tid":%d,"ts":%.3f,"cat":"ac2g","name":"ac2g"}'
_FLOW_F = '{"ph":"f","id":%d,"pid":%d,"tid":%d,"ts":%.3f,"cat":"ac2g","name":"ac2g","bp":"e"}'


def _flows(sched: Schedule, layout: Layout, keep: np.ndarray | None) -> Iterator[list[str]]:
    """``ac2g`` pairs; the id is the launch's correlation id (Kineto's, which TraceLens requires:
    it finds the GPU op of a flow by (pid, tid, correlation = flow id))."""
    src, dst = layout.flow_src, layout.flow_dst
    if keep is not None:
        src, dst = src[keep], dst[keep]
    pids = np.array([t.pid for t in layout.tracks], np.int64)
    tids = np.array([t.tid for t in layout.tracks], np.int64)
    for lo in range(0, src.size, BLOCK // 2):
        a, d = src[lo:lo + BLOCK // 2], dst[lo:lo + BLOCK // 2]
        fid = layout.correlation[d].tolist()
        ta, td = layout.node_track[a], layout.node_track[d]
        out: list = [None] * (2 * a.size)
        out[0::2] = map(_FLOW_S.__mod__, zip(fid, pids[ta].tolist(), tids[ta].tolist(), (sched.start[a] / 1000).tolist()))
        out[1::2] = map(_FLOW_F.__mod__, zip(fid, pids[td].tolist(), tids[td].tolist(), (layout.start[d] / 1000).tolist()))
        yield out


def _steps(layout: Layout, pids: set[int] | None) -> Iterator[list[str]]:
    out = []
    for trk, step, a, b in layout.steps:
        t = layout.tracks[trk]
        if pids is not None and t.pid not in pids:
            continue
        out.append(f'{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{step}","pid":{t.pid},"tid":{t.tid},'
                   f'"ts":{_us(a)},"dur":{_us(b - a)},"args":{{}}}}')
    yield out


def _counters(layout: Layout, pids: set[int] | None) -> Iterator[list[str]]:
    for pid, name, times, values in layout.counters:
        if pids is not None and pid not in pids:
            continue
        tmpl = '{"ph":"C","name":%s,"pid":%d,"ts":%%.3f,"args":{"slots":%%d}}' % (json.dumps(name).replace("%", "%%"), pid)
        for lo in range(0, times.size, BLOCK):
            yield list(map(tmpl.__mod__, zip((times[lo:lo + BLOCK] / 1000).tolist(), values[lo:lo + BLOCK].tolist())))


def header(graph: OpGraph, protocol: str, extra: dict, rank: int | None = None) -> str:
    ranks = sorted(set(np.unique(graph.rank).tolist())) or [0]
    # Kineto's header; HTA takes the rank from the first '"rank": N' it finds (space included)
    head = {"schemaVersion": 1, "distributedInfo": {"rank": int(ranks[0] if rank is None else rank),
                                                    "world_size": len(ranks)},
            "displayTimeUnit": "ms", "traceName": f"fastrack replay ({protocol})",
            "fastrack": {"tool": "fastrack replay", "protocol": protocol, **extra}}
    return json.dumps(head)[:-1] + ', "traceEvents": [\n'


def write_chrome(f: IO[bytes], graph: OpGraph, sched: Schedule, layout: Layout, protocol: str, extra: dict,
                 rank: int | None = None) -> int:
    """Write the whole document to the binary stream ``f``; returns the number of events. With
    ``rank``, only that rank's processes and events (one file per rank, as HTA and TraceLens read)."""
    f.write(header(graph, protocol, extra, rank).encode())
    order = np.argsort(layout.start, kind="stable") if graph.n else np.zeros(0, np.int64)
    mo = np.argsort(sched.start[layout.mirror_node], kind="stable")
    mnodes, mtracks = layout.mirror_node[mo], layout.mirror_track[mo]
    ntracks = layout.node_track[order]
    pids = keep = None
    if rank is not None:
        pids = {p.pid for p in layout.processes if p.rank == rank}
        order, ntracks = order[graph.rank[order] == rank], ntracks[graph.rank[order] == rank]
        sel = graph.rank[mnodes] == rank
        mnodes, mtracks = mnodes[sel], mtracks[sel]
        keep = graph.rank[layout.flow_dst] == rank
    ctx = _SliceContext(graph, layout)
    parts: Iterable[Iterator[list[str]]] = (
        _metadata(layout, pids),
        _slices(graph, sched, layout, order, ntracks, False, ctx),
        _slices(graph, sched, layout, mnodes, mtracks, True, ctx),
        _steps(layout, pids),
        _flows(sched, layout, keep),
        _counters(layout, pids),
    )
    count = 0
    for part in parts:
        for block in part:
            if not block:
                continue
            f.write((("" if count == 0 else ",\n") + ",\n".join(block)).encode())
            count += len(block)
    f.write(b"\n]}\n")
    return count
