"""A replay as a Perfetto protobuf trace (``.pftrace``): the same layout as the JSON
(:mod:`replay.exporters.timeline.layout`), several times smaller, and read by Perfetto without its JSON
importer's limits.

The protobuf wire format is written here directly, with numpy: each field is a tag and a varint
(or a fixed64, or a length and bytes), so a block of events is a handful of vectorised varint
encodings scattered into one byte buffer, at a few times the speed of building ``TracePacket``
objects one by one (docs/timelines.md, "Speed"). No package is needed to write it; the tests
parse it with the ``perfetto`` package's ``perfetto_trace_pb2`` where that is installed. Fields
go out in field-number order, as protobuf serialises them, so the bytes are those the
package's messages would give.

One packet sequence (a ``Trace`` is a repeated ``packet`` field, so the file is one ``Trace``):
track descriptors first (a process per host / GPU / TEE side of a rank, a thread track per track
of the layout, a counter track per bounce pool), then interned names and categories, then the
events in time order: ``SLICE_BEGIN``/``SLICE_END`` pairs (``INSTANT`` for zero-length slices),
``flow_ids`` on the launching call and ``terminating_flow_ids`` on the GPU op it launched (the
GPU node's index + 1: Perfetto needs an id per flow, and a call may launch several ops), counter
values. Each slice carries ``op_id`` and, where it has one, the Kineto ``correlation``,
``stream`` and ``bytes`` as debug annotations.
"""

from __future__ import annotations

from typing import IO

import numpy as np

from fastrack_core.chakra import varint
from replay.pipeline.engine import Schedule
from replay.graph import OpGraph
from replay.exporters.timeline.layout import HOST_CRYPTO_CAT, KINETO_CAT, TEE_CAT, Layout

BATCH = 100_000  # event packets encoded per write (a byte matrix of a few hundred bytes per packet)
SEQUENCE = 1  # trusted_packet_sequence_id of every packet
# TrackEvent.Type and TracePacket.SequenceFlags values (perfetto_trace.proto)
BEGIN, END, INSTANT, COUNTER = 1, 2, 3, 4
SEQ_INCREMENTAL_STATE_CLEARED, SEQ_NEEDS_INCREMENTAL_STATE = 1, 2
ANNOTATIONS = ["op_id", "correlation", "stream", "bytes", "mirror_of_lane", "staged"]  # interned names, iid 1..


# --- scalar encoding (descriptors, interned data) ---

_varint = varint  # (fastrack_core.chakra: protobuf's base-128 varint; negatives in ten bytes)


def _vfield(num: int, v: int) -> bytes:
    return _varint(num << 3) + _varint(v)


def _lfield(num: int, data: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def _packet(body: bytes) -> bytes:
    return _lfield(1, body)  # Trace.packet


# --- vectorised encoding: a piece is (bytes matrix, one row per event, valid length per row) ---
# Every event is the same sequence of pieces, each a fixed-width column block whose first
# ``length`` bytes of a row are valid (0 where the field is absent). The pieces of all rows sit side
# by side in one matrix; its valid bytes in row-major order are the events, one after the other.

def _varints(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varint encodings of ``v`` (int64, two's complement for negatives) as (matrix, lengths)."""
    u = np.asarray(v).astype(np.int64).view(np.uint64)
    lens = np.ones(u.size, np.int64)
    for j in range(1, 10):
        more = u >= np.uint64(1) << np.uint64(7 * j)
        if not more.any():
            break
        lens += more
    width = int(lens.max(initial=1))
    mat = np.empty((u.size, width), np.uint8)
    for j in range(width):
        mat[:, j] = ((u >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8) | ((j < lens - 1) * 0x80).astype(np.uint8)
    return mat, lens


def _const(data: bytes, present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mat = np.broadcast_to(np.frombuffer(data, np.uint8), (present.size, len(data)))
    return mat, present.astype(np.int64) * len(data)


def _tagged(tag: bytes, v: np.ndarray, present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``tag`` + varint(v) on the rows where ``present``."""
    mat, lens = _varints(v)
    t = np.frombuffer(tag, np.uint8)
    out = np.empty((v.size, t.size + mat.shape[1]), np.uint8)
    out[:, :t.size] = t
    out[:, t.size:] = mat
    return out, np.where(present, t.size + lens, 0)


def _annotation(iid: int, v: np.ndarray, present: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A DebugAnnotation {name_iid, int_value} as TrackEvent field 4, on the rows where ``present``."""
    mat, lens = _varints(v)
    out = np.empty((v.size, 5 + mat.shape[1]), np.uint8)
    out[:, 0], out[:, 1], out[:, 2], out[:, 3], out[:, 4] = 0x22, 0, 0x08, iid, 0x20
    out[:, 1] = 3 + lens  # the annotation's length: < 128, one byte
    out[:, 5:] = mat
    return out, np.where(present, 5 + lens, 0)


def _lengths(pieces) -> np.ndarray:
    return np.sum([ln for _, ln in pieces], axis=0)


def _concat(pieces) -> np.ndarray:
    """The valid bytes of every row, pieces in order, rows in order."""
    m = pieces[0][0].shape[0]
    width = sum(mat.shape[1] for mat, _ in pieces)
    big = np.empty((m, width), np.uint8)
    valid = np.empty((m, width), bool)
    col = 0
    for mat, ln in pieces:
        w = mat.shape[1]
        big[:, col:col + w] = mat
        valid[:, col:col + w] = np.arange(w) < ln[:, None]
        col += w
    return big[valid]


def _descriptors(layout: Layout, track_uuid: np.ndarray, pids: set[int] | None) -> tuple[bytes, dict, list]:
    out = bytearray()
    seq = _vfield(10, SEQUENCE)
    proc_uuid = {}
    for k, p in enumerate(layout.processes):
        proc_uuid[p.pid] = 1 + k
        if pids is not None and p.pid not in pids:
            continue
        d = _vfield(1, proc_uuid[p.pid]) + _lfield(3, _vfield(1, p.pid) + _lfield(6, p.name.encode()))
        out += _packet(seq + _lfield(60, d))
    counts = layout.track_counts()
    for i, t in enumerate(layout.tracks):
        if (counts[i] == 0 and t.name != "steps") or (pids is not None and t.pid not in pids):
            continue
        thread = _vfield(1, t.pid) + _vfield(2, t.tid) + _lfield(5, t.name.encode())
        d = _vfield(1, int(track_uuid[i])) + _lfield(4, thread) + _vfield(5, proc_uuid[t.pid])
        out += _packet(seq + _lfield(60, d))
    counter_uuid = []
    for k, (pid, name, _, _) in enumerate(layout.counters):
        counter_uuid.append(2_000_000 + k)
        if pids is not None and pid not in pids:
            continue
        d = _vfield(1, counter_uuid[-1]) + _lfield(2, name.encode()) + _vfield(5, proc_uuid[pid]) + _lfield(8, b"")
        out += _packet(seq + _lfield(60, d))
    return bytes(out), proc_uuid, counter_uuid


def _interned(names: list[str], cats: list[str]) -> bytes:
    data = bytearray()
    for k, c in enumerate(cats):  # InternedData: event_categories (1), event_names (2), annotation names (3)
        data += _lfield(1, _vfield(1, k + 1) + _lfield(2, c.encode()))
    for k, n in enumerate(names):
        data += _lfield(2, _vfield(1, k + 1) + _lfield(2, n.encode()))
    for k, a in enumerate(ANNOTATIONS):
        data += _lfield(3, _vfield(1, k + 1) + _lfield(2, a.encode()))
    return _packet(_vfield(10, SEQUENCE) + _lfield(12, bytes(data)) + _vfield(13, SEQ_INCREMENTAL_STATE_CLEARED))


def write_pftrace(f: IO[bytes], graph: OpGraph, sched: Schedule, layout: Layout, protocol: str,
                  rank: int | None = None) -> int:
    """Write the trace to ``f``; returns the number of packets. With ``rank``, only that rank's
    tracks and events."""
    # protobuf timestamps are unsigned: a replay that starts before 0 is shifted to start at 0
    shift = max(0, -int(min(layout.start.min(initial=0), sched.start.min(initial=0))))
    pids = None if rank is None else {p.pid for p in layout.processes if p.rank == rank}
    track_uuid = np.arange(len(layout.tracks), dtype=np.int64) + 1_000_000
    desc, _, counter_uuid = _descriptors(layout, track_uuid, pids)
    f.write(desc)
    count = sum(1 for p in layout.processes if pids is None or p.pid in pids)
    counts = layout.track_counts()
    count += sum(1 for i, t in enumerate(layout.tracks)
                 if not (counts[i] == 0 and t.name != "steps") and (pids is None or t.pid in pids))
    count += sum(1 for pid, *_ in layout.counters if pids is None or pid in pids)

    step_names = sorted({f"ProfilerStep#{s}" for _, s, _, _ in layout.steps})
    names = list(layout.names) + step_names
    cats = sorted(set(KINETO_CAT.values()) | {TEE_CAT, "user_annotation"})
    cat_iid = {c: k + 1 for k, c in enumerate(cats)}
    f.write(_interned(names, cats))
    count += 1

    # --- events: one row per begin / end / instant / counter value, sorted by time
    n_nodes = graph.n
    nodes = np.concatenate([np.arange(n_nodes, dtype=np.int64), layout.mirror_node])
    trk = np.concatenate([layout.node_track, layout.mirror_track]).astype(np.int64)
    mirror = np.r_[np.zeros(n_nodes, bool), np.ones(layout.mirror_node.size, bool)]
    steps = [(t, st, a, b) for t, st, a, b in layout.steps if pids is None or layout.tracks[t].pid in pids]
    if rank is not None:
        keep = graph.rank[nodes] == rank
        nodes, trk, mirror = nodes[keep], trk[keep], mirror[keep]
    s = layout.start[nodes]
    e = sched.finish[nodes]
    step_rows = np.array([(t, a, b) for t, _, a, b in steps], np.int64).reshape(-1, 3)
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
    counters = [(k, c) for k, c in enumerate(layout.counters) if pids is None or c[0] in pids]
    ctimes = [c[2] for _, c in counters]
    cvals = np.concatenate([c[3] for _, c in counters]).astype(np.int64) if counters else np.zeros(0, np.int64)
    ctrack = (np.concatenate([np.full(c[2].size, counter_uuid[k], np.int64) for k, c in counters])
              if counters else np.zeros(0, np.int64))
    nc = cvals.size
    rows_t = np.r_[rows_t, np.concatenate(ctimes) if ctimes else np.zeros(0, np.int64)]
    rows_kind = np.r_[rows_kind, np.full(nc, 3, np.int8)]
    rows_id = np.r_[rows_id, np.arange(nc)]
    rows_tie = np.r_[rows_tie, np.zeros(nc, np.int64)]
    order = np.lexsort((rows_id, rows_tie, rows_kind, rows_t))

    # per-node tables
    cat_of_kind = np.full(256, cat_iid[TEE_CAT], np.int64)
    for k, c in KINETO_CAT.items():
        cat_of_kind[int(k) & 0xFF] = cat_iid[c]
    cat_of_kind[16:] = cat_iid[TEE_CAT]
    stream_of_track = np.array([t.stream for t in layout.tracks] + [-1], np.int64)
    step_name_iid = np.array([len(layout.names) + 1 + step_names.index(f"ProfilerStep#{st}") for _, st, _, _ in steps],
                             np.int64)
    fo = np.argsort(layout.flow_src, kind="stable")
    fsrc, fid_out = layout.flow_src[fo], layout.flow_dst[fo] + 1
    is_dst = np.zeros(n_nodes + 1, bool)
    is_dst[layout.flow_dst] = True

    rt, rk, ri = rows_t[order], rows_kind[order], rows_id[order]
    n_all = nodes.size
    # rows per batch: the byte matrix holds 10 bytes per outgoing flow of the busiest launching call
    fan = int(np.unique(fsrc, return_counts=True)[1].max(initial=0))
    batch = max(1_000, min(BATCH, (32 << 20) // (256 + 10 * fan)))
    for lo in range(0, order.size, batch):
        t_, k_, sid = rt[lo:lo + batch], rk[lo:lo + batch], ri[lo:lo + batch]
        m = t_.size
        is_counter = k_ == 3
        is_node = ~is_counter & (sid < n_all)
        is_step = ~is_counter & ~is_node
        opens = (k_ == 1) | (k_ == 2)
        nid = np.where(is_node, sid, 0)
        nd = nodes[nid] if n_all else np.zeros(m, np.int64)
        node_open = is_node & opens
        mir = mirror[nid] & node_open if n_all else np.zeros(m, bool)
        track_row = np.where(is_counter, 0, all_track[np.where(is_counter, 0, sid)]) if n_slices else np.zeros(m, np.int64)
        uuid = np.where(is_counter, ctrack[np.where(is_counter, sid, 0)] if nc else 0, track_uuid[track_row])
        # category and name (begins and instants)
        cat = np.where(is_step, cat_iid["user_annotation"], cat_of_kind[graph.kind[nd].astype(np.int64) & 0xFF])
        step_i = np.where(is_step, sid - n_all, 0)
        cat[node_open & ~mir & layout.host_crypto[nd]] = cat_iid[HOST_CRYPTO_CAT]
        name = np.where(is_step, step_name_iid[step_i] if steps else 0, layout.name[nd].astype(np.int64) + 1)
        corr = layout.correlation[nd]
        stream = stream_of_track[np.where(is_node, track_row, -1)]
        nbytes = graph.bytes[nd]
        staged = layout.staged[nd] & node_open & ~mir
        # flows: outgoing on the launching call's begin, the terminating one on the GPU op's
        plain = node_open & ~mir
        lo_f = np.searchsorted(fsrc, nd)
        n_out = np.where(plain, np.searchsorted(fsrc, nd, side="right") - lo_f, 0)
        k_max = int(n_out.max(initial=0))
        flows = []
        for j in range(k_max):  # the j-th outgoing flow of each row (a call launching k ops has k)
            fm = np.empty((m, 10), np.uint8)
            fm[:, 0], fm[:, 1] = 0xF9, 0x02  # field 47, fixed64
            fm[:, 2:] = fid_out[np.minimum(lo_f + j, fid_out.size - 1)].astype("<u8").view(np.uint8).reshape(-1, 8)
            flows.append((fm, np.where(n_out > j, 10, 0)))
        term = plain & is_dst[nd]
        tm = np.empty((m, 10), np.uint8)
        tm[:, 0], tm[:, 1] = 0x81, 0x03  # field 48, fixed64
        tm[:, 2:] = (nd + 1).astype("<u8").view(np.uint8).reshape(-1, 8)
        ev_type = np.choose(k_.astype(np.int64), [END, INSTANT, BEGIN, COUNTER])
        every = np.ones(m, bool)
        te = [
            _tagged(b"\x18", cat, opens & ~is_counter),
            _annotation(1, graph.op_id[nd], node_open),
            _annotation(2, corr, node_open & (corr >= 0)),
            _annotation(3, stream, node_open & (stream >= 0)),
            _annotation(4, nbytes, node_open & (nbytes > 0)),
            _annotation(5, graph.lane[nd].astype(np.int64), mir),
            _annotation(6, np.ones(m, np.int64), staged),
            _tagged(b"\x48", ev_type, every),
            _tagged(b"\x50", name, opens & ~is_counter),
            _tagged(b"\x58", uuid, every),
            _tagged(b"\xf0\x01", cvals[np.where(is_counter, sid, 0)] if nc else np.zeros(m, np.int64), is_counter),
            *flows,
            (tm, np.where(term, 10, 0)),
        ]
        ts_piece = _tagged(b"\x40", t_ + shift, every)
        te_head = _tagged(b"\x5a", _lengths(te), every)  # TracePacket.track_event: tag, length
        pkt = [ts_piece, _const(bytes([0x50, SEQUENCE]), every), te_head, *te,
               _const(bytes([0x68, SEQ_NEEDS_INCREMENTAL_STATE]), every)]
        flat = _concat([_tagged(b"\x0a", _lengths(pkt), every), *pkt])  # Trace.packet: tag, length
        f.write(flat.tobytes())
        count += m
    return count
