"""Indexing an emulated tensor with host data, as PyTorch does it for a CUDA tensor.

* A Python list, range or tuple inside an index (``v[:, [-1]]``, ``x[range(n), y]``) becomes a CPU
  index tensor (int64, or bool/uint8 for a list of booleans) that ``index``/``index_put_`` move to
  the device with a blocking H2D copy. PyTorch builds it directly on the tensor's device, and for
  the ``meta`` device it takes a shortcut that copies nothing (``internal_new_from_data``), so the
  emulation builds the CPU tensor itself and the dispatch layer records the copy.
* ``t[...] = 3`` (a Python number) on a CUDA tensor wraps the number in a 0-d **CPU** tensor of
  ``t``'s dtype (``THPVariable_setitem``); then ``copy_`` into a 0-d destination is an H2D copy,
  ``fill_`` into a larger one is one fill kernel, and ``index_put_`` moves the value to the device
  (H2D) unless it runs as ``masked_fill_``. For a meta tensor PyTorch makes the value on the meta
  device instead (a kernel and a device copy in the trace), so the emulation wraps it on the CPU.

:func:`host_side_index` is called by the function mode for ``Tensor.__getitem__`` and
``Tensor.__setitem__``; it changes nothing for other tensors or indices."""

from __future__ import annotations

import numbers

import torch
from torch.utils._python_dispatch import _disable_current_modes

_GETITEM = torch.Tensor.__getitem__
_SETITEM = torch.Tensor.__setitem__
_SEQUENCES = (list, tuple, range)


def host_side_index(func, args: tuple) -> tuple:
    if (func is not _GETITEM and func is not _SETITEM) or len(args) < 2:
        return args
    self = args[0]
    if not (isinstance(self, torch.Tensor) and self.is_meta):
        return args
    with _disable_current_modes():  # host work PyTorch does in C++, outside any operator
        index = _index(args[1])
        rest = args[2:]
        if func is _SETITEM and rest and _is_number(rest[0]):
            try:
                rest = (torch.full((), rest[0], dtype=self.dtype),) + rest[1:]
            except (RuntimeError, TypeError, OverflowError):
                pass  # left to PyTorch, which raises its own error
    return (self, index) + rest


def _is_number(v) -> bool:
    return isinstance(v, numbers.Number) and not isinstance(v, torch.Tensor)


def _index(index):
    if isinstance(index, tuple):
        return tuple(_entry(e) for e in index)
    if isinstance(index, (list, range)):
        if _treat_as_tuple(index):
            return tuple(_entry(e) for e in index)
        return _entry(index)
    return index


def _treat_as_tuple(seq) -> bool:
    """PyTorch's (NumPy's) rule for a non-tuple sequence index: it is a tuple of indices when it is
    shorter than 32 and holds a tensor, a sequence, a slice, ``...`` or ``None``."""
    if len(seq) >= 32:
        return False
    return any(isinstance(e, (torch.Tensor, slice, *_SEQUENCES)) or e is Ellipsis or e is None for e in seq)


def _entry(e):
    if not isinstance(e, _SEQUENCES) or not _plain_ints(e):
        return e
    t = torch.tensor(list(e) if isinstance(e, range) else e)
    if t.dtype not in (torch.bool, torch.uint8, torch.int64):
        t = t.to(torch.int64)  # an empty list is float32 by inference; PyTorch indexes with int64
    return t


def _plain_ints(seq) -> bool:
    for e in seq:
        if isinstance(e, _SEQUENCES):
            if not _plain_ints(e):
                return False
        elif not isinstance(e, (bool, int)) or isinstance(e, torch.Tensor):
            return False
    return True
