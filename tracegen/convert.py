"""``tracegen convert``: import traces (Kineto JSON, Nsight SQLite, PyTorch ET + Kineto, Chakra ET) into Parquet.

Library entry point: :func:`convert`. The command wraps it with one-line errors (exit code 2);
the output is written atomically, so a failed run leaves no file behind.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import click

from fastrack_core.cli_support import reports_errors
from fastrack_core.errors import TraceFormatError
from fastrack_core.outputs import check_input_path, check_output_path

FORMATS_CHOICES = ("auto", "chakra", "pytorch-et", "kineto", "nsys")  # "auto" + the keys of tracegen.importers.FORMATS


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
    """The name of the format (a key of :data:`tracegen.importers.FORMATS`) of one input: the
    first whose ``sniff`` accepts it (directories: Kineto rank files)."""
    from tracegen.importers import FORMATS, refuse_unconvertible
    from tracegen.importers.common import read_head

    check_input_path(path, allow_dir=True)
    refuse_unconvertible(path)
    if not os.path.isdir(path) and not read_head(path):
        raise TraceFormatError("empty file", path=path)
    for name, importer in FORMATS.items():
        if importer.sniff(path):
            return name
    raise TraceFormatError("unknown input format: neither Kineto JSON (plain or gzip) nor Nsight SQLite", path=path)


def convert(inputs: Sequence[str | os.PathLike], output: str | os.PathLike, fmt: str = "auto",
            stage: Callable[[str], None] | None = None) -> ConvertResult:
    """Import ``inputs`` and write ``output``. Raises FastrackError subclasses on bad input.
    ``stage(name)`` is called as each stage starts (read, dependencies, write): progress bars."""
    from fastrack_core.traceio import distinct_values, write_trace

    t0 = time.perf_counter()
    stage = stage or (lambda _name: None)
    table, metadata, num_events = import_table(inputs, fmt, stage)
    stage("write")
    path = write_trace(output, table, metadata)
    ranks = len(distinct_values(table.column("rank")))  # (Arrow buffers: no pyarrow.compute import)
    return ConvertResult(path=path, num_ops=table.num_rows, num_ranks=ranks, num_events=num_events,
                         seconds=time.perf_counter() - t0)  # fmt: skip


def import_table(inputs: Sequence[str | os.PathLike], fmt: str = "auto",
                 stage: Callable[[str], None] | None = None):
    """Import ``inputs`` in memory: (trace table, trace metadata, events read). What
    :func:`convert` writes, and what ``replay`` reads through :data:`REPLAY_IMPORTER`."""
    from tracegen.deps import derive_dependencies
    from tracegen.importers import FORMATS, refuse_unconvertible

    inputs = [str(p) for p in inputs]
    if not inputs:
        raise TraceFormatError("no input files")
    if fmt not in FORMATS_CHOICES:
        raise TraceFormatError(f"unknown format '{fmt}', expected one of {', '.join(FORMATS_CHOICES)}")
    for p in inputs:  # a FIFO or a device would block the reader: refuse it up front
        check_input_path(p, allow_dir=True)
        refuse_unconvertible(p)  # a .nsys-rep or a Parquet trace, whatever --format says
    if fmt == "auto":
        kinds = {p: detect_format(p) for p in inputs}
        if set(kinds.values()) == {"pytorch-et", "kineto"}:  # a PyTorch ET is read with its Kineto trace
            kinds = {p: "pytorch-et" for p in inputs}
        if len(set(kinds.values())) > 1:
            desc = ", ".join(f"{Path(p).name} ({k})" for p, k in kinds.items())
            raise TraceFormatError(f"inputs mix formats: {desc}")
        fmt = next(iter(kinds.values()))
    stage = stage or (lambda _name: None)
    stage(f"read {fmt}")
    imp = FORMATS[fmt].read(inputs)
    label = imp.files[0] if len(imp.files) == 1 else inputs[0] if len(inputs) == 1 else None
    stage("dependencies")
    table = imp.table if imp.table is not None else derive_dependencies(imp.raw, path=label)
    return table, imp.metadata, imp.num_events


class KinetoForReplay:
    """The ``fastrack.importers`` plug-in ``kineto`` (pyproject.toml): lets ``replay`` read a Kineto
    JSON trace (.json / .json.gz) directly, in memory, exactly as ``tracegen convert`` would
    write it (replay never imports tracegen by name; it finds this object by entry point)."""

    name = "kineto"
    description = "Kineto / PyTorch-profiler JSON (.json, .json.gz)"

    def sniff(self, path: str | os.PathLike) -> bool:
        from tracegen.importers import FORMATS

        return FORMATS["kineto"].sniff(str(path))

    def load(self, path: str | os.PathLike):
        """The trace of ``path`` as a :class:`fastrack_core.traceio.Trace` (validated, metadata cleaned)."""
        from fastrack_core.traceio import trace_in_memory

        table, metadata, _ = import_table([path], "kineto")
        return trace_in_memory(table, metadata, str(path))


REPLAY_IMPORTER = KinetoForReplay()


@click.command("convert")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("-o", "--output", required=True, type=click.Path(path_type=str), help="Parquet trace to write.")
@click.option(
    "--format", "fmt", type=click.Choice(FORMATS_CHOICES), default="auto", show_default=True,
    help="Input format; auto detects Kineto JSON (plain/gzip), Nsight SQLite, PyTorch ET (with its Kineto trace), "
         "Chakra ET (.et) and directories of rank files.",
)  # fmt: skip
@click.option("--overwrite", is_flag=True, help="Replace OUTPUT if it exists (never an input, a link or a non-file).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@click.option("--progress/--no-progress", default=None,
              help="Stage progress bar on stderr (default: when stderr is a terminal; never with -q).")
@reports_errors
def command(inputs: tuple[str, ...], output: str, fmt: str, overwrite: bool, as_json: bool,
            progress: bool | None) -> None:
    """Convert profiler trace(s) INPUT... into one Fastrack Parquet trace.

    Several Kineto files (or a directory of them) become one multi-rank trace.
    """
    for p in inputs:
        check_input_path(p, allow_dir=True)
    check_output_path(output, inputs, overwrite)
    from fastrack_core.cli_support import stages

    with stages(["read", "dependencies", "write"], "convert", progress) as stage:
        result = convert(list(inputs), output, fmt, stage=stage)
    if as_json:
        import json

        click.echo(json.dumps({"output": str(result.path), "ops": result.num_ops, "ranks": result.num_ranks,
                               "events": result.num_events, "seconds": round(result.seconds, 3)}, sort_keys=True))
    else:
        click.echo(result.summary())


__all__ = ["command", "convert", "detect_format", "ConvertResult"]
