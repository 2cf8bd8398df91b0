"""A replay as a Perfetto protobuf trace (``.pftrace``): the same layout as the JSON
(:mod:`replay.exporters.timeline.layout`), several times smaller, and read by Perfetto without its JSON
importer's limits. Needs the ``perfetto`` package (``pip install '.[perfetto]'``), whose
``perfetto_trace_pb2`` messages spell the format.

Written as the package's streaming trace builder writes (a ``Trace`` message per batch of
packets, appended: concatenated ``Trace`` messages are one trace), so memory stays bounded by the
graph. One packet sequence: track descriptors first (a process per host / GPU / TEE side of a rank,
a thread track per track of the layout, a counter track per bounce pool), then interned names
and categories, then the events in time order: ``SLICE_BEGIN``/``SLICE_END`` pairs (``INSTANT``
for zero-length slices), ``flow_ids`` on the launching call and ``terminating_flow_ids`` on the
GPU op it launched, counter values. Each slice carries ``op_id`` and, where it has one, the
Kineto ``correlation``, ``stream`` and ``bytes`` as debug annotations.
"""

from __future__ import annotations

import os
from typing import IO

import numpy as np

from fastrack_core.errors import FastrackError
from replay.pipeline.engine import Schedule
from replay.graph import OpGraph
from replay.exporters.timeline.layout import KINETO_CAT, TEE_CAT, Layout

BATCH = 20_000  # packets per Trace message written
SEQUENCE = 1  # trusted_packet_sequence_id of every packet
PERFETTO_HINT = ("writing a .pftrace timeline needs the perfetto package (pip install perfetto); "
                 "or name the timeline .json or .json.gz")


def require_perfetto(path: str | os.PathLike) -> None:
    """Raise a one-line :class:`FastrackError` naming ``path`` when the package is missing."""
    try:
        import perfetto.protos.perfetto.trace.perfetto_trace_pb2  # noqa: F401
    except ImportError:
        raise FastrackError(PERFETTO_HINT, path=str(path)) from None


def write_pftrace(f: IO[bytes], graph: OpGraph, sched: Schedule, layout: Layout, protocol: str) -> int:
    """Write the trace to ``f``; returns the number of packets."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TracePacket, TrackEvent

    BEGIN, END, INSTANT, COUNTER = (TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END,
                                    TrackEvent.TYPE_INSTANT, TrackEvent.TYPE_COUNTER)
    state = {"trace": Trace(), "count": 0}
    state["packets"] = state["trace"].packet
    # protobuf timestamps are unsigned: a replay that starts before 0 is shifted to start at 0
    shift = max(0, -int(min(layout.start.min(initial=0), sched.start.min(initial=0))))

    def packet(ts: int | None = None) -> TracePacket:
        if state["count"] % BATCH == 0 and state["count"]:
            flush()
        state["count"] += 1
        p = state["packets"].add()
        p.trusted_packet_sequence_id = SEQUENCE
        if ts is not None:
            p.timestamp = ts + shift
        return p

    def flush() -> None:
        pending = state["trace"]
        state["trace"] = Trace()
        state["packets"] = state["trace"].packet
        f.write(pending.SerializeToString())

    # --- descriptors
    proc_uuid = {}
    for k, p in enumerate(layout.processes):
        proc_uuid[p.pid] = 1 + k
        d = packet().track_descriptor
        d.uuid = proc_uuid[p.pid]
        d.process.pid = p.pid
        d.process.process_name = p.name
    counts = layout.track_counts()
    track_uuid = np.arange(len(layout.tracks), dtype=np.int64) + 1_000_000
    for i, t in enumerate(layout.tracks):
        if counts[i] == 0 and t.name != "steps":
            continue
        d = packet().track_descriptor
        d.uuid = int(track_uuid[i])
        d.parent_uuid = proc_uuid[t.pid]
        d.thread.pid = t.pid
        d.thread.tid = t.tid
        d.thread.thread_name = t.name
    counter_uuid = []
    for k, (pid, name, _, _) in enumerate(layout.counters):
        d = packet().track_descriptor
        counter_uuid.append(2_000_000 + k)
        d.uuid = counter_uuid[-1]
        d.parent_uuid = proc_uuid[pid]
        d.name = name
        d.counter.SetInParent()

    # --- interned strings: slice names (graph names, then step names), categories, annotation names
    step_names = sorted({f"ProfilerStep#{s}" for _, s, _, _ in layout.steps})
    names = list(graph.names) + step_names
    name_iid = {s: k + 1 for k, s in enumerate(names)}
    cats = sorted(set(KINETO_CAT.values()) | {TEE_CAT, "user_annotation"})
    cat_iid = {c: k + 1 for k, c in enumerate(cats)}
    ann = ["op_id", "correlation", "stream", "bytes", "mirror_of_lane", "staged"]
    ann_iid = {a: k + 1 for k, a in enumerate(ann)}
    p = packet()
    p.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
    for s, iid in name_iid.items():
        e = p.interned_data.event_names.add()
        e.iid, e.name = iid, s
    for c, iid in cat_iid.items():
        e = p.interned_data.event_categories.add()
        e.iid, e.name = iid, c
    for a, iid in ann_iid.items():
        e = p.interned_data.debug_annotation_names.add()
        e.iid, e.name = iid, a

    # --- events: one row per begin / end / instant / counter value, sorted by time
    n_nodes = graph.n
    nodes = np.concatenate([np.arange(n_nodes, dtype=np.int64), layout.mirror_node])
    trk = np.concatenate([layout.node_track, layout.mirror_track]).astype(np.int64)
    mirror = np.r_[np.zeros(n_nodes, bool), np.ones(layout.mirror_node.size, bool)]
    s = layout.start[nodes]
    e = sched.finish[nodes]
    step_rows = np.array([(t, a, b) for t, _, a, b in layout.steps], np.int64).reshape(-1, 3)
    n_slices = nodes.size + step_rows.shape[0]
    all_start = np.r_[s, step_rows[:, 1]]
    all_end = np.r_[e, step_rows[:, 2]]
    all_track = np.r_[trk, step_rows[:, 0]]
    zero = all_end == all_start
    # kind of row: 0 end, 1 instant, 2 begin (at one time: ends first, then instants, then begins)
    slice_ids = np.arange(n_slices)
    rows_t = np.r_[all_end[~zero], all_start[zero], all_start[~zero]]
    rows_kind = np.r_[np.zeros((~zero).sum(), np.int8), np.ones(zero.sum(), np.int8), np.full((~zero).sum(), 2, np.int8)]
    rows_id = np.r_[slice_ids[~zero], slice_ids[zero], slice_ids[~zero]]
    # ties among ends: the one that began last ends first; among begins: the longest begins first
    rows_tie = np.r_[-all_start[~zero], np.zeros(zero.sum(), np.int64), -all_end[~zero]]
    # counter values (kind 3 here, ordered among the others by time only): id = index into cvals
    ctimes = [t for _, _, t, _ in layout.counters]
    cvals = np.concatenate([v for _, _, _, v in layout.counters]).tolist() if ctimes else []
    ctrack = np.concatenate([np.full(t.size, k) for k, t in enumerate(ctimes)]).tolist() if ctimes else []
    nc = len(cvals)
    rows_t = np.r_[rows_t, np.concatenate(ctimes) if ctimes else np.zeros(0, np.int64)]
    rows_kind = np.r_[rows_kind, np.full(nc, 3, np.int8)]
    rows_id = np.r_[rows_id, np.arange(nc)]
    rows_tie = np.r_[rows_tie, np.zeros(nc, np.int64)]
    order = np.lexsort((rows_id, rows_tie, rows_kind, rows_t))

    flows_out: dict[int, list[int]] = {}
    for src, dst in zip(layout.flow_src.tolist(), layout.flow_dst.tolist()):
        flows_out.setdefault(src, []).append(dst + 1)
    flow_in = {dst: dst + 1 for dst in layout.flow_dst.tolist()}
    cat_of_kind = {int(k): cat_iid[c] for k, c in KINETO_CAT.items()}
    tee = cat_iid[TEE_CAT]
    step_cat = cat_iid["user_annotation"]
    stream_of_track = [t.stream for t in layout.tracks]
    steps_name = [name_iid[f"ProfilerStep#{st}"] for _, st, _, _ in layout.steps]
    incremental = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE

    def annotate(ev, key: str, value: int) -> None:
        d = ev.debug_annotations.add()
        d.name_iid = ann_iid[key]
        d.int_value = value

    n_nodes_all = nodes.size
    track_uuid_all = track_uuid[all_track]
    rt, rk, ri = rows_t[order], rows_kind[order], rows_id[order]
    for lo in range(0, order.size, BATCH):  # Python lists of one batch at a time: memory stays flat
        t_ = rt[lo:lo + BATCH]
        k_ = rk[lo:lo + BATCH]
        sid_ = ri[lo:lo + BATCH]
        node_rows = np.flatnonzero((k_ != 3) & (sid_ < n_nodes_all))
        nsid = sid_[node_rows]
        nd = nodes[nsid]
        per = {}  # row position in batch -> tuple of node attributes
        for pos, vals in zip(node_rows.tolist(), zip(
                nd.tolist(), graph.kind[nd].tolist(), graph.name[nd].tolist(), graph.op_id[nd].tolist(),
                layout.correlation[nd].tolist(), all_track[nsid].tolist(), graph.bytes[nd].tolist(),
                graph.lane[nd].tolist(), mirror[nsid].tolist(), layout.staged[nd].tolist())):
            per[pos] = vals
        sid_l = sid_.tolist()
        tu = np.where(k_ == 3, 0, track_uuid_all[np.where(k_ == 3, 0, sid_)]).tolist() if n_slices else []
        for pos, (t, k) in enumerate(zip(t_.tolist(), k_.tolist())):
            sid = sid_l[pos]
            p = packet(t)
            p.sequence_flags = incremental
            ev = p.track_event
            if k == 3:
                ev.type = COUNTER
                ev.track_uuid = counter_uuid[ctrack[sid]]
                ev.counter_value = cvals[sid]
                continue
            ev.track_uuid = tu[pos]
            if k == 0:
                ev.type = END
                continue
            ev.type = INSTANT if k == 1 else BEGIN
            if sid >= n_nodes_all:  # a step
                ev.name_iid = steps_name[sid - n_nodes_all]
                ev.category_iids.append(step_cat)
                continue
            i, code, nm, oid, corr, trk_i, b, lane, is_mirror, staged = per[pos]
            ev.name_iid = name_iid[graph.names[nm]]
            ev.category_iids.append(cat_of_kind.get(code, tee) if code < 16 else tee)
            annotate(ev, "op_id", oid)
            if corr >= 0:
                annotate(ev, "correlation", corr)
            if stream_of_track[trk_i] >= 0:
                annotate(ev, "stream", stream_of_track[trk_i])
            if b > 0:
                annotate(ev, "bytes", b)
            if is_mirror:
                annotate(ev, "mirror_of_lane", lane)
                continue
            if staged:
                annotate(ev, "staged", 1)
            if i in flows_out:
                ev.flow_ids.extend(flows_out[i])
            if i in flow_in:
                ev.terminating_flow_ids.append(flow_in[i])

    flush()
    return state["count"]
