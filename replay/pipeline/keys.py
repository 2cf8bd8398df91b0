"""Dense codes of int64 keys, hashed in linear time (lane rows of the graph builder, per-key
reductions of the summary).

Compiled (``replay.pipeline._build.encode``) when the accelerator is built; otherwise Arrow's dictionary
encoding, which gives the same codes but imports pyarrow.compute (~0.1 s of a replay's start).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from fastrack_core.traceio import as_numpy

try:  # setup.py ACCELERATORS; without it, Arrow's encoding
    from replay.pipeline import _build as _native
except ImportError:  # pragma: no cover - exercised where the extension is not built
    _native = None


def encode(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values in order of first appearance, each value's index among them, int32)."""
    values = np.ascontiguousarray(values, np.int64)
    if _native is not None:
        codes = np.empty(values.size, np.int32)
        return np.frombuffer(_native.encode(values, codes), np.int64), codes
    # (from the buffer: pa.array of a numpy array would import pandas)
    enc = pa.Array.from_buffers(pa.int64(), values.size, [None, pa.py_buffer(values)]).dictionary_encode()
    return as_numpy(enc.dictionary), as_numpy(enc.indices)


def sorted_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values ascending, each value's index among them): ``np.unique(values,
    return_inverse=True)`` in linear time, sorting only the distinct values."""
    first_seen, codes = encode(values)
    by_value = np.argsort(first_seen)
    rank_of = np.empty(by_value.size, np.int32)
    rank_of[by_value] = np.arange(by_value.size, dtype=np.int32)
    return first_seen[by_value], rank_of[codes]
