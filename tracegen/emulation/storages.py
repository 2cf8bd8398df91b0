"""Storages moved to the GPU below the tensor level: ``UntypedStorage.to(device="cuda")`` /
``.cuda()``, which is what ``torch.load(map_location="cuda" | torch.device("cuda") | "cuda:0" |
{...: "cuda"} | a callable calling storage.cuda())`` and checkpoints saved from a GPU do per
storage. No mode sees these (they are not tensor operators), and the CPU build of PyTorch cannot
make a CUDA storage, so while an emulated GPU is active ``torch.storage._to`` routes them to it:
each storage becomes an emulated (meta) storage filled by a blocking H2D copy of its bytes from
pageable memory (what ``UntypedStorage.copy_`` does on a GPU; an empty storage copies nothing),
with the real bytes kept when the storage is small (:mod:`tracegen.emulation.shadows`)."""

from __future__ import annotations

import contextlib

import torch
import torch.storage as _storage_module

_LOADED = "_fastrack_on_emulated_gpu"


def _emulated_to(orig):
    def to(self, device, non_blocking=False):
        if device.type != "cuda" or self.device.type != "cpu" or self.is_sparse:
            return orig(self, device, non_blocking)
        src = torch.empty(0, dtype=torch.uint8).set_(self)
        dst = torch.empty(self.nbytes(), dtype=torch.uint8, device=device)  # the function mode: meta
        dst.copy_(src, non_blocking=non_blocking)  # the dispatch layer: the H2D copy
        out = dst.untyped_storage()
        setattr(out, _LOADED, True)
        return out

    return to


def _data_ptr(orig):
    def data_ptr(self):
        # torch.load caches a loaded storage only when its address is not 0, and a meta storage's
        # is: an emulated GPU storage reports a stand-in address, so that a storage several
        # tensors share (tied weights) is loaded and copied once, as on a GPU
        ptr = orig(self)
        if ptr == 0 and getattr(self._untyped_storage, _LOADED, False):
            return 1
        return ptr

    return data_ptr


@contextlib.contextmanager
def storages_to_emulated_gpu():
    """Route CPU -> cuda storage moves to the emulated GPU for the duration (restored after)."""
    orig_to = _storage_module._to
    orig_ptr = torch.storage.TypedStorage._data_ptr
    _storage_module._to = _emulated_to(orig_to)
    torch.storage.TypedStorage._data_ptr = _data_ptr(orig_ptr)
    try:
        yield
    finally:
        _storage_module._to = orig_to
        torch.storage.TypedStorage._data_ptr = orig_ptr
