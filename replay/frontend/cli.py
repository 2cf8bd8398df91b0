"""``replay``: replay a trace under a protocol and a hardware model, and report.

``replay [OPTIONS] TRACE`` is short for ``replay run [OPTIONS] TRACE``; other sub-commands
(compare, sweep, ...) live in their own modules and are loaded on demand.
"""

from __future__ import annotations

import json

import click

from fastrack_core.version import __version__
from fastrack_core.cli_support import VERBOSITY_FLAGS, LazyGroup, fail, reports_errors, verbosity_options
from fastrack_core.errors import FastrackError
from replay.names import CAPTURED, NONE
from replay.frontend.options import (complete_protocols, data_parallel_options, json_option, model_options,
                                     range_jobs_option, scale_option, serving_option)
from replay.frontend.report import format_summary

COMMANDS = {
    "compare": "replay.frontend.compare:command",
    "sweep": "replay.frontend.study.sweep:command",
    "sensitivity": "replay.frontend.study.sensitivity:command",
    "plot": "replay.frontend.study.plot:command",
    "list": "replay.frontend.listing:command",
    "calibrate": "replay.frontend.calibrate:command",
    "explain": "replay.frontend.explain:command",
    "serve": "replay.frontend.serve:command",
}


class DefaultRunGroup(LazyGroup):
    """Treats ``replay [OPTIONS] TRACE`` as ``replay run [OPTIONS] TRACE``, and adds
    ``export-<name>`` for every installed exporter plug-in (``fastrack.exporters``, replay/frontend/export.py)."""

    def list_commands(self, ctx):
        from replay.frontend.export import COMMAND_PREFIX
        from replay.exporters.exporter import available_exporters

        return sorted(set(super().list_commands(ctx)) | {COMMAND_PREFIX + n for n in available_exporters()})

    def get_command(self, ctx, name):
        from replay.frontend.export import COMMAND_PREFIX, command_for
        from replay.exporters.exporter import available_exporters, load_exporter

        cmd = super().get_command(ctx, name)  # a command of our own wins over a plug-in's
        if cmd is None and name.startswith(COMMAND_PREFIX) and name[len(COMMAND_PREFIX):] in available_exporters():
            try:
                cmd = command_for(load_exporter(name[len(COMMAND_PREFIX):]))
            except FastrackError as exc:
                fail(str(exc))
        return cmd

    def parse_args(self, ctx, args):
        lead = 0  # -q/-v belong to the group: look past them for the sub-command
        while lead < len(args) and args[lead] in VERBOSITY_FLAGS:
            lead += 1
        rest = args[lead:]
        if rest and rest[0] not in self.list_commands(ctx) and rest[0] not in ("-h", "--help", "--version"):
            args = [*args[:lead], "run", *rest]
        return super().parse_args(ctx, args)


@click.group(cls=DefaultRunGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="replay")
@verbosity_options
def main() -> None:
    """Replay Fastrack traces through a hardware model under a protocol.

    \b
    replay --protocol captured TRACE     fidelity check: measured durations
    replay --protocol fastrack TRACE     H100 TEE model, Fastrack protocol
    replay compare TRACE --protocols none,baseline,fastrack
    replay list protocols|presets|params

    Shell completion (commands, options, protocol and preset names), bash:
    eval "$(_REPLAY_COMPLETE=bash_source replay)"; zsh: zsh_source; fish: fish_source.
    """


@main.command("run")
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--protocol", default=CAPTURED, show_default=True, shell_complete=complete_protocols,
              help=f"{CAPTURED} (measured durations), or a protocol plug-in: {NONE}, baseline, fastrack, ...")
@model_options
@json_option
@click.option("--timeline", type=click.Path(dir_okay=False),
              help="Write a timeline: Kineto-shaped Chrome-trace JSON (Perfetto, chrome://tracing, HTA, "
                   "TraceLens; gzip when it ends in .gz) or Perfetto protobuf (.pftrace); '{rank}' in the name "
                   "writes one file per rank.")
@click.option("--overwrite", is_flag=True, help="Replace the --timeline file if it exists (never the trace, "
                                                "a link or a non-file).")
@click.option("--reference/--no-reference", default=True, show_default=True,
              help=f"Also replay under '{NONE}' (same model) to report the slowdown.")
@data_parallel_options
@scale_option
@serving_option
@click.option("--ranges/--no-ranges", default=False, show_default=True,
              help="Also report the range of the result over the preset's assumption ranges (one-at-a-time ends "
                   "and two corners: about 2 replays per ranged parameter the protocol reads; docs/model.md).")
@range_jobs_option
@reports_errors
def run_command(trace, protocol, model, preset, overrides, as_json, timeline, overwrite, reference, data_parallel,
                bucket_mb, scale, serving, ranges, range_jobs):
    """Replay TRACE under PROTOCOL and report time, where it went, and resources."""
    from fastrack_core.memory import keep_freed_heap, release_when_large
    from replay.frontend.report import setup_report
    from replay.pipeline.results import JSON_DIGITS, setup_metrics, slowdown
    from replay.pipeline.run import load_graph, prepare, replay_prepared
    from replay.pipeline.serving import format_serving, has_request_markers, overhead, require_markers, serving_metrics
    from replay.whatif.scale import parse_scales

    keep_freed_heap()  # (this process's allocator: fewer page faults on its arrays, fastrack_core.memory)
    scales = parse_scales(scale)
    if timeline:  # refuse a bad target before any work (fastrack_core.outputs)
        from fastrack_core.outputs import check_input_path
        from replay.exporters.timeline import (check_rank_targets, check_timeline_target, graph_ranks,
                                               is_rank_pattern, timeline_facts, write_timeline)

        check_input_path(trace)
        check_timeline_target(timeline, [trace], overwrite)
    graph, tr = load_graph(trace)
    if serving:
        require_markers(graph, trace)
    serving = has_request_markers(graph)
    if data_parallel is not None:  # what-if: a single-GPU training trace on N DDP ranks (docs/multi-gpu.md)
        from replay.whatif.dataparallel import data_parallel_graph

        graph = data_parallel_graph(graph, data_parallel, bucket_mb, [protocol])
    if timeline and is_rank_pattern(timeline):  # one file per rank: each checked once the ranks are known
        rank_files = check_rank_targets(timeline, graph_ranks(graph), [trace], overwrite)
    # memory: the reference first, keeping only its figures; then the protocol's transform, after
    # which the trace graph is dropped before the schedule allocates (docs/performance.md)
    ref = None
    window = tr.metadata.get("window") if isinstance(tr.metadata.get("window"), dict) else None
    windowed = window is not None
    if protocol not in (CAPTURED, NONE) and reference:
        from replay.frontend.explain import reference_with_facts  # (the reference and the plain-words summary)

        ref, cc_facts = reference_with_facts(graph, protocol, model, preset, overrides, trace_ops=tr.num_ops,
                                             scales=scales, serving=serving, setup=True, windowed=windowed,
                                             keep=ranges)
        release_when_large()  # (the reference's pages, before the protocol's transform allocates)
    prep = prepare(graph, protocol, model, preset, overrides, scales, track_reads=ranges)
    study = None
    if ranges:  # (keeps the trace graph: every range point re-transforms it; replay/pipeline/ranges.py)
        from replay.pipeline.ranges import RangeStudy

        study = RangeStudy(graph, model, preset, overrides, scales, reference=ref is not None, jobs=range_jobs)
        if ref is not None and ref.kept is not None:
            study.adopt(NONE, ref.kept)  # (the reference's replay: not transformed and scheduled again)
            ref.kept = None
    del graph
    release_when_large()  # (the trace graph's pages, before the schedule allocates)
    rep = replay_prepared(prep, trace_ops=tr.num_ops)
    del prep
    if timeline:
        write_timeline(timeline, rep.graph, rep.schedule, protocol, extra=timeline_facts(rep.result, tr))
        if is_rank_pattern(timeline) and len(rank_files) == 1:
            click.echo(f"note: the replay has one rank; {{rank}} gave one timeline, {next(iter(rank_files.values()))}",
                       err=True)
    out = rep.result.to_dict()
    out["trace"] = str(trace)
    out["emulated"] = bool(tr.metadata.get("emulated", False))
    out["trace_source"] = {k: tr.metadata.get(k) for k in ("source_format", "gpu_model", "device_model", "trace_name")}
    if serving:
        out["serving"] = serving_metrics(rep.graph, rep.schedule)
    mine = setup_metrics(rep.graph, rep.schedule, windowed)
    out["setup"] = setup_report(mine, ref, rep.result.makespan_ns, window)
    if ref is not None:
        from replay.frontend.explain import run_summary

        out["cc"] = run_summary(cc_facts, rep, protocol, windowed, setup=mine if rep.graph.n else None)
        out["reference"] = {"protocol": NONE, "makespan_ns": ref.makespan_ns}
        out["slowdown_vs_none"] = slowdown(rep.result.makespan_ns, ref.makespan_ns, JSON_DIGITS)
        if serving and out["serving"]["complete_requests"]:
            out["serving"]["overhead_vs_none"] = overhead(out["serving"], ref.serving)
    if study is not None:
        study.adopt(protocol, rep)
        out.update(study.protocol_range(protocol, rep.result.makespan_ns, None if ref is None else ref.makespan_ns,
                                        rep.graph, rep.schedule))
        del study
    if as_json:
        click.echo(json.dumps(out, sort_keys=True))
    else:
        click.echo(format_summary(out))
        if ranges:
            from replay.pipeline.ranges import range_line

            click.echo(range_line(protocol, out, out["makespan_ns"], out.get("slowdown_vs_none")))
        if serving:
            click.echo(format_serving(out["serving"], out["serving"].get("overhead_vs_none")))


if __name__ == "__main__":
    main()
