"""Encrypted command submission under CC: one push per host submission call, as the driver does it.

A host call ``R`` that launches GPU ops (LAUNCH edges: a kernel launch, a copy, a memset, or a
``cudaGraphLaunch`` launching every op of the graph) writes ONE pushbuffer segment [S9]. The UVM
driver's CC path for it (``internal_channel_submit_work_indirect_wlc``, docs/model.md "The driver
path") runs on ``R``'s thread, in this order, each a node after ``R``:

1. ``cpu_encrypt`` of the segment (``model.push_segment_bytes``, one AES-GCM call);
2. ``cpu_encrypt`` of the work-launch push that carries it (``model.wlc_push_bytes``);
3. (only with ``tee.exits_per_push`` > 0) the doorbell write's VM exits, a ``p2p_submit`` node;
4. ``cc_submit``: the work-launch round trip, ``model.push_round_trip_ns`` of the most expensive
   kind the call launches (the driver waits for the work-launch push with ``uvm_push_end_and_wait``).

Every op ``R`` launches has its LAUNCH lag grown by the sum (``model.submit_ns``): no op of the
segment starts before the GPU has the decrypted segment, so host and GPU account one push alike,
whatever the number of ops in it. ``R``'s program successors then follow the last stage: see
:func:`redirect_program`. A model without ``push_round_trip_ns`` (the plug-in interface's
``submit_ns`` only) gets one ``cc_submit`` node of ``submit_ns``.
"""

from __future__ import annotations

import numpy as np

from fastrack_core.schema import HOST_KINDS, DepKind

from .copies import dependents, launch_edges
from .editor import GraphEditor
from .kinds import DerivedKind

HOST_KIND_CODES = np.array(sorted(int(k) for k in HOST_KINDS), np.int64)


def add_submission(ed: GraphEditor, model, e: np.ndarray | None = None, dst: np.ndarray | None = None) -> np.ndarray:
    """Add the push stages and launch-lag increases; return ``tail``: per existing node, the host node
    that now ends it (its last push stage, or itself). ``e``: the host->GPU LAUNCH edges, if known
    (``dst``: their dependents)."""
    g = ed.g
    tail = np.arange(ed.n0, dtype=np.int64)
    e = launch_edges(g) if e is None else e
    if e.size == 0:
        return tail
    kinds = g.kind[dependents(g, e) if dst is None else dst]
    src = g.dep_src[e]
    if not hasattr(model, "push_round_trip_ns"):  # a model that prices one push as one cost (replay.model)
        return _single_cost(ed, model, e, src, kinds, tail)
    total = np.asarray(model.submit_ns(kinds), dtype=np.int64)
    trip = np.asarray(model.push_round_trip_ns(kinds), dtype=np.int64)
    per_call = np.zeros(ed.n0, np.int64)
    np.maximum.at(per_call, src, total)  # one push per call: its most expensive kind's round trip
    round_trip = np.zeros(ed.n0, np.int64)
    np.maximum.at(round_trip, src, trip)
    ed.set_edge_lag(e, ed.edge_lag_at(e) + per_call[src])
    calls = np.flatnonzero(per_call > 0)  # the calls that push, in node order
    if calls.size == 0:
        return tail
    lane = g.lane[calls]
    last = calls
    for nbytes in (int(model.push_segment_bytes), int(model.wlc_push_bytes)):  # 0 bytes: the stage is left out
        if nbytes > 0:
            enc = ed.add_nodes(DerivedKind.CPU_ENCRYPT, calls, lane, int(model.crypto_call_ns(nbytes)), nbytes)
            ed.add_edges(last, enc, DepKind.PROGRAM, 0)
            last = enc
    door = int(model.doorbell_exit_ns())
    if door > 0:  # the doorbell write leaves the confidential VM (tee.exits_per_push)
        exits = ed.add_nodes(DerivedKind.P2P_SUBMIT, calls, lane, door)
        ed.add_edges(last, exits, DepKind.PROGRAM, 0)
        last = exits
    sub = ed.add_nodes(DerivedKind.CC_SUBMIT, calls, lane, round_trip[calls])
    # the call itself is the first PROGRAM prerequisite of its cc_submit (the push it prices, as the
    # C++ core reads it); the edge from the last stage orders it after the encryption
    ed.add_edges(calls, sub, DepKind.PROGRAM, 0)
    if last is not calls:
        ed.add_edges(last, sub, DepKind.PROGRAM, 0)
    tail[calls] = sub
    return tail


def _single_cost(ed: GraphEditor, model, e: np.ndarray, src: np.ndarray, kinds: np.ndarray,
                 tail: np.ndarray) -> np.ndarray:
    """One ``cc_submit`` node of ``model.submit_ns`` per pushing call (models without push stages)."""
    g = ed.g
    cost = np.asarray(model.submit_ns(kinds), dtype=np.int64)
    per_call = np.zeros(ed.n0, np.int64)
    np.maximum.at(per_call, src, cost)  # one submission per call, priced by its most expensive kind
    ed.set_edge_lag(e, ed.edge_lag_at(e) + per_call[src])
    launchers = np.flatnonzero(per_call > 0)  # the calls with a priced submission, in node order
    sub = ed.add_nodes(DerivedKind.CC_SUBMIT, launchers, g.lane[launchers], per_call[launchers])
    ed.add_edges(launchers, sub, DepKind.PROGRAM, 0)
    tail[launchers] = sub
    return tail


def scale_host_work(ed: GraphEditor, model) -> None:
    """The CPU TEE's cost on host work: every traced host op's duration times the model's
    ``host_work_ratio`` (rounded up); nothing for a model without one, or a ratio of 1."""
    ratio = float(getattr(model, "host_work_ratio", 1.0))
    if ratio == 1.0:
        return
    g = ed.g
    host = np.flatnonzero(np.isin(g.kind[:ed.n0], HOST_KIND_CODES))
    if host.size:
        dur = ed.dur_at(host)
        ed.set_dur(host, np.ceil(dur * ratio).astype(np.int64))


def redirect_program(ed: GraphEditor, tail: np.ndarray) -> None:
    """Existing PROGRAM edges leave from ``tail[src]`` instead of ``src`` (the host thread only
    moves on once the inserted chain after a call is done)."""
    prog = np.flatnonzero(ed.g.dep_kind == DepKind.PROGRAM)
    src = ed.edge_src_at(prog)
    to = tail[src]
    moved = to != src
    ed.set_edge_src(prog[moved], to[moved])
