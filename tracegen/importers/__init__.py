"""Trace importers: each turns one foreign format into raw ops (:mod:`tracegen.deps`) + metadata.

Every importer module exposes ``sniff(path) -> bool`` and ``read(paths) -> RawImport``
(:mod:`tracegen.importers.common` states the shape); :data:`FORMATS` maps each format name to
that pair, in the order formats are tried when detecting one. :func:`refuse_unconvertible`
turns away, with a hint, the inputs that are known not to be profiler traces (an Nsight Systems
report before its SQLite export, a Parquet trace that is already converted).
"""

from __future__ import annotations

import importlib
import os
from typing import Callable, NamedTuple, Sequence

from fastrack_core.errors import TraceFormatError
from fastrack_core.sniff import PARQUET_NOT_PROFILER_HINT, PARQUET_TRACE_HINT, not_a_profiler_trace_hint
from tracegen.importers import chakra, kineto, pytorch_et
from tracegen.importers.common import RawImport


class Importer(NamedTuple):
    sniff: Callable[[str | os.PathLike], bool]
    read: Callable[[Sequence[str | os.PathLike]], RawImport]


def _deferred(module: str) -> Importer:
    """The importer of ``tracegen.importers.<module>``, imported on first use: the Nsight one needs
    pandas, which a Kineto convert never loads (its ``sniff`` runs only after Kineto's declined)."""

    def sniff(path: str | os.PathLike) -> bool:
        return importlib.import_module(f"{__name__}.{module}").sniff(path)

    def read(paths: Sequence[str | os.PathLike]) -> RawImport:
        return importlib.import_module(f"{__name__}.{module}").read(paths)

    return Importer(sniff, read)


FORMATS: dict[str, Importer] = {
    "chakra": Importer(chakra.sniff, chakra.read),  # MLCommons Chakra ET protobuf (plain/gzip, or a directory of .et)
    "pytorch-et": Importer(pytorch_et.sniff, pytorch_et.read),  # PyTorch ET JSON + the Kineto trace of the same run
    "kineto": Importer(kineto.sniff, kineto.read),  # PyTorch profiler JSON (plain/gzip, or a directory)
    "nsys": _deferred("nsys"),  # Nsight Systems SQLite export
}



def refuse_unconvertible(path: str | os.PathLike) -> None:
    """Raise :class:`TraceFormatError` with what to do instead when ``path`` (a file) is known
    not to be importable whatever the format asked for: an Nsight Systems report (``.nsys-rep``:
    export it to SQLite first) or a Parquet file (already a trace: no conversion needed)."""
    if os.path.isdir(path):
        return
    hint = not_a_profiler_trace_hint(path)
    if hint == PARQUET_NOT_PROFILER_HINT:
        from fastrack_core.errors import FastrackError
        from fastrack_core.traceio import read_metadata

        try:
            read_metadata(path)
            hint = PARQUET_TRACE_HINT
        except FastrackError:
            pass
    if hint:
        raise TraceFormatError(hint, path=str(path))


__all__ = ["FORMATS", "Importer", "RawImport", "refuse_unconvertible"]
