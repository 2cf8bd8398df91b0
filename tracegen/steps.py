"""Step selection for ``tracegen capture --skip-steps/--steps``: keep some steps of a trace and
cut every dependency on the dropped ones, in the edges *and* in the timestamps.

Removing the dropped ops and the deps into kept ops is not enough: a kept GPU op that was queued
behind a dropped step's GPU tail (same stream, or an event) starts late in the recorded timeline,
and a graph builder reads that gap as a launch lag of the kept step. So the kept ops are re-timed
as if the dropped work had never run (:func:`retime`): every kept op keeps its recorded duration
and its recorded gap to the kept prerequisite that bound it; an op whose binding prerequisite was
dropped starts as soon as its kept prerequisites allow (a GPU op: its launch call's end plus the
launch latency); a blocking call that waited for dropped GPU work keeps only its return part.
Nothing moves later than recorded.
"""

from __future__ import annotations

import logging

from collections import deque

import numpy as np
import pyarrow as pa

from fastrack_core.errors import CaptureError
from fastrack_core.schema import DepKind, OpKind
from fastrack_core.traceio import make_table

_GPU_KINDS = {OpKind.KERNEL.label, OpKind.MEMCPY.label, OpKind.MEMSET.label, OpKind.COLLECTIVE.label}
# edges that bound when an op may start (a SYNC dep bounds when a blocking call returns, not when
# it starts; COLLECTIVE deps are group membership, not precedence)
_TIMED = {int(DepKind.PROGRAM), int(DepKind.LAUNCH), int(DepKind.STREAM), int(DepKind.EVENT)}


def select_steps(table: pa.Table, skip_steps: int = 0, steps: int | None = None, *,
                 launch_latency_ns: int | None = None) -> pa.Table:
    """Keep the ops of steps ``[first+skip, first+skip+steps)`` (counting the distinct step
    numbers present), drop deps on removed ops, re-time the kept ops so that nothing waits on
    removed work (:func:`retime`), renumber op ids 0..n-1 in start order and move the origin to
    the earliest kept op. No-op when neither is requested.

    ``launch_latency_ns``: end of a launch call to the earliest start of its GPU op (the emulator
    knows it); None estimates it from the kept launch-bound ops."""
    if not skip_steps and steps is None:
        return table
    step = table.column("step").to_numpy()
    present = sorted(int(s) for s in np.unique(step[step >= 0]))
    if not present:
        raise CaptureError("no step boundaries found (no optimizer.step() call and no ProfilerStep#N "
                           "annotation); --skip-steps/--steps need them")
    if skip_steps >= len(present):
        raise CaptureError(f"the script ran {len(present)} step(s); --skip-steps {skip_steps} leaves none")
    chosen = present[skip_steps: None if steps is None else skip_steps + steps]
    if steps is not None and len(chosen) < steps:
        logging.getLogger(__name__).warning(f"only {len(chosen)} step(s) after the skipped ones; keeping those")
    return _keep(table, np.isin(step, chosen), launch_latency_ns)


WINDOW_OPEN = "tracegen:window-open"  # marker rows written by tracegen.window; never in a written trace
WINDOW_CLOSE = "tracegen:window-close"


def select_window(table: pa.Table, *, launch_latency_ns: int | None = None) -> tuple[pa.Table, dict[str, int]]:
    """Keep the ops issued between the window markers (:data:`WINDOW_OPEN`, :data:`WINDOW_CLOSE`,
    each at most once; a missing one leaves that end open) and cut every dependency on the others,
    edges and timestamps, as :func:`select_steps` does (:func:`retime`). The markers themselves go.

    *Issued* inside: a host op of the markers' thread whose row lies between them (rows are in
    start order, program order at equal start), a host op of another thread that starts between
    their times, a GPU op whose launch call is inside (else: that starts between their times).
    Returns the table and ``{ops_before, ops_after, before_ns, after_ns}``: the ops left out on
    each side and the recorded time from the origin to the open marker and from the close marker
    to the span's end."""
    names = np.array(table.column("name").to_pylist(), dtype=object)
    kinds = np.array([str(k) for k in table.column("kind").to_pylist()], dtype=object)
    start = table.column("start_ns").to_numpy().astype(np.int64)
    end = start + table.column("dur_ns").to_numpy().astype(np.int64)
    thread = table.column("thread").to_numpy()
    n = table.num_rows
    rows = np.arange(n)
    opens, closes = np.flatnonzero(names == WINDOW_OPEN), np.flatnonzero(names == WINDOW_CLOSE)
    r_open = int(opens[0]) if opens.size else -1
    r_close = int(closes[0]) if closes.size else n
    t_open = int(start[r_open]) if r_open >= 0 else int(start.min(initial=0))
    t_close = int(start[r_close]) if r_close < n else int(end.max(initial=0)) + 1
    marker_thread = thread[r_open] if r_open >= 0 else (thread[r_close] if r_close < n else None)
    on_gpu = np.isin(kinds, list(_GPU_KINDS))
    own = ~on_gpu & (thread == marker_thread)
    after_open = np.where(own, rows > r_open, start >= t_open)
    before_close = np.where(own, rows < r_close, start < t_close)
    pos = {int(o): i for i, o in enumerate(table.column("op_id").to_numpy())}
    for i, (ds, ks) in enumerate(zip(table.column("deps").to_pylist(), table.column("dep_kinds").to_pylist())):
        if on_gpu[i]:
            launch = [pos[d] for d, k in zip(ds, ks) if k == DepKind.LAUNCH and d in pos]
            if launch:
                after_open[i], before_close[i] = after_open[launch[0]], before_close[launch[0]]
    marker = (names == WINDOW_OPEN) | (names == WINDOW_CLOSE)
    inside = after_open & before_close & ~marker
    if not inside.any():
        raise CaptureError("the recorded window holds no ops")
    info = {"ops_before": int((~after_open & ~marker).sum()),
            "ops_after": int((after_open & ~before_close & ~marker).sum()),
            "before_ns": max(0, t_open - int(start.min())) if r_open >= 0 else 0,
            "after_ns": max(0, int(end.max()) - t_close) if r_close < n else 0}
    return _keep(table, inside, launch_latency_ns), info


def _keep(table: pa.Table, mask: np.ndarray, launch_latency_ns: int | None) -> pa.Table:
    old_ids = table.column("op_id").to_numpy()
    pos = {int(o): i for i, o in enumerate(old_ids)}
    start = table.column("start_ns").to_numpy().astype(np.int64)
    dur = table.column("dur_ns").to_numpy().astype(np.int64)
    kinds = [str(k) for k in table.column("kind").to_pylist()]
    deps_all = table.column("deps").to_pylist()
    dkinds_all = table.column("dep_kinds").to_pylist()
    deps = [[(pos[d], int(k)) for d, k in zip(ds, ks) if d in pos] for ds, ks in zip(deps_all, dkinds_all)]
    new_start, new_dur = retime(start, dur, kinds, deps, mask, launch_latency_ns)

    kept = np.flatnonzero(mask)
    on_gpu = np.array([kinds[i] in _GPU_KINDS for i in kept], dtype=bool)
    order = kept[np.lexsort((kept, on_gpu, new_start[kept]))]
    newid = {int(i): j for j, i in enumerate(order)}
    out_deps, out_kinds = [], []
    for i in order:
        pairs = [(newid[d], k) for d, k in deps[i] if d in newid]
        out_deps.append([p[0] for p in pairs])
        out_kinds.append([p[1] for p in pairs])
    rows = pa.array(order, pa.int64())
    cols = {name: table.column(name).take(rows) for name in table.schema.names}
    s = new_start[order]
    cols["op_id"] = np.arange(len(order), dtype=np.int64)
    cols["start_ns"] = s - (s.min() if len(s) else 0)
    cols["dur_ns"] = new_dur[order]
    cols["deps"] = out_deps
    cols["dep_kinds"] = out_kinds
    return make_table(cols)


def retime(start: np.ndarray, dur: np.ndarray, kinds: list[str], deps: list[list[tuple[int, int]]],
           keep: np.ndarray, launch_latency_ns: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """New ``(start, dur)`` of every op (rows of dropped ops unchanged) once the ops not in
    ``keep`` are gone. ``deps[i]``: ``(row, DepKind)`` pairs of op ``i``.

    Each kept op's earliest start from one prerequisite ``p`` is ``end(p)`` (stream order, events,
    program order, a blocking call's wait) or ``end(p) + latency`` (``p`` the call that launched a
    GPU op). The recorded binding prerequisite is the one with the latest such bound; if it was
    kept, the op keeps its recorded gap to it; if it was dropped (the op waited for removed work),
    the op starts at the latest bound of its kept prerequisites. Either way never later than
    recorded. A ``sync`` op whose awaited GPU work ended after its start keeps the part after
    that work (the return) and waits only for kept work."""
    n = len(start)
    end = start + dur
    lat = _launch_latency(start, end, kinds, deps, keep) if launch_latency_ns is None else int(launch_latency_ns)
    new_start, new_dur = start.copy(), dur.copy()
    new_end = end.copy()

    def bound(p: int, k: int, ends: np.ndarray) -> int:
        return int(ends[p]) + (lat if k == DepKind.LAUNCH else 0)

    for i in _topological(n, deps, keep):
        timed = [(p, k) for p, k in deps[i] if k in _TIMED]
        kept = [(p, k) for p, k in timed if keep[p]]
        lost = [(p, k) for p, k in timed if not keep[p]]
        s = int(start[i])
        if kept or lost:
            best_kept = max((bound(p, k, end) for p, k in kept), default=None)
            best_lost = max((bound(p, k, end) for p, k in lost), default=None)
            new_bound = max((bound(p, k, new_end) for p, k in kept), default=None)
            if best_lost is not None and (best_kept is None or best_lost > best_kept):
                s = new_bound if new_bound is not None else s  # waited on removed work: as early as allowed
            elif best_kept is not None:
                s = new_bound + max(0, s - best_kept)  # keep the recorded gap to the binding prerequisite
            s = min(int(start[i]), s)
        d = int(dur[i])
        if kinds[i] == OpKind.SYNC.label:
            waits = [p for p, k in deps[i] if k == DepKind.SYNC]
            waited = max((int(end[p]) for p in waits), default=None)
            if waited is not None and waited > start[i]:
                ret = int(end[i]) - waited  # the part after the awaited work: the call's return
                kept_wait = max((int(new_end[p]) for p in waits if keep[p]), default=s)
                d = max(kept_wait, s) + ret - s
        new_start[i], new_dur[i] = s, max(0, min(d, int(end[i]) - s))  # never ends later than recorded
        new_end[i] = new_start[i] + new_dur[i]
    return new_start, new_dur


def _topological(n: int, deps: list[list[tuple[int, int]]], keep: np.ndarray) -> list[int]:
    """The kept rows, every prerequisite before its dependents (ties in row order)."""
    indeg = np.zeros(n, np.int64)
    users: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        if keep[i]:
            for p, _k in deps[i]:
                if keep[p]:
                    indeg[i] += 1
                    users[p].append(i)
    ready = deque(i for i in range(n) if keep[i] and indeg[i] == 0)
    out = []
    while ready:
        i = ready.popleft()
        out.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if len(out) != int(keep.sum()):
        raise CaptureError("the trace's dependencies form a cycle; cannot select steps")
    return out


def _launch_latency(start, end, kinds, deps, keep) -> int:
    """Median gap from a launch call's end to its GPU op's start over the kept GPU ops that the
    launch bound (no other prerequisite ended later); 0 when there are none."""
    gaps = []
    for i in np.flatnonzero(keep):
        if kinds[i] not in _GPU_KINDS:
            continue
        launch = [p for p, k in deps[i] if k == DepKind.LAUNCH and keep[p]]
        if not launch:
            continue
        other = max((int(end[p]) for p, k in deps[i] if k in _TIMED and k != DepKind.LAUNCH), default=None)
        g = int(start[i]) - int(end[launch[0]])
        if g >= 0 and (other is None or other < start[i]):
            gaps.append(g)
    return int(np.median(gaps)) if gaps else 0
