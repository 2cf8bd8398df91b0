"""What the emulator knows about a tensor: is it emulated GPU memory (a ``meta`` tensor), is it
pinned host memory, its cost-model description; and the mapping of ``cuda`` devices to ``meta``."""

from __future__ import annotations

import torch

from tracegen.costmodel import TensorInfo

META = torch.device("meta")


def _is_cuda_device(d) -> bool:
    if isinstance(d, torch.device):
        return d.type == "cuda"
    if isinstance(d, str):
        return d == "cuda" or d.startswith("cuda:")
    return False


def _map_device(d):
    return META if _is_cuda_device(d) else d


def _info(t: torch.Tensor) -> TensorInfo:
    return TensorInfo(tuple(t.shape), str(t.dtype).replace("torch.", ""), bool(t.is_contiguous()))


def _is_emu(t) -> bool:
    return isinstance(t, torch.Tensor) and t.is_meta


def _pinned(t: torch.Tensor) -> bool:
    while t is not None:
        if getattr(t, "_fastrack_pinned", False):
            return True
        t = t._base
    return False


def _mark_pinned(t):
    if isinstance(t, torch.Tensor):
        t._fastrack_pinned = True
    return t

