"""What every importer shares: the shape of its result, a file's first bytes, the magic numbers.

Every importer module exposes two functions of the same shape, which its registered
:class:`tracegen.importers.Importer` calls:

* ``sniff(path) -> bool``: whether ``path`` (a file, or a directory where the format takes one)
  holds this format, judged from the first bytes (:func:`read_head`);
* ``read(paths) -> RawImport``: the raw ops of all ``paths`` (the frame contract of
  :mod:`tracegen.deps`), the whitelisted metadata, the number of records read and the files read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastrack_core.errors import TraceFormatError
from fastrack_core.outputs import check_input_path

from fastrack_core.sniff import GZIP_MAGIC, HEAD_BYTES, SQLITE_MAGIC  # the magic numbers live in one place

if TYPE_CHECKING:
    from tracegen.deps.raw import RawInput


@dataclass
class RawImport:
    """What an importer's ``read`` returns."""

    raw: RawInput  # raw ops (tracegen.deps contract: a pandas DataFrame or a RawColumns)
    metadata: dict[str, Any]  # whitelisted metadata
    num_events: int  # records read from the input(s)
    files: list[str]  # the files read (a directory expanded)
    # a finished schema-v1 table, for formats that state their dependencies (Chakra ET): the
    # converter writes it as it is instead of deriving dependencies from ``raw``
    table: Any = None


def read_head_plain(path: str | os.PathLike, n: int) -> bytes:
    """The first bytes of a file as the reader will see them: a gzip file's first ``n`` bytes
    decompressed (as far as they go), anything else its first ``n`` bytes; b"" for damaged gzip."""
    head = read_head(path, n)
    if head.startswith(GZIP_MAGIC):
        import zlib

        try:
            return zlib.decompressobj(wbits=31).decompress(head)
        except zlib.error:
            return b""
    return head


def read_head(path: str | os.PathLike, n: int = HEAD_BYTES) -> bytes:
    """The first ``n`` bytes of a regular file (fewer if it is shorter). Raises
    :class:`TraceFormatError` when the path is missing, is not a regular file or cannot be read."""
    p = str(path)
    if os.path.isdir(p):
        raise TraceFormatError("is a directory, expected a trace file", path=p)
    check_input_path(p)
    try:
        with open(p, "rb") as f:
            return f.read(n)
    except OSError as exc:
        raise TraceFormatError(f"cannot read file ({exc.strerror or exc})", path=p) from None


__all__ = ["RawImport", "read_head", "GZIP_MAGIC", "SQLITE_MAGIC", "HEAD_BYTES"]
