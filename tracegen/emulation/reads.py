"""What a read of emulated GPU memory returns (``.item()``, ``bool()``, ``.cpu()``, ``.tolist()``):
GPU memory has no contents, so a read returns a defined value chosen so that data-dependent
Python control flow runs the path a healthy workload runs (``docs/capture.md``)."""

from __future__ import annotations

import torch

READ_FLOAT = 0.0
READ_INT = 0
READ_BOOL = False
READ_ALL = True  # the result of torch.all / Tensor.all


def default_read(dtype: torch.dtype, produced_by_all: bool = False):
    if dtype == torch.bool:
        return READ_ALL if produced_by_all else READ_BOOL
    if dtype.is_floating_point or dtype.is_complex:
        return READ_FLOAT
    return READ_INT

