"""One replay, as a library call: trace -> graph -> protocol transform -> model -> engine -> result.

This is the single entry point the CLI, sweeps and tests use, so every front end computes the
same numbers the same way.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Mapping, Sequence

from fastrack_core.traceio import Trace, read_trace
from replay.pipeline.build import GRAPH_COLUMNS, build_graph
from replay.whatif.dataparallel import DEFAULT_BUCKET_MB, data_parallel_graph
from replay.pipeline.engine import Schedule, schedule
from replay.graph import OpGraph
from replay.names import CAPTURED, NONE
from replay.plugins import DEFAULT_MODEL
from replay.pipeline.results import ReplayResult, summarize
from replay.whatif.scale import check_scales, describe, scale_durations


@dataclass
class Replay:
    """Everything one replay produced (the graph and schedule too, for timelines)."""

    result: ReplayResult
    graph: OpGraph
    schedule: Schedule
    reads: frozenset[str] | None = None  # the parameters the transform read, when recorded (prepare's track_reads)


def replay_graph(graph: OpGraph, protocol: str = CAPTURED, model: str = DEFAULT_MODEL, preset: str | None = None,
                 overrides: Sequence[str] = (), trace_ops: int | None = None,
                 scales: Mapping[str, float] | None = None, track_reads: bool = False) -> Replay:
    """Replay an already built graph (lets sweeps build a trace's graph once). ``scales``
    ({kind: factor}, :mod:`replay.whatif.scale`) multiplies op durations before the protocol;
    ``track_reads``: see :func:`prepare`."""
    return replay_prepared(prepare(graph, protocol, model, preset, overrides, scales, track_reads), trace_ops)


@dataclass
class Prepared:
    """A graph transformed by its protocol, ready for the engine (:func:`prepare`). It holds no
    reference to the graph it was made from, so a caller that drops its own can free that one
    before the schedule is computed."""

    graph: OpGraph
    protocol: str
    model_info: dict | None
    scales: dict
    calibration: object | None
    options_given: bool = False  # --model/--preset/--set given (checked under `captured`, not applied)
    reads: frozenset[str] | None = None  # the parameters the transform read (track_reads: ranges.Reads), else None


def prepare(graph: OpGraph, protocol: str = CAPTURED, model: str = DEFAULT_MODEL, preset: str | None = None,
            overrides: Sequence[str] = (), scales: Mapping[str, float] | None = None,
            track_reads: bool = False) -> Prepared:
    """The first half of :func:`replay_graph`: what-if scaling and the protocol transform.
    ``track_reads``: record which model parameters the transform read
    (:func:`replay.pipeline.ranges.transform_tracked`), so a range study can adopt this replay
    instead of transforming and scheduling the preset point again."""
    scales = check_scales(scales)
    calibration = graph.calibration
    graph = scale_durations(graph, scales)
    model_info = None
    from replay.plugins import load_model, load_protocol

    # the model options are validated under every protocol, `captured` too (which applies none):
    # a typo in --set or a missing --preset is refused the same way whatever the protocol
    hw = load_model(model).from_preset(preset, overrides)
    reads = None
    if protocol != CAPTURED:
        shift = graph.rank_shift
        if track_reads:
            from replay.pipeline.ranges import transform_tracked

            graph, reads = transform_tracked(graph, protocol, hw)
        else:
            graph = load_protocol(protocol)(graph, hw)
        if shift.any() and not graph.rank_shift.any():  # (a transform's new graph keeps the ranks' clock
            graph = graph.replace(rank_shift=shift)      # alignment: the captured span is the protocol's too)
        model_info = {"model": model, "preset": hw.preset_name, "params": hw.params, "digest": hw.digest}
    return Prepared(graph=graph, protocol=protocol, model_info=model_info, scales=scales, calibration=calibration,
                    options_given=bool(preset or overrides or model != DEFAULT_MODEL), reads=reads)


def replay_prepared(prep: Prepared, trace_ops: int | None = None) -> Replay:
    """The second half of :func:`replay_graph`: schedule and summarize a :class:`Prepared` graph."""
    graph, protocol, scales, calibration = prep.graph, prep.protocol, prep.scales, prep.calibration
    sched = schedule(graph)
    result = summarize(graph, sched, protocol, trace_ops if trace_ops is not None else graph.n)
    result.model = prep.model_info
    result.scales = scales
    from replay.pipeline.consistency import take_warnings

    for warning in take_warnings():  # (what the consistency checks of the trace assumed: one line each)
        sys.stderr.write(f"warning: {warning}\n")
    if protocol == CAPTURED:
        result.notes.append("captured: every op keeps its measured duration; no hardware model applied"
                            + (" (the model options given were checked, not applied)" if prep.options_given else ""))
    if scales:
        result.notes.append(f"what-if: durations scaled ({describe(scales)}) before the protocol")
    if calibration is not None:
        result.calibration = calibration.to_dict()
        result.notes.extend(calibration.notes())
    return Replay(result=result, graph=graph, schedule=sched, reads=prep.reads)


@dataclass
class Reference:
    """What a replay under :data:`~replay.names.NONE` contributes to another protocol's report: its
    makespan, and its serving metrics when asked for (its graph and schedule are not kept)."""

    makespan_ns: int
    serving: dict | None
    setup: dict | None = None  # its one-time setup (replay.pipeline.results.setup_metrics), when asked for
    kept: Replay | None = None  # the whole replay, when asked for (a range study adopts it)


def replay_reference(graph: OpGraph, model: str = DEFAULT_MODEL, preset: str | None = None,
                     overrides: Sequence[str] = (), trace_ops: int | None = None,
                     scales: Mapping[str, float] | None = None, serving: bool = False,
                     setup: bool = False, windowed: bool = False) -> Reference:
    """Replay ``graph`` under :data:`~replay.names.NONE` and keep only what a slowdown needs, so its
    graph and schedule are freed before the protocol's own replay allocates."""
    rep = replay_graph(graph, NONE, model, preset, overrides, trace_ops=trace_ops, scales=scales)
    served = None
    if serving:
        from replay.pipeline.serving import serving_metrics

        served = serving_metrics(rep.graph, rep.schedule)
    split = None
    if setup:
        from replay.pipeline.results import setup_metrics

        split = setup_metrics(rep.graph, rep.schedule, windowed)
    return Reference(makespan_ns=rep.result.makespan_ns, serving=served, setup=split)


def open_trace(path: str | os.PathLike, columns: Sequence[str] | None = None) -> Trace:
    """A Parquet trace, or a file of an installed input format (the ``fastrack.importers`` entry
    points that ``tracegen convert`` reads too, :func:`replay.plugins.importer_for`) imported in
    memory by its ``load``, which refuses, saying to convert first, a format replay does not read
    directly (all but Kineto JSON, of the shipped ones). Anything else: the Parquet reader's
    one-line error, with a hint to convert the file first. ``columns``: read only these of a
    Parquet trace."""
    from fastrack_core.errors import TraceFormatError
    from replay.plugins import importer_for

    path = str(path)
    if os.path.isfile(path):  # (FIFOs, devices and missing files: the reader's own refusal)
        importer = importer_for(path)
        if importer is not None:  # imported in memory: the input's own names stay out (fastrack_core.provenance)
            from fastrack_core.provenance import scrub

            trace = importer.load(path)
            trace.metadata = scrub(trace.metadata, None)
            return trace
    try:
        return read_trace(path, columns=list(columns) if columns is not None else None)
    except TraceFormatError as exc:
        if "not a Parquet file" in str(exc):
            raise TraceFormatError(f"{exc.args[0]}; if it is a profiler trace of another format, convert it first "
                                   "(tracegen convert FILE -o trace.parquet)", path=path) from None
        raise


def load_graph(trace: str | os.PathLike | Trace) -> tuple[OpGraph, Trace]:
    """The graph of a trace, and the trace. A trace read here from a file is read with only the
    columns the graph needs and comes back without its table (``num_ops``, ``metadata`` and
    ``path`` stay), so its memory is freed once the graph is built."""
    from replay.pipeline.consistency import check_trace

    if isinstance(trace, Trace):
        graph = build_graph(trace)
        check_trace(graph, trace)  # a trace that contradicts itself: refused, or one warning (consistency.py)
        return graph, trace
    read = open_trace(trace, columns=GRAPH_COLUMNS)
    graph = build_graph(read)
    check_trace(graph, read)
    return graph, read.drop_columns()


def replay_trace(trace: str | os.PathLike | Trace, protocol: str = CAPTURED, model: str = DEFAULT_MODEL,
                 preset: str | None = None, overrides: Sequence[str] = (),
                 scales: Mapping[str, float] | None = None) -> Replay:
    graph, tr = load_graph(trace)
    return replay_graph(graph, protocol, model, preset, overrides, trace_ops=tr.num_ops, scales=scales)


def replay_data_parallel(trace: str | os.PathLike | Trace, world: int, bucket_mb: float = DEFAULT_BUCKET_MB,
                         protocol: str = NONE, model: str = DEFAULT_MODEL, preset: str | None = None,
                         overrides: Sequence[str] = ()) -> Replay:
    """:func:`replay_trace` of ``trace`` turned into ``world`` data-parallel ranks (:mod:`replay.whatif.dataparallel`)."""
    graph, tr = load_graph(trace)
    rep = replay_graph(data_parallel_graph(graph, world, bucket_mb, [protocol]), protocol, model, preset, overrides,
                       trace_ops=tr.num_ops)
    rep.result.notes.append(f"data-parallel what-if: {world} rank(s), DDP buckets of {bucket_mb:g} MB")
    return rep
