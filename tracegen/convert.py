"""``tracegen convert``: import profiler traces into Parquet, in any installed input format.

The formats are the importers registered in the ``fastrack.importers`` entry-point group
(:mod:`tracegen.importers`: Kineto JSON, Nsight SQLite, PyTorch ET + Kineto, Chakra ET, and any
a plug-in adds); ``--format``'s choices and help, and the error for an input none recognises,
are built from that registry. Library entry point: :func:`convert`. The command wraps it with
one-line errors (exit code 2); the output is written atomically, so a failed run leaves no file
behind.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import click

from fastrack_core.cli_support import reports_errors
from fastrack_core.outputs import check_input_path, check_output_path
from tracegen.importers import AUTO, catalogue, choose, detect, formats_help, import_inputs

FORMATS_CHOICES = (AUTO, *(name for name, _ in catalogue()))  # "auto" + the installed formats, in detection order


@dataclass
class ConvertResult:
    path: Path
    num_ops: int
    num_ranks: int
    num_events: int
    seconds: float

    @property
    def events_per_s(self) -> float:
        return self.num_events / self.seconds if self.seconds > 0 else float("inf")

    def summary(self) -> str:
        return (
            f"wrote {self.path}: {self.num_ops} ops, {self.num_ranks} rank(s) "
            f"from {self.num_events} trace events in {self.seconds:.2f} s ({self.events_per_s:,.0f} events/s)"
        )


def detect_format(path: str) -> str:
    """The name of the format of one input: the first installed importer, in detection order, that
    recognises it (:func:`tracegen.importers.detect`)."""
    return detect(path)


def convert(inputs: Sequence[str | os.PathLike], output: str | os.PathLike, fmt: str = "auto",
            stage: Callable[[str], None] | None = None, keep_source_names: bool = False) -> ConvertResult:
    """Import ``inputs`` and write ``output``. Raises FastrackError subclasses on bad input.
    ``stage(name)`` is called as each stage starts (read, dependencies, write): progress bars.
    ``keep_source_names``: keep the input's file names and reported GPU name in the metadata
    (default: replaced, :func:`fastrack_core.provenance.scrub`)."""
    from fastrack_core.provenance import scrub
    from fastrack_core.traceio import distinct_values, write_trace

    t0 = time.perf_counter()
    stage = stage or (lambda _name: None)
    table, metadata, num_events = import_table(inputs, fmt, stage)
    metadata = scrub(metadata, output, keep_source_names)
    stage("write")
    path = write_trace(output, table, metadata)
    ranks = len(distinct_values(table.column("rank")))  # (Arrow buffers: no pyarrow.compute import)
    return ConvertResult(path=path, num_ops=table.num_rows, num_ranks=ranks, num_events=num_events,
                         seconds=time.perf_counter() - t0)  # fmt: skip


def import_table(inputs: Sequence[str | os.PathLike], fmt: str = AUTO,
                 stage: Callable[[str], None] | None = None):
    """Import ``inputs`` in memory: (trace table, trace metadata, events read), what :func:`convert`
    writes. ``fmt``: a format name, or ``auto`` to detect it (:func:`tracegen.importers.choose`)."""
    importer = choose(inputs, fmt)
    stage = stage or (lambda _name: None)
    stage(f"read {importer.name}")
    return import_inputs(importer, [str(p) for p in inputs], stage)


@click.command("convert")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("-o", "--output", required=True, type=click.Path(path_type=str), help="Parquet trace to write.")
@click.option("--format", "fmt", type=click.Choice(FORMATS_CHOICES), default=AUTO, show_default=True,
              help=formats_help())
@click.option("--overwrite", is_flag=True, help="Replace OUTPUT if it exists (never an input, a link or a non-file).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@click.option("--progress/--no-progress", default=None,
              help="Stage progress bar on stderr (default: when stderr is a terminal; never with -q).")
@click.option("--keep-source-names", is_flag=True,
              help="Keep the input files' names and the GPU name the profiler reported in the trace (default: the "
                   "trace is named after OUTPUT, inputs by position and type, the GPU by its product name).")
@reports_errors
def command(inputs: tuple[str, ...], output: str, fmt: str, overwrite: bool, as_json: bool,
            progress: bool | None, keep_source_names: bool) -> None:
    """Convert profiler trace(s) INPUT... into one Fastrack Parquet trace.

    Several Kineto files (or a directory of them) become one multi-rank trace.
    """
    for p in inputs:
        check_input_path(p, allow_dir=True)
    check_output_path(output, inputs, overwrite)
    from fastrack_core.cli_support import stages

    with stages(["read", "dependencies", "write"], "convert", progress) as stage:
        result = convert(list(inputs), output, fmt, stage=stage, keep_source_names=keep_source_names)
    if as_json:
        import json

        click.echo(json.dumps({"output": str(result.path), "ops": result.num_ops, "ranks": result.num_ranks,
                               "events": result.num_events, "seconds": round(result.seconds, 3)}, sort_keys=True))
    else:
        click.echo(result.summary())


__all__ = ["command", "convert", "detect_format", "ConvertResult"]
