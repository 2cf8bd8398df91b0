"""Dependency edges as they are found, and their CSR form (``deps`` / ``dep_kinds`` columns)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from fastrack_core.schema import DepKind
from tracegen.deps.arrow import from_numpy
from tracegen.deps.search import EMPTY, distinct


def _unique_sorted(dst: np.ndarray, src: np.ndarray, kind: np.ndarray, n: int):
    """The distinct (dst, kind, src) triples, sorted by them (op ids in ``[0, n)``, kinds < 256):
    one sort of a packed int64 key while it fits, else a lexsort."""
    if (n + 1) * (n + 1) * 256 < 2**62:
        key = distinct((dst * 256 + kind.astype(np.int64)) * (n + 1) + src)
        return key // ((n + 1) * 256), key % (n + 1), ((key // (n + 1)) % 256).astype(np.uint8)
    order = np.lexsort((src, kind, dst))
    dst, src, kind = dst[order], src[order], kind[order]
    new = np.ones(len(dst), bool)
    new[1:] = (dst[1:] != dst[:-1]) | (kind[1:] != kind[:-1]) | (src[1:] != src[:-1])
    return dst[new], src[new], kind[new]


class Edges:
    """Edges ``dst depends on src`` over one op index space; -1 on either side means "none"."""

    def __init__(self) -> None:
        self._dst: list[np.ndarray] = []
        self._src: list[np.ndarray] = []
        self._kind: list[np.ndarray] = []

    def add(self, dst: np.ndarray, src: np.ndarray, kind: DepKind) -> None:
        """Keep the pairs with both ends known and different."""
        ok = (dst >= 0) & (src >= 0) & (dst != src)
        if ok.any():
            self._dst.append(dst[ok].astype(np.int64))
            self._src.append(src[ok].astype(np.int64))
            self._kind.append(np.full(int(ok.sum()), int(kind), np.uint8))

    def between(self, lo: int, hi: int, kinds: tuple[DepKind, ...]) -> tuple[np.ndarray, np.ndarray]:
        """(dst, src) of the edges found so far of one of ``kinds`` with both ends in ``[lo, hi)``."""
        if not self._dst:
            return EMPTY, EMPTY
        dst, src, k = np.concatenate(self._dst), np.concatenate(self._src), np.concatenate(self._kind)
        m = np.isin(k, [int(x) for x in kinds]) & (dst >= lo) & (dst < hi) & (src >= lo) & (src < hi)
        return dst[m], src[m]

    def to_lists(self, op_id: np.ndarray, n: int) -> tuple[pa.ListArray, pa.ListArray]:
        """(deps, dep_kinds) list columns of ``n`` ops, renumbered by ``op_id``: per dependent op,
        no duplicate, sorted by (kind, source)."""
        if self._dst:
            dst = op_id[np.concatenate(self._dst)]
            src = op_id[np.concatenate(self._src)]
            ek = np.concatenate(self._kind)
            dst, src, ek = _unique_sorted(dst, src, ek, n)
        else:
            dst, src, ek = EMPTY, EMPTY, np.zeros(0, np.uint8)
        counts = np.bincount(dst, minlength=n)
        offsets = np.zeros(n + 1, np.int32 if len(dst) < 2**31 else np.int64)
        np.cumsum(counts, out=offsets[1:])
        deps = pa.ListArray.from_arrays(from_numpy(offsets), from_numpy(src, pa.int64()))
        dep_kinds = pa.ListArray.from_arrays(from_numpy(offsets), from_numpy(ek, pa.uint8()))
        return deps, dep_kinds
