"""Timelines of a replay that trace viewers and analysis tools read (docs/timelines.md).

:func:`write_timeline` picks the format from the file name: ``.pftrace`` (or
``.perfetto-trace``) writes Perfetto's protobuf format (:mod:`replay.exporters.timeline.pftrace`),
anything else Chrome-trace JSON shaped like a PyTorch-profiler (Kineto)
trace (:mod:`replay.exporters.timeline.chrome`), gzip-compressed when the name ends in ``.gz``. Where
things go (processes, tracks, flows, steps, counters) is :mod:`replay.exporters.timeline.layout`. The file
is written atomically: a failed write leaves no file behind. A name holding ``{rank}`` writes one
file per rank (:func:`write_rank_timelines`), as HTA and TraceLens read a distributed job.
"""

from __future__ import annotations

import os

from fastrack_core.atomic import atomic_path
from replay.pipeline.engine import Schedule
from replay.graph import OpGraph
from replay.exporters.timeline.layout import bounce_occupancy, build_layout

PFTRACE_SUFFIXES = (".pftrace", ".perfetto-trace")


def timeline_facts(result, trace) -> dict:
    """What the header of a timeline records about the replay (``result``: a
    :class:`~replay.pipeline.results.ReplayResult`; ``trace``: the :class:`~fastrack_core.traceio.Trace`)."""
    facts = {"trace_name": trace.metadata.get("trace_name"), "source_format": trace.metadata.get("source_format"),
             "makespan_ns": result.makespan_ns}
    if result.model:
        facts.update(model=result.model.get("model"), preset=result.model.get("preset"),
                     params_digest=result.model.get("digest"))
    return facts


def timeline_format(path: str | os.PathLike) -> str:
    """``pftrace``, ``json.gz`` or ``json``: the format :func:`write_timeline` writes to ``path``."""
    name = os.fspath(path).lower()
    if name.endswith(PFTRACE_SUFFIXES):
        return "pftrace"
    return "json.gz" if name.endswith(".gz") else "json"


def check_timeline_target(path: str | os.PathLike, inputs=(), overwrite: bool = False) -> None:
    """Refuse, before any work, a timeline path that may not be written (:func:`fastrack_core.outputs.
    check_output_path`: the input itself, a link, a non-regular file, an existing file without
    ``overwrite``). A ``{rank}`` pattern is checked per rank by :func:`check_rank_targets` once the
    ranks are known; here only its rank-0 name."""
    from fastrack_core.outputs import check_output_path

    check_output_path(rank_paths(path, [0])[0] if is_rank_pattern(path) else path, inputs, overwrite)


RANK_FIELD = "{rank}"


def is_rank_pattern(path: str | os.PathLike) -> bool:
    """Whether ``path`` names one timeline per rank (it holds ``{rank}``)."""
    return RANK_FIELD in os.fspath(path)


def rank_paths(path: str | os.PathLike, ranks) -> dict[int, str]:
    """The file of each rank: ``{rank}`` in ``path`` replaced by the rank number (no other brace
    field is read, so a name may hold other braces)."""
    p = os.fspath(path)
    return {int(r): p.replace(RANK_FIELD, str(int(r))) for r in ranks}


def graph_ranks(graph: OpGraph) -> list[int]:
    """The ranks a replay of ``graph`` has (a timeline per rank when the name holds ``{rank}``)."""
    import numpy as np

    return sorted(set(np.unique(graph.rank).tolist())) or [0]


def check_rank_targets(path: str | os.PathLike, ranks, inputs=(), overwrite: bool = False) -> dict[int, str]:
    """:func:`check_timeline_target` on the file of every rank; returns them."""
    paths = rank_paths(path, ranks)
    for p in paths.values():
        check_timeline_target(p, inputs, overwrite)
    return paths


def write_timeline(path: str | os.PathLike, graph: OpGraph, sched: Schedule, protocol: str,
                   extra: dict | None = None) -> int:
    """Write the timeline of one replay to ``path`` atomically; returns the number of events.
    ``extra``: JSON-serialisable facts recorded in the header (trace name, model, preset, ...).
    A ``path`` holding ``{rank}`` writes one file per rank (:func:`write_rank_timelines`)."""
    if is_rank_pattern(path):
        return sum(write_rank_timelines(path, graph, sched, protocol, extra).values())
    fmt = timeline_format(path)
    layout = build_layout(graph, sched, protocol)
    with atomic_path(path) as tmp:
        return _write(tmp, fmt, graph, sched, layout, protocol, extra, None)


def _write(tmp: str, fmt: str, graph, sched, layout, protocol, extra, rank) -> int:
    if fmt == "pftrace":
        from replay.exporters.timeline.pftrace import write_pftrace

        with open(tmp, "wb") as f:
            return write_pftrace(f, graph, sched, layout, protocol, rank=rank)
    from replay.exporters.timeline.chrome import open_sink, write_chrome

    with open_sink(tmp, gz=fmt == "json.gz") as f:
        return write_chrome(f, graph, sched, layout, protocol, dict(extra or {}), rank=rank)


def write_rank_timelines(pattern: str | os.PathLike, graph: OpGraph, sched: Schedule, protocol: str,
                         extra: dict | None = None) -> dict[str, int]:
    """One timeline per rank, ``{rank}`` in ``pattern`` replaced by the rank; returns events per
    file. All or nothing: the files are written to temporary names and renamed only when every
    one is complete (a failure leaves none of them)."""
    from contextlib import ExitStack

    paths = rank_paths(pattern, graph_ranks(graph))
    fmt = timeline_format(pattern)
    layout = build_layout(graph, sched, protocol)
    counts = {}
    with ExitStack() as stack:
        for r, p in paths.items():
            tmp = stack.enter_context(atomic_path(p))
            counts[p] = _write(tmp, fmt, graph, sched, layout, protocol, extra, r)
    return counts


__all__ = ["write_timeline", "write_rank_timelines", "timeline_facts", "check_timeline_target", "check_rank_targets",
           "is_rank_pattern", "rank_paths", "graph_ranks", "timeline_format", "build_layout", "bounce_occupancy",
           "PFTRACE_SUFFIXES"]
