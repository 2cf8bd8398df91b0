"""What the emulator knows about a tensor: is it emulated GPU memory (a ``meta`` tensor), is it
pinned host memory, its cost-model description; and the mapping of ``cuda`` devices to ``meta``."""

from __future__ import annotations

import torch
from torch.utils._pytree import SUPPORTED_NODES, tree_flatten, tree_map

from tracegen.emulation.costmodel import TensorInfo

META = torch.device("meta")
_DTYPE_NAMES: dict[torch.dtype, str] = {}


def is_cuda_device(d) -> bool:
    if isinstance(d, torch.device):
        return d.type == "cuda"
    if isinstance(d, str):
        return d == "cuda" or d.startswith("cuda:")
    return False


def map_device(d):
    return META if is_cuda_device(d) else d


def dtype_name(dtype: torch.dtype) -> str:
    """``dtype``'s name without ``torch.`` (``bfloat16``), as the cost model names dtypes."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


def tensor_info(t: torch.Tensor) -> TensorInfo:
    return TensorInfo(tuple(t.shape), dtype_name(t.dtype), bool(t.is_contiguous()))


class _NotPlain(Exception):
    """A container :func:`leaves` leaves to ``tree_flatten``."""


def _walk(items, out: list) -> None:
    for v in items:
        tv = type(v)
        if tv is tuple or tv is list:
            _walk(v, out)
        elif tv is dict:
            _walk(v.values(), out)
        elif tv in SUPPORTED_NODES or isinstance(v, (tuple, list, dict)):
            raise _NotPlain  # another pytree node (torch.Size, a named tuple, an OrderedDict, ...)
        else:
            out.append(v)


def leaves(tree) -> list:
    """The leaves of ``tree`` in ``tree_flatten``'s order (``tree_flatten(tree)[0]``), walked
    directly through plain tuples, lists and dicts (what operator arguments and results are
    made of); any other container is left to ``tree_flatten``."""
    tt = type(tree)
    if tt is tuple or tt is list or tt is dict:
        out: list = []
        try:
            _walk(tree.values() if tt is dict else tree, out)
            return out
        except _NotPlain:
            pass
    elif tt not in SUPPORTED_NODES and not isinstance(tree, (tuple, list, dict)):
        return [tree]
    return tree_flatten(tree)[0]


def is_emulated(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_meta


def is_pinned_memory(t: torch.Tensor) -> bool:
    while t is not None:
        if getattr(t, "_fastrack_pinned", False):
            return True
        t = t._base
    return False


def mark_pinned(t):
    if isinstance(t, torch.Tensor):
        t._fastrack_pinned = True
    return t



def _is_plain(x) -> bool:
    tx = type(x)
    if tx is tuple or tx is list:
        return all(_is_plain(v) for v in x)
    if tx is dict:
        return all(_is_plain(v) for v in x.values())
    return tx not in SUPPORTED_NODES and not isinstance(x, (tuple, list, dict))


def _map(fn, x):
    tx = type(x)
    if tx is tuple:
        return tuple([_map(fn, v) for v in x])
    if tx is list:
        return [_map(fn, v) for v in x]
    if tx is dict:
        return {k: _map(fn, v) for k, v in x.items()}
    return fn(x)


def map_leaves(fn, tree):
    """``tree_map(fn, tree)``: plain tuples, lists and dicts rebuilt directly (leaves in the same
    order, each passed to ``fn`` once); a tree with any other container goes to ``tree_map``."""
    return _map(fn, tree) if _is_plain(tree) else tree_map(fn, tree)
