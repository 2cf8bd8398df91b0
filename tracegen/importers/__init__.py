"""Trace importers: each turns one foreign format into raw ops (:mod:`tracegen.deps`) + metadata.

Every importer module exposes ``sniff(path) -> bool`` and ``read(paths) -> RawImport``
(:mod:`tracegen.importers.common` states the shape); :data:`FORMATS` maps each format name to
that pair, in the order formats are tried when detecting one.
"""

from __future__ import annotations

import os
from typing import Callable, NamedTuple, Sequence

from tracegen.importers import chakra, kineto, nsys, pytorch_et
from tracegen.importers.common import RawImport


class Importer(NamedTuple):
    sniff: Callable[[str | os.PathLike], bool]
    read: Callable[[Sequence[str | os.PathLike]], RawImport]


FORMATS: dict[str, Importer] = {
    "chakra": Importer(chakra.sniff, chakra.read),  # MLCommons Chakra ET protobuf (plain/gzip, or a directory of .et)
    "pytorch-et": Importer(pytorch_et.sniff, pytorch_et.read),  # PyTorch ET JSON + the Kineto trace of the same run
    "kineto": Importer(kineto.sniff, kineto.read),  # PyTorch profiler JSON (plain/gzip, or a directory)
    "nsys": Importer(nsys.sniff, nsys.read),  # Nsight Systems SQLite export
}

__all__ = ["FORMATS", "Importer", "RawImport"]
