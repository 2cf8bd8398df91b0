"""Encrypted command submission under CC: one encrypted submission per host submission call.

A host call ``R`` that launches GPU ops (LAUNCH edges: a kernel launch, a copy, a memset, or a
``cudaGraphLaunch`` launching every op of the graph) writes ONE pushbuffer segment, which the CPU
encrypts [S9]. Its cost is ``max(model.submit_ns(kind of each launched op))``: one submission,
priced by the most expensive kind it carries, whatever the number of ops in it. A ``cc_submit``
node of that duration follows ``R`` on its host lane, and every op ``R`` launches has its LAUNCH
lag grown by the *same* cost (the GPU cannot start any op of the segment before the encrypted
segment is there), so host and GPU account one submission alike. ``R``'s program successors
then follow the submit node: see :func:`redirect_program`.
"""

from __future__ import annotations

import numpy as np

from fastrack_core.schema import DepKind

from .copies import dependents, launch_edges
from .editor import GraphEditor
from .kinds import DerivedKind


def add_submission(ed: GraphEditor, model, e: np.ndarray | None = None, dst: np.ndarray | None = None) -> np.ndarray:
    """Add submit nodes and launch-lag increases; return ``tail``: per existing node, the host node
    that now ends it (its submit node, or itself). ``e``: the host->GPU LAUNCH edges, if known
    (``dst``: their dependents)."""
    g = ed.g
    tail = np.arange(ed.n0, dtype=np.int64)
    e = launch_edges(g) if e is None else e
    if e.size == 0:
        return tail
    cost = np.asarray(model.submit_ns(g.kind[dependents(g, e) if dst is None else dst]), dtype=np.int64)
    src = g.dep_src[e]
    per_call = np.zeros(ed.n0, np.int64)
    np.maximum.at(per_call, src, cost)  # one submission per call, priced by its most expensive kind
    ed.set_edge_lag(e, ed.edge_lag_at(e) + per_call[src])
    launchers = np.flatnonzero(per_call > 0)  # the calls with a priced submission, in node order
    total = per_call[launchers]
    sub = ed.add_nodes(DerivedKind.CC_SUBMIT, launchers, g.lane[launchers], total)
    ed.add_edges(launchers, sub, DepKind.PROGRAM, 0)
    tail[launchers] = sub
    return tail


def redirect_program(ed: GraphEditor, tail: np.ndarray) -> None:
    """Existing PROGRAM edges leave from ``tail[src]`` instead of ``src`` (the host thread only
    moves on once the inserted chain after a call is done)."""
    prog = np.flatnonzero(ed.g.dep_kind == DepKind.PROGRAM)
    src = ed.edge_src_at(prog)
    to = tail[src]
    moved = to != src
    ed.set_edge_src(prog[moved], to[moved])
