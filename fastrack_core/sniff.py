"""What kind of file a path holds, from its first bytes: the magic numbers in one place, and the
hints a command gives when it is handed a file of a kind it does not take.

``tracegen convert`` takes profiler traces (Kineto JSON, Nsight Systems SQLite exports) and
writes Fastrack Parquet traces; every other command takes the Parquet traces. Handing one the
other's input is the commonest mistake, so both say what to run instead
(:func:`not_a_parquet_trace_hint`, :func:`not_a_profiler_trace_hint`). The hints name the kind of
file only, never its content.

How many bytes are read is part of each contract, never a silent default: the hints here read
:data:`HEAD_BYTES`, the length of the longest magic number of this module (a longer magic added
here lengthens it). The input formats of ``tracegen convert`` and ``replay`` do not use it: each
declares its own ``sniff_bytes`` and is handed exactly that many leading bytes (the importer
interface states it); :func:`plain_head` is what a sniffer of gzip-compressed input does with them.
"""

from __future__ import annotations

import os

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
PARQUET_MAGIC = b"PAR1"  # a Parquet file starts (and ends) with it
NSYS_REPORT_SUFFIXES = (".nsys-rep", ".qdrep")  # Nsight Systems' own report format (not readable here)
# the bytes :func:`head` reads by default: enough for every magic number above, and no more
HEAD_BYTES = max(len(GZIP_MAGIC), len(SQLITE_MAGIC), len(PARQUET_MAGIC))

NSYS_REPORT_HINT = ("this is an Nsight Systems report, not its SQLite export; "
                    "run `nsys export --type sqlite` on it first")
PARQUET_TRACE_HINT = ("is already a Fastrack trace (Parquet); it needs no conversion: "
                      "give it to replay or tracegen info as it is")
PARQUET_NOT_PROFILER_HINT = ("is a Parquet file, not a profiler trace; "
                             "tracegen convert takes Kineto JSON and Nsight Systems SQLite exports")


def head(path: str | os.PathLike, n: int = HEAD_BYTES) -> bytes:
    """The first ``n`` bytes of a file, or ``b""`` when it cannot be read (the caller's own
    checks report why)."""
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def plain_head(first: bytes) -> bytes:
    """A file's first bytes as its reader sees them: gzip-compressed bytes decompressed as far as
    they go (``b""`` when they are not valid gzip), anything else unchanged. ``first`` holding N
    bytes of the file gives at most what those N compressed bytes hold."""
    if not first.startswith(GZIP_MAGIC):
        return first
    import zlib

    try:
        return zlib.decompressobj(wbits=31).decompress(first)
    except zlib.error:
        return b""


def is_nsys_report(path: str | os.PathLike) -> bool:
    return os.fspath(path).lower().endswith(NSYS_REPORT_SUFFIXES)


def looks_like_json(first: bytes) -> bool:
    """Plain or gzip-compressed JSON (a Kineto / Chrome trace)."""
    return first.startswith(GZIP_MAGIC) or first.lstrip()[:1] in (b"{", b"[")


def not_a_parquet_trace_hint(path: str | os.PathLike) -> str | None:
    """For a file that is not Parquet: what it looks like and what to run instead, or None when
    it looks like nothing we know."""
    first = head(path)
    if first.startswith(PARQUET_MAGIC):
        return None
    if is_nsys_report(path):
        return (f"{NSYS_REPORT_HINT}, then `tracegen convert` the export into a Parquet trace")
    if first.startswith(SQLITE_MAGIC):
        return ("is an SQLite database (an Nsight Systems export?), not a Fastrack Parquet trace; "
                "convert it first: tracegen convert FILE -o TRACE.parquet")
    if looks_like_json(first):
        return ("is a JSON profiler trace (Kineto / Chrome trace), not a Fastrack Parquet trace; "
                "convert it first: tracegen convert FILE -o TRACE.parquet")
    return None


def not_a_profiler_trace_hint(path: str | os.PathLike) -> str | None:
    """For an input of ``tracegen convert``: why it cannot be converted, or None when it may be
    a profiler trace (an Nsight Systems report, or a Parquet file: already converted)."""
    if is_nsys_report(path):
        return NSYS_REPORT_HINT
    if head(path).startswith(PARQUET_MAGIC):
        return PARQUET_NOT_PROFILER_HINT
    return None


__all__ = ["GZIP_MAGIC", "SQLITE_MAGIC", "PARQUET_MAGIC", "HEAD_BYTES", "NSYS_REPORT_HINT",
           "PARQUET_TRACE_HINT", "PARQUET_NOT_PROFILER_HINT", "head", "plain_head",
           "is_nsys_report", "looks_like_json", "not_a_parquet_trace_hint", "not_a_profiler_trace_hint"]
