"""What a read of emulated GPU memory returns (``.item()``, ``bool()``, ``.cpu()``, ``.tolist()``)
when the value is not known: small tensors carry real values (:mod:`tracegen.emulation.shadows`);
values that depend on large tensors, which have no contents, get the stand-ins below, chosen so
that data-dependent Python control flow runs the path a healthy workload runs and no loop ends
early (``docs/emulation.md``, "What emulated reads return")."""

from __future__ import annotations

import torch

READ_FLOAT = 1.0
"""The stand-in of a floating-point value: not 0.0, so ``1 / mse.item()`` (PSNR) and ``log`` do
not fail, above every convergence tolerance, so ``if loss < tol: break`` does not end a loop
early, finite (NaN/inf checks pass), and within [0, 1] (a probability stays one)."""
READ_INT = 0
READ_BOOL = False
READ_ALL = True  # the result of torch.all / Tensor.all over unknown data
STANDIN_NOTE = ("a value read back from the GPU was a stand-in (it depends on a tensor too large to carry "
                "values under emulation: floats read 1.0, indices n // 2, other integers 0; docs/emulation.md, "
                "\"What emulated reads return\")")


def default_read(dtype: torch.dtype, produced_by_all: bool = False):
    """The stand-in of one element of ``dtype`` computed from unknown data."""
    if dtype == torch.bool:
        return READ_ALL if produced_by_all else READ_BOOL
    if dtype.is_floating_point or dtype.is_complex:
        return READ_FLOAT
    return READ_INT


def standin_index(n: int, j: int = 0) -> int:
    """The stand-in of the ``j``-th index chosen from unknown data along a dimension of size ``n``
    (argmax/argmin, max/min/median/mode/kthvalue indices, topk, sort/argsort, multinomial):
    ``(n // 2 + j) mod n``. An index in the middle of the range, so a token id chosen from stand-in
    logits is an ordinary token: tokenizers put their special tokens (end-of-sequence, padding,
    unknown) at the start or the end of the vocabulary. ``j`` keeps the k indices of topk,
    multinomial without replacement and sort distinct (sort gives a permutation)."""
    if n <= 0:
        return 0
    return (n // 2 + j) % n
