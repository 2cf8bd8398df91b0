"""``tracegen convert``: import profiler traces (Kineto JSON, Nsight SQLite) into a Parquet trace.

Library entry point: :func:`convert`. The command wraps it with one-line errors (exit code 2);
the output is written atomically, so a failed run leaves no file behind.
"""

from __future__ import annotations

import importlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import click

from fastrack.cli_support import reports_errors
from fastrack.errors import TraceFormatError

FORMATS = ("auto", "kineto", "nsys")


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
    """'kineto' or 'nsys' from the file's first bytes (directories: Kineto rank files)."""
    from tracegen.importers.kineto import GZIP_MAGIC, SQLITE_MAGIC, sniff

    if os.path.isdir(path):
        return "kineto"
    head = sniff(path)
    if not head:
        raise TraceFormatError("empty file", path=path)
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if head.startswith(GZIP_MAGIC) or head.lstrip()[:1] in (b"{", b"["):
        return "kineto"
    raise TraceFormatError("unknown input format: neither Kineto JSON (plain or gzip) nor Nsight SQLite", path=path)


def _read_nsys(paths: Sequence[str]):
    try:
        mod = importlib.import_module("tracegen.importers.nsys")
    except ModuleNotFoundError as exc:
        if exc.name in ("tracegen.importers.nsys",):
            raise TraceFormatError(
                "Nsight SQLite import is not available in this installation (module tracegen.importers.nsys is missing)",
                path=paths[0],
            ) from None
        raise
    import pandas as pd

    raws, metas, seen = [], [], {}
    for p in paths:
        raw, meta = mod.read_nsys(p)
        for r in sorted(set(raw["rank"].tolist()) if "rank" in raw and len(raw) else {0}):
            if r in seen:
                raise TraceFormatError(f"rank {r} appears twice: in {seen[r]} and in {p}", path=p)
            seen[r] = p
        raws.append(raw)
        metas.append(dict(meta or {}))
    raw = pd.concat(raws, ignore_index=True, sort=False) if len(raws) > 1 else raws[0]
    meta = metas[0]
    if len(metas) > 1:
        meta["source_files"] = [Path(p).name for p in paths]
        meta["ranks"] = sorted(seen)
    return raw, meta, len(raw)


def convert(inputs: Sequence[str | os.PathLike], output: str | os.PathLike, fmt: str = "auto") -> ConvertResult:
    """Import ``inputs`` and write ``output``. Raises FastrackError subclasses on bad input."""
    import pyarrow.compute as pc

    from fastrack.traceio import write_trace
    from tracegen.dependencies import derive_dependencies

    t0 = time.perf_counter()
    inputs = [str(p) for p in inputs]
    if not inputs:
        raise TraceFormatError("no input files")
    if fmt not in FORMATS:
        raise TraceFormatError(f"unknown format '{fmt}', expected one of {', '.join(FORMATS)}")
    if fmt == "auto":
        kinds = {p: detect_format(p) for p in inputs}
        if len(set(kinds.values())) > 1:
            desc = ", ".join(f"{Path(p).name} ({k})" for p, k in kinds.items())
            raise TraceFormatError(f"inputs mix formats: {desc}")
        fmt = next(iter(kinds.values()))
    label = inputs[0] if len(inputs) == 1 else None
    if fmt == "kineto":
        from tracegen.importers.kineto import load_kineto

        imp = load_kineto(inputs)
        raw, meta, events = imp.raw, imp.metadata, imp.num_events
        if len(imp.files) == 1:
            label = imp.files[0]
    else:
        for p in inputs:
            if os.path.isdir(p):
                raise TraceFormatError("is a directory; --format nsys takes SQLite files", path=p)
            if not os.path.exists(p):
                raise TraceFormatError("no such file", path=p)
        raw, meta, events = _read_nsys(inputs)
    table = derive_dependencies(raw, path=label)
    path = write_trace(output, table, meta)
    ranks = len(pc.unique(table.column("rank")))
    return ConvertResult(path=path, num_ops=table.num_rows, num_ranks=ranks, num_events=events,
                         seconds=time.perf_counter() - t0)  # fmt: skip


@click.command("convert")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=str), help="Parquet trace to write.")
@click.option(
    "--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True,
    help="Input format; auto detects Kineto JSON (plain/gzip), Nsight SQLite and directories of rank files.",
)  # fmt: skip
@reports_errors
def command(inputs: tuple[str, ...], output: str, fmt: str) -> None:
    """Convert profiler trace(s) INPUT... into one Fastrack Parquet trace.

    Several Kineto files (or a directory of them) become one multi-rank trace.
    """
    result = convert(list(inputs), output, fmt)
    click.echo(result.summary())


__all__ = ["command", "convert", "detect_format", "ConvertResult"]
