"""What the emulator knows about a tensor: is it emulated GPU memory (a ``meta`` tensor), is it
pinned host memory, its cost-model description; and the mapping of ``cuda`` devices to ``meta``."""

from __future__ import annotations

import torch

from tracegen.emulation.costmodel import TensorInfo

META = torch.device("meta")


def is_cuda_device(d) -> bool:
    if isinstance(d, torch.device):
        return d.type == "cuda"
    if isinstance(d, str):
        return d == "cuda" or d.startswith("cuda:")
    return False


def map_device(d):
    return META if is_cuda_device(d) else d


def tensor_info(t: torch.Tensor) -> TensorInfo:
    return TensorInfo(tuple(t.shape), str(t.dtype).replace("torch.", ""), bool(t.is_contiguous()))


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

