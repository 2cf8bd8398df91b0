"""Timelines of a replay that trace viewers and analysis tools read (docs/architecture.md, "Timelines").

:func:`write_timeline` picks the format from the file name: ``.pftrace`` (or
``.perfetto-trace``) writes Perfetto's protobuf format (:mod:`replay.exporters.timeline.pftrace`, needs the
``perfetto`` package), anything else Chrome-trace JSON shaped like a PyTorch-profiler (Kineto)
trace (:mod:`replay.exporters.timeline.chrome`), gzip-compressed when the name ends in ``.gz``. Where
things go (processes, tracks, flows, steps, counters) is :mod:`replay.exporters.timeline.layout`. The file
is written atomically: a failed write leaves no file behind.
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
    ``overwrite``) or whose format cannot be written here (``.pftrace`` without ``perfetto``)."""
    from fastrack_core.outputs import check_output_path

    check_output_path(path, inputs, overwrite)
    if timeline_format(path) == "pftrace":
        from replay.exporters.timeline.pftrace import require_perfetto

        require_perfetto(path)


def write_timeline(path: str | os.PathLike, graph: OpGraph, sched: Schedule, protocol: str,
                   extra: dict | None = None) -> int:
    """Write the timeline of one replay to ``path`` atomically; returns the number of events.
    ``extra``: JSON-serialisable facts recorded in the header (trace name, model, preset, ...)."""
    fmt = timeline_format(path)
    if fmt == "pftrace":
        from replay.exporters.timeline.pftrace import require_perfetto

        require_perfetto(path)
    layout = build_layout(graph, sched, protocol)
    with atomic_path(path) as tmp:
        if fmt == "pftrace":
            from replay.exporters.timeline.pftrace import write_pftrace

            with open(tmp, "wb") as f:
                return write_pftrace(f, graph, sched, layout, protocol)
        from replay.exporters.timeline.chrome import open_text, write_chrome

        with open_text(tmp, gz=fmt == "json.gz") as f:
            return write_chrome(f, graph, sched, layout, protocol, dict(extra or {}))


__all__ = ["write_timeline", "timeline_facts", "check_timeline_target", "timeline_format", "build_layout", "bounce_occupancy", "PFTRACE_SUFFIXES"]
