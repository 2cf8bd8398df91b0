"""Cross-checks of a trace's own consistency, before any replay (docs/robustness.md "Traces that
contradict themselves").

A trace can be well-formed column by column (every value in range, every dependency resolved)
and still say two things that cannot both be true: rank 3's copy of an all-reduce moves 16 TiB
while the other seven move 4 MiB; a kernel starts a second before the call that launched it.
Replayed as if true, such a trace gives a confident wrong answer under every protocol. This
module looks for those contradictions once, on the graph just built (and the trace's collective
columns), for every protocol, ``captured`` included. Each finding is either

* a refusal: :class:`~fastrack_core.errors.GraphError`, one line naming the file, the ops by id
  and rank and the field (never a value read from the trace, never a name), or
* one warning per kind of finding, with the count, saying what the replay assumes instead.

=========================================================  =========  ===================================
finding                                                    decision   why
=========================================================  =========  ===================================
a collective with two members on one rank (collapsed       refuse     a rank takes part once; ``captured``
ranks)                                                                would replay it as two kernels
a collective without partners in a multi-rank trace        refuse     it would wait for nobody
members of one collective differ in ``coll_type``,         refuse     the replay cannot tell which rank
``coll_group``, ``coll_seq``, or ``coll_bytes`` (except               is right; all-to-all(v) may send
all-to-all)                                                           different sizes per rank
ranks of one process group issue different numbers of      refuse     a collective was dropped on a rank
collectives
a ``P2P`` copy in a trace of one rank on one device        refuse     no peer exists to copy to
ranks with ops that the trace's metadata does not list     refuse     the files and the metadata disagree
a ``memcpy`` with no ``copy_dir``                          warn       replayed as a copy that stays on the
                                                                      device (no CC encryption)
a GPU op that starts more than                             warn       the replay keeps the launch order:
:data:`LAUNCH_BEFORE_TOLERANCE_NS` before its launch                  each starts after its launch
=========================================================  =========  ===================================

The warnings are returned as strings; :func:`replay.pipeline.run.load_graph` keeps them and the
replay, once it has succeeded, prints each as one ``warning: FILE: ...`` line on stderr (so a
command that fails after the check prints only its error line).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from fastrack_core.errors import FastrackError, GraphError
from fastrack_core.schema import CopyDir, DepKind, OpKind
from replay.graph import OpGraph

# assumption: CUPTI puts host API records and GPU activity records on one normalised clock; on the
# traces of tests/data and traces/ no GPU op starts before its launching call (the smallest
# launch-to-start is 3.2-10 us), so a GPU op more than 1 us before its launch is a damaged or
# shuffled trace, not clock jitter. Range 0.1-10 us; docs/robustness.md.
LAUNCH_BEFORE_TOLERANCE_NS = 1_000

# the trace columns the collective checks read (besides the graph's)
COLUMNS = ("coll_type", "coll_bytes", "coll_group", "coll_seq", "device")

_VARIABLE_SIZE = frozenset({"all_to_all", "all_to_allv", "alltoall", "alltoallv", "send_recv", "gather", "scatter"})


def _nth(i: int) -> str:
    n = i + 1
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _ranks(ranks) -> str:
    ranks = sorted(int(r) for r in ranks)
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(map(str, ranks))


def _op(graph: OpGraph, i: int) -> str:
    return graph.node_label(int(i))


def check(graph: OpGraph, columns: Mapping[str, np.ndarray] | None = None, metadata: Mapping[str, Any] | None = None,
          path: str | None = None) -> list[str]:
    """Refuse (``GraphError``) or warn about a trace that contradicts itself; the warnings.
    ``columns``: trace columns of :data:`COLUMNS`, one value per node of ``graph`` (those absent
    are not checked); ``metadata``: the trace's metadata (its ``ranks``)."""
    columns = columns or {}
    if graph.n == 0:
        return []
    ranks = np.unique(graph.rank)
    _check_ranks(ranks, metadata or {}, path)
    _check_collectives(graph, ranks, columns, path)
    notes: list[str] = []
    _check_copies(graph, ranks, columns, path, notes)
    _check_launches(graph, notes)
    return notes


def _check_ranks(ranks: np.ndarray, metadata: Mapping[str, Any], path: str | None) -> None:
    listed = metadata.get("ranks")
    if not isinstance(listed, list) or not listed or not all(isinstance(r, int) and not isinstance(r, bool)
                                                               for r in listed):
        return
    extra = sorted(set(ranks.tolist()) - set(listed))
    if extra:
        raise GraphError(f"rank {extra[0]} has ops but is not among the {len(listed)} ranks the trace's metadata "
                         f"lists (field 'ranks'; {len(extra)} such rank(s))", path=path)


def _check_collectives(graph: OpGraph, ranks: np.ndarray, columns: Mapping[str, np.ndarray], path: str | None) -> None:
    coll = np.flatnonzero(graph.kind == OpKind.COLLECTIVE)
    if coll.size == 0:
        return
    group = graph.group[coll]
    rank = graph.rank[coll].astype(np.int64)
    lone = coll[group < 0]
    if lone.size and ranks.size > 1:
        others = sorted(set(ranks.tolist()) - {int(graph.rank[lone[0]])})
        more = f" ({lone.size} such collectives)" if lone.size > 1 else ""
        raise GraphError(f"mismatched collectives: {_op(graph, lone[0])} has no partner on ranks {_ranks(others)}{more}; "
                         "every rank of a multi-rank trace must issue the same collectives (same coll_group, "
                         "coll_type and coll_seq)", path=path)
    member = group >= 0
    node, g, rk = coll[member], group[member], rank[member]
    if node.size:
        o = np.lexsort((rk, g))
        node, g, rk = node[o], g[o], rk[o]
        same = np.flatnonzero((g[1:] == g[:-1]) & (rk[1:] == rk[:-1]))
        if same.size:
            j = int(same[0])
            raise GraphError(f"mismatched collectives: {_op(graph, node[j])} and {_op(graph, node[j + 1])} are both "
                             f"members of one collective on rank {int(rk[j])}; each rank takes part once (ranks "
                             "collapsed into one?)", path=path)
        start = np.r_[0, np.flatnonzero(g[1:] != g[:-1]) + 1]  # first member of each collective
        first = np.repeat(node[start], np.diff(np.r_[start, node.size]))
        ctype = columns.get("coll_type")
        for field in ("coll_type", "coll_group", "coll_seq", "coll_bytes"):
            col = columns.get(field)
            if col is None:
                continue
            a, b = col[node], col[first]
            if field == "coll_seq":
                differ = (a != b) & (a >= 0) & (b >= 0)
            elif field == "coll_bytes":
                differ = (a != b) & (a > 0) & (b > 0)
                if ctype is not None:
                    differ &= np.array([t not in _VARIABLE_SIZE for t in ctype[first].tolist()], bool)
            else:
                differ = np.array([x != y for x, y in zip(a.tolist(), b.tolist())], bool)
            bad = np.flatnonzero(differ)
            if bad.size:
                j = int(bad[0])
                raise GraphError(f"mismatched collectives: {_op(graph, node[j])} and {_op(graph, first[j])}, "
                                 "members of one collective, "
                                 f"disagree on '{field}' ({bad.size} member(s) differ from their collective's first)",
                                 path=path)
    _check_counts(graph, coll, rank, columns.get("coll_group"), path)


def _check_counts(graph: OpGraph, coll: np.ndarray, rank: np.ndarray, groups: np.ndarray | None,
                  path: str | None) -> None:
    """Within each process group (``coll_group``; all collectives when the column is absent or
    null everywhere), every rank that takes part issues the same number of collectives."""
    if groups is None:
        keys = np.zeros(coll.size, np.int64)
    else:
        labels = groups[coll].tolist()
        codes: dict[Any, int] = {}
        keys = np.fromiter((codes.setdefault(v, len(codes)) for v in labels), np.int64, coll.size)
    order = np.lexsort((rank, keys))
    k, r = keys[order], rank[order]
    new = np.r_[True, (k[1:] != k[:-1]) | (r[1:] != r[:-1])]
    starts = np.flatnonzero(new)
    counts = np.diff(np.r_[starts, k.size])
    gk, gr = k[starts], r[starts]
    for key in np.unique(gk).tolist():
        sel = np.flatnonzero(gk == key)
        c = counts[sel]
        if c.min() != c.max():
            lo, hi = int(sel[np.argmin(c)]), int(sel[np.argmax(c)])
            where = "" if groups is None else f" of the {_nth(int(key))} process group (field 'coll_group')"
            raise GraphError(f"mismatched collectives: rank {int(gr[lo])} issues {int(c.min())} collective(s){where}, "
                             f"rank {int(gr[hi])} "
                             f"issues {int(c.max())}: a collective is missing on some rank", path=path)


def _check_copies(graph: OpGraph, ranks: np.ndarray, columns: Mapping[str, np.ndarray], path: str | None,
                  notes: list[str]) -> None:
    copy = graph.kind == OpKind.MEMCPY
    if not copy.any():
        return
    p2p = np.flatnonzero(copy & (graph.copy_dir == CopyDir.P2P))
    if p2p.size and ranks.size == 1:
        dev = columns.get("device")
        gpu = np.flatnonzero(graph.kind != OpKind.CPU) if dev is not None else None
        devices = np.unique(dev[gpu]) if dev is not None and gpu.size else np.zeros(1)
        if devices[devices >= 0].size <= 1:
            raise GraphError(f"{_op(graph, p2p[0])} is a P2P copy in a trace of one rank on one device: there is no "
                             f"peer to copy to ({p2p.size} such copies; field 'copy_dir')", path=path)
    none = np.flatnonzero(copy & (graph.copy_dir == CopyDir.NONE))
    if none.size:
        notes.append(f"{none.size} memcpy op(s) have no direction (field 'copy_dir' null; first {_op(graph, none[0])}): "
                     "replayed as copies that stay on the GPU, which CC does not encrypt; if any crossed PCIe, the "
                     "CC cost is understated")


def _check_launches(graph: OpGraph, notes: list[str]) -> None:
    e = np.flatnonzero(graph.dep_kind == DepKind.LAUNCH)
    if e.size == 0:
        return
    dst = np.searchsorted(graph.dep_ptr, e, side="right") - 1
    src = graph.dep_src[e]
    cs, cd = graph.captured_start[src], graph.captured_start[dst]
    ahead = (cs >= 0) & (cd >= 0) & (cd < cs - LAUNCH_BEFORE_TOLERANCE_NS)
    n = int(np.count_nonzero(ahead))
    if n:
        i = int(np.flatnonzero(ahead)[0])
        worst = int((cs - cd)[ahead].max())
        notes.append(f"{n} GPU op(s) start before the call that launched them, by more than "
                     f"{LAUNCH_BEFORE_TOLERANCE_NS / 1000:g} us (up to {worst / 1e3:,.1f} us; first {_op(graph, dst[i])}): "
                     "the replay keeps the launch order, so each starts after its launch, later than measured")




_PENDING: list[str] = []  # warnings of traces checked in this process, not yet reported (take_warnings)


def take_warnings() -> list[str]:
    """The warnings of the traces checked since the last call (each ``FILE: ...``), now cleared.
    :func:`replay.pipeline.run.replay_prepared` prints them once a replay has succeeded, so a
    command that then fails prints only its one error line."""
    out = list(_PENDING)
    _PENDING.clear()
    return out


def check_trace(graph: OpGraph, trace, emit: bool = True) -> list[str]:
    """:func:`check` of the graph built from ``trace`` (a :class:`fastrack_core.traceio.Trace`
    whose table may hold only some columns): the collective columns it lacks are read from its
    file, only when the graph has collectives. ``emit``: keep the warnings for
    :func:`take_warnings`, which the replay reports."""
    table, path = trace.table, trace.path
    have = set(table.column_names) if table.num_columns else set()
    want = [c for c in COLUMNS if c in have]
    cols: dict[str, np.ndarray] = {}
    for c in want:
        cols[c] = trace.column(c)
    needs_coll = bool((graph.kind == OpKind.COLLECTIVE).any())
    missing = [c for c in COLUMNS[:4] if c not in have]
    if needs_coll and missing and path is not None:
        from fastrack_core.traceio import read_trace

        try:
            extra = read_trace(path, columns=missing)
        except FastrackError:  # (not a Parquet file: an imported input, whose table holds every column it has)
            extra = None
        if extra is not None and extra.num_ops == graph.n:
            for c in missing:
                cols[c] = extra.column(c)
            extra.drop_columns()
    notes = check(graph, cols, trace.metadata, path)
    if emit:
        _PENDING.clear()  # (those of a trace loaded before and never replayed are not this trace's)
        for line in (f"{path + ': ' if path else ''}{note}" for note in notes):
            if line not in _PENDING:  # (a trace loaded twice in one command warns once)
                _PENDING.append(line)
    return notes


__all__ = ["COLUMNS", "LAUNCH_BEFORE_TOLERANCE_NS", "check", "check_trace", "take_warnings"]
