"""Encrypted command submission under CC: a fixed CPU cost per launched GPU op.

For every host op ``R`` that launches GPU ops (LAUNCH edges), a ``cc_submit`` node of duration
``sum(model.submit_ns(kind of each launched op))`` follows ``R`` on its host lane, and the
launched ops' LAUNCH lags grow by their own submission cost (the GPU cannot start the op before
its encrypted command arrives). ``R``'s program successors then follow the submit node: see
:func:`redirect_program`.
"""

from __future__ import annotations

import numpy as np

from fastrack.schema import DepKind

from .copies import launch_edges
from .editor import GraphEditor
from .kinds import DerivedKind


def add_submission(ed: GraphEditor, model, e: np.ndarray | None = None) -> np.ndarray:
    """Add submit nodes and launch-lag increases; return ``tail``: per existing node, the host node
    that now ends it (its submit node, or itself). ``e``: the host->GPU LAUNCH edges, if known."""
    g = ed.g
    tail = np.arange(ed.n0, dtype=np.int64)
    e = launch_edges(g, ed.edge_dst) if e is None else e
    if e.size == 0:
        return tail
    cost = np.asarray(model.submit_ns(g.kind[ed.edge_dst[e]]), dtype=np.int64)
    lag = ed.edge_lag
    lag[e] += cost
    src = g.dep_src[e]
    order = np.argsort(src, kind="stable")
    s_sorted = src[order]
    starts = np.flatnonzero(np.r_[True, s_sorted[1:] != s_sorted[:-1]])
    launchers = s_sorted[starts]
    total = np.add.reduceat(cost[order], starts) if starts.size else np.zeros(0, np.int64)
    has = total > 0
    launchers, total = launchers[has], total[has]
    sub = ed.add_nodes(DerivedKind.CC_SUBMIT, launchers, g.lane[launchers], total)
    ed.add_edges(launchers, sub, DepKind.PROGRAM, 0)
    tail[launchers] = sub
    return tail


def redirect_program(ed: GraphEditor, tail: np.ndarray) -> None:
    """Existing PROGRAM edges leave from ``tail[src]`` instead of ``src`` (the host thread only
    moves on once the inserted chain after a call is done)."""
    src = ed.edge_src
    m = (ed.g.dep_kind == DepKind.PROGRAM) & (tail[src] != src)
    src[m] = tail[src[m]]
