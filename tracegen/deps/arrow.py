"""numpy -> Arrow arrays built from their buffers, without ``pa.array``.

``pa.array`` asks pyarrow's pandas shim whether its argument is a pandas object, and the shim
imports pandas on first use (~0.25 s of CPU, plus pyarrow.compute): a Kineto convert never needs
pandas otherwise. These helpers give the arrays ``pa.array`` would (same type, values, nulls) for
the inputs :mod:`tracegen.deps.assemble` hands over, and defer to ``pa.array`` for anything else.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def from_numpy(a: np.ndarray, typ: pa.DataType | None = None, mask: np.ndarray | None = None) -> pa.Array:
    """``pa.array(a, typ, mask=mask)`` of a 1-D integer, float or bool array."""
    if a.dtype.kind not in "iufb" or a.ndim != 1:
        return pa.array(a, typ, mask=mask)
    if typ is not None and pa.from_numpy_dtype(a.dtype) != typ:
        a = a.astype(typ.to_pandas_dtype())
    a = np.ascontiguousarray(a)
    validity, nulls = None, 0
    if mask is not None and mask.any():
        validity, nulls = pa.py_buffer(np.packbits(~mask, bitorder="little")), int(mask.sum())
    data = pa.py_buffer(np.packbits(a, bitorder="little") if a.dtype == bool else a)
    return pa.Array.from_buffers(pa.from_numpy_dtype(a.dtype), len(a), [validity, data], null_count=nulls)


def strings(values) -> pa.Array:
    """``pa.array(values, pa.string())`` of a sequence of Python str (no None)."""
    vals = list(values)
    if not all(type(v) is str for v in vals):
        return pa.array(values, pa.string())
    try:
        enc = [v.encode("utf-8") for v in vals]
    except UnicodeEncodeError:  # (a lone surrogate: pa.array's error)
        return pa.array(values, pa.string())
    offsets = np.zeros(len(enc) + 1, np.int64)
    np.cumsum([len(b) for b in enc], out=offsets[1:])
    if offsets[-1] >= 2**31:
        return pa.array(values, pa.string())
    return pa.Array.from_buffers(pa.string(), len(enc),
                                 [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(enc))])
