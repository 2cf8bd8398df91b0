"""``replay``: replay a trace under a protocol and a hardware model, and report.

``replay [OPTIONS] TRACE`` is short for ``replay run [OPTIONS] TRACE``; other sub-commands
(compare, sweep, ...) live in their own modules and are loaded on demand.
"""

from __future__ import annotations

import json

import click

from fastrack import __version__
from fastrack.cli_support import LazyGroup, reports_errors
from replay.report import format_summary

COMMANDS = {
    "compare": "replay.compare:command",
    "export-gem5": "replay.export_gem5:command",
    "sweep": "replay.sweep:command",
    "sensitivity": "replay.sensitivity:command",
    "plot": "replay.plot:command",
}


class DefaultRunGroup(LazyGroup):
    """Treats ``replay [OPTIONS] TRACE`` as ``replay run [OPTIONS] TRACE``."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.list_commands(ctx) and args[0] not in ("-h", "--help", "--version"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group(cls=DefaultRunGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="replay")
def main() -> None:
    """Replay Fastrack traces through a hardware model under a protocol.

    \b
    replay --protocol captured TRACE     fidelity check: measured durations
    replay --protocol fastrack TRACE     H100 TEE model, Fastrack protocol
    replay compare TRACE --protocols none,baseline,fastrack
    """


def model_options(func):
    func = click.option("--model", default="h100", show_default=True, help="Hardware model plug-in name.")(func)
    func = click.option("--preset", default=None, help="Preset name or TOML file (default: the model's default).")(func)
    func = click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
                        help="Override one model parameter (repeatable).")(func)
    return func


def scale_option(func):
    return click.option("--scale", "scale", multiple=True, metavar="KIND=FACTOR",
                        help="What-if: multiply the durations of KIND (kernel, memcpy, host, collective) by FACTOR "
                             "before the protocol (repeatable).")(func)


def data_parallel_options(func):
    func = click.option("--data-parallel", type=int, default=None, metavar="N",
                        help="What-if: replay a single-GPU training trace as N DDP ranks (docs/multi-gpu.md).")(func)
    func = click.option("--bucket-mb", type=float, default=25.0, show_default=True,
                        help="DDP gradient bucket size for --data-parallel, MB (MiB, as bucket_cap_mb).")(func)
    return func


@main.command("run")
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--protocol", default="captured", show_default=True,
              help="captured (measured durations), or a protocol plug-in: none, baseline, fastrack, ...")
@model_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the summary.")
@click.option("--timeline", type=click.Path(dir_okay=False), help="Write a Perfetto/chrome://tracing JSON timeline.")
@click.option("--reference/--no-reference", default=True, show_default=True,
              help="Also replay under 'none' (same model) to report the slowdown.")
@data_parallel_options
@scale_option
@reports_errors
def run_command(trace, protocol, model, preset, overrides, as_json, timeline, reference, data_parallel, bucket_mb,
                scale):
    """Replay TRACE under PROTOCOL and report time, where it went, and resources."""
    from replay.run import load_graph, replay_graph
    from replay.timeline import write_timeline
    from replay.whatif import parse_scales

    scales = parse_scales(scale)
    graph, tr = load_graph(trace)
    if data_parallel is not None:  # what-if: a single-GPU training trace on N DDP ranks (docs/multi-gpu.md)
        from replay.dataparallel import data_parallel_graph

        graph = data_parallel_graph(graph, data_parallel, bucket_mb, [protocol])
    rep = replay_graph(graph, protocol, model, preset, overrides, trace_ops=tr.num_ops, scales=scales)
    if timeline:
        write_timeline(timeline, rep.graph, rep.schedule, protocol)
    out = rep.result.to_dict()
    out["trace"] = str(trace)
    out["emulated"] = bool(tr.metadata.get("emulated", False))
    out["trace_source"] = {k: tr.metadata.get(k) for k in ("source_format", "gpu_model", "device_model", "trace_name")}
    if protocol not in ("captured", "none") and reference:
        ref = replay_graph(graph, "none", model, preset, overrides, trace_ops=tr.num_ops, scales=scales).result
        out["reference"] = {"protocol": "none", "makespan_ns": ref.makespan_ns}
        out["slowdown_vs_none"] = round(rep.result.makespan_ns / ref.makespan_ns, 6) if ref.makespan_ns else None
    if as_json:
        click.echo(json.dumps(out, sort_keys=True))
    else:
        click.echo(format_summary(out))


if __name__ == "__main__":
    main()
