"""``replay export-<name>``: replay a trace and hand the result to an exporter plug-in.

    replay export-gem5 TRACE --protocol fastrack [--preset h100-pcie] [--set pcie.latency_ns=900] -o DIR

One command per installed exporter (entry-point group ``fastrack.exporters``,
:mod:`replay.exporters.exporter`); ``replay/frontend/cli.py`` lists them next to its own commands. The order is
fixed: refuse an output that is not a directory, or a directory holding files the exporter does
not write (it would be replaced); let the exporter refuse what it does not support; replay; let
the exporter write into a new directory next to DIR, which replaces DIR only when every file is
written (:func:`fastrack_core.atomic.atomic_dir`): a failed export leaves DIR as it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import click

from fastrack_core.atomic import atomic_dir
from fastrack_core.cli_support import reports_errors
from fastrack_core.errors import ConfigError
from replay.pipeline.engine import Schedule
from replay.exporters.exporter import Exporter, ExportJob
from replay.graph import OpGraph
from replay.names import CAPTURED
from replay.frontend.options import complete_protocols, json_option, model_options
from replay.plugins import DEFAULT_MODEL
from replay.pipeline.results import ReplayResult

COMMAND_PREFIX = "export-"


def check_output(out_dir: str | Path, exporter: Exporter) -> None:
    """Refuse an output path that is a symbolic link (the rule of :mod:`fastrack_core.outputs`: a link is
    never replaced), exists and is not a directory, or is a directory holding something the
    exporter does not write (replacing it would delete that)."""
    out = Path(out_dir)
    if out.is_symlink():
        raise ConfigError(f"output {out} is a symbolic link; refusing to replace it")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output {out} exists and is not a directory")
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if p.name not in exporter.files)
        if foreign:
            raise ConfigError(f"output {out} holds {len(foreign)} entr{'y' if len(foreign) == 1 else 'ies'} that "
                              f"'export-{exporter.name}' does not write (first: {foreign[0]!r}); the export replaces "
                              "the whole directory: remove them or choose another directory")


def write_export(exporter: Exporter, out_dir: str | Path, graph: OpGraph, sched: Schedule, result: ReplayResult, *,
                 trace: str = "", protocol: str = CAPTURED, model_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write an already transformed and replayed graph through ``exporter`` into ``out_dir``, all
    or nothing. Returns the exporter's summary."""
    check_output(out_dir, exporter)
    job = ExportJob(graph=graph, schedule=sched, result=result, trace=str(trace), protocol=protocol,
                    model_info=model_info)
    with atomic_dir(out_dir) as tmp:
        return exporter.write(tmp, job)


def export(exporter: Exporter, trace: str | Path, out_dir: str | Path, protocol: str = CAPTURED,
           model: str = DEFAULT_MODEL, preset: str | None = None, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Replay ``trace`` under ``protocol`` and export it (see the module docstring)."""
    from replay.pipeline.run import replay_trace

    check_output(out_dir, exporter)
    exporter.check(protocol, model)
    rep = replay_trace(trace, protocol=protocol, model=model, preset=preset, overrides=overrides)
    return write_export(exporter, out_dir, rep.graph, rep.schedule, rep.result, trace=str(trace), protocol=protocol,
                        model_info=rep.result.model)


def command_for(exporter: Exporter) -> click.Command:
    """The ``replay export-<name>`` command of ``exporter``."""
    protocols = f"one of {', '.join(exporter.protocols)}" if exporter.protocols else "a protocol plug-in"

    @click.command(f"{COMMAND_PREFIX}{exporter.name}", help=exporter.description)
    @click.argument("trace", type=click.Path(dir_okay=False))
    @click.option("--protocol", default=CAPTURED, show_default=True, help=protocols, shell_complete=complete_protocols)
    @model_options
    @click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False),
                  help=f"Directory to write {', '.join(exporter.files)} into (replaced as a whole).")
    @json_option
    @reports_errors
    def command(trace, protocol, model, preset, overrides, out_dir, as_json):
        summary = export(exporter, trace, out_dir, protocol=protocol, model=model, preset=preset, overrides=overrides)
        if as_json:
            click.echo(json.dumps({"output": str(out_dir), "exporter": exporter.name, **summary}, sort_keys=True,
                                  default=str))
        else:
            click.echo(exporter.done_message(out_dir, summary))

    return command


__all__ = ["COMMAND_PREFIX", "check_output", "command_for", "export", "write_export"]
