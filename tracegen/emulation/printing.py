"""Printing and formatting emulated tensors as PyTorch does for CUDA tensors: the values are read
back (a blocking D2H copy of the elements shown, then a synchronisation, as on a GPU) and shown
as the emulated GPU holds them (real values of small tensors, stand-ins otherwise, which the
capture notes once: :data:`tracegen.emulation.reads.STANDIN_NOTE`).

* ``f"{loss:.4f}"`` / ``format(t, spec)`` of a 0-d tensor: ``t.item()`` formatted with ``spec``
  (the ``.item()`` is the usual 1-element D2H read); a format spec on a tensor with dimensions
  raises PyTorch's own ``TypeError``;
* ``print(t)`` / ``repr(t)`` / ``str(t)``: PyTorch's text of the values with
  ``device='cuda:0'`` (and the ``dtype``/``grad_fn``/``requires_grad`` suffixes it adds); the
  copy has the bytes of the elements printed (all of them, or the summary's edge items when the
  tensor has more than ``torch.set_printoptions(threshold=...)`` elements).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from fastrack_core.schema import CopyDir
from tracegen.emulation.reads import STANDIN_NOTE, default_read
from tracegen.emulation.shadows import Shadows

if TYPE_CHECKING:
    from tracegen.emulation.timeline import Recorder

TENSOR_FORMAT = torch.Tensor.__format__
TENSOR_REPR = torch.Tensor.__repr__
_SHADOWS = Shadows()
_DEFAULT_DTYPES = (torch.int64, torch.bool)


def handles(func) -> bool:
    return func is TENSOR_FORMAT or func is TENSOR_REPR


def call(rec: "Recorder", func, args, kwargs):
    """``Tensor.__format__`` / ``Tensor.__repr__`` on an emulated tensor (function-mode handler)."""
    t = args[0]
    if func is TENSOR_FORMAT:
        spec = args[1] if len(args) > 1 else kwargs.get("format_spec", "")
        if t.dim() == 0:
            return t.detach().item().__format__(spec)
        if spec:
            raise TypeError("unsupported format string passed to Tensor.__format__")
    if kwargs.get("tensor_contents") is not None:
        return rec.counted(func, *args, **kwargs)
    return tensor_repr(rec, t)


def _printed_elements(shape) -> int:
    """Elements PyTorch's printing reads: all, or the summary's edge items per dimension."""
    opts = torch._tensor_str.PRINT_OPTS
    n = math.prod(shape)
    if n <= opts.threshold:
        return n
    return math.prod(min(s, 2 * opts.edgeitems) for s in shape)


def tensor_repr(rec: "Recorder", t: torch.Tensor) -> str:
    nbytes = _printed_elements(tuple(t.shape)) * t.element_size()
    if nbytes:
        rec.memcpy(CopyDir.D2H, nbytes, False, False, "aten::_to_copy")
    v = _SHADOWS.view(t)
    if t.numel() and (v is None or _SHADOWS.is_standin(t)):
        rec.note(STANDIN_NOTE)
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes(), torch.no_grad(), torch.inference_mode(False):
        if v is None:
            v = torch.full((), default_read(t.dtype), dtype=t.dtype).expand(tuple(t.shape))
        text = TENSOR_REPR(v.detach().clone() if v.numel() <= 1 << 16 else v)
    return _with_cuda_suffixes(text, t)


def _with_cuda_suffixes(cpu_text: str, t: torch.Tensor) -> str:
    """``tensor(..., dtype=...)`` of the CPU values -> ``tensor(..., device='cuda:0', dtype=...,
    grad_fn=<...>)``, PyTorch's order for a CUDA tensor."""
    body = cpu_text[:-1] if cpu_text.endswith(")") else cpu_text
    cut = len(body)
    for key in (", size=(", ", dtype="):
        i = body.find(key)
        if i >= 0:
            cut = min(cut, i)
    grad = ""
    if t.grad_fn is not None:
        grad = f", grad_fn=<{type(t.grad_fn).__name__}>"
    elif t.requires_grad:
        grad = ", requires_grad=True"
    return body[:cut] + ", device='cuda:0'" + body[cut:] + grad + ")"
