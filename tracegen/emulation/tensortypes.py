"""The tensor-level CUDA API the CPU build refuses, on emulated tensors: the legacy typed
constructors (``torch.cuda.FloatTensor`` and friends), ``torch.set_default_tensor_type`` with one
of them, ``Tensor.type("torch.cuda.X")`` / ``Tensor.type()``, ``Tensor.record_stream`` and
``Tensor.data_ptr`` (``docs/emulation.md``)."""

from __future__ import annotations

from typing import Any

import torch

LEGACY_TYPES = {
    "FloatTensor": torch.float32, "DoubleTensor": torch.float64, "HalfTensor": torch.float16,
    "BFloat16Tensor": torch.bfloat16, "ByteTensor": torch.uint8, "CharTensor": torch.int8,
    "ShortTensor": torch.int16, "IntTensor": torch.int32, "LongTensor": torch.int64, "BoolTensor": torch.bool,
}
"""``torch.cuda.<name>`` -> its dtype (the set ``torch.cuda`` defines)."""
_NAME_OF = {v: k for k, v in LEGACY_TYPES.items()}
_FAKE_BASE = 0x7F00_0000_0000  # emulated device addresses start here (never dereferenced)


class _LegacyTypeMeta(type):
    """``torch.cuda.FloatTensor(...)``: ``FloatTensor(*sizes)`` / ``(torch.Size)`` is an empty
    emulated tensor, ``FloatTensor(sequence)`` copies the data to the device (an H2D copy);
    ``isinstance`` accepts emulated tensors of the dtype."""

    def __call__(cls, *args, device=None):
        if len(args) == 1 and not isinstance(args[0], int) and not isinstance(args[0], torch.Size):
            return torch.tensor(args[0], dtype=cls.dtype, device="cuda")
        sizes = tuple(args[0]) if len(args) == 1 and isinstance(args[0], torch.Size) else args
        return torch.empty(sizes, dtype=cls.dtype, device="cuda")

    def __instancecheck__(cls, obj):
        return isinstance(obj, torch.Tensor) and obj.is_meta and obj.dtype == cls.dtype


def legacy_type(name: str) -> type:
    return _LegacyTypeMeta(name, (), {"dtype": LEGACY_TYPES[name], "is_cuda": True, "is_sparse": False,
                                      "__module__": "torch.cuda"})


def _cuda_dtype_of(t) -> torch.dtype | None:
    """The dtype of ``torch.cuda.<X>Tensor`` given as a legacy type or its name, else None."""
    if isinstance(t, _LegacyTypeMeta):
        return t.dtype
    if isinstance(t, type) and getattr(t, "is_cuda", False) and t.__name__ in LEGACY_TYPES:
        return LEGACY_TYPES[t.__name__]
    if isinstance(t, str) and t.startswith("torch.cuda.") and t[len("torch.cuda."):] in LEGACY_TYPES:
        return LEGACY_TYPES[t[len("torch.cuda."):]]
    return None


def tensor_patches() -> list[tuple[Any, str, Any]]:
    """``(object, attribute, value)`` patches for ``torch.cuda`` and ``torch.Tensor``."""
    orig_type = torch.Tensor.type
    orig_data_ptr = torch.Tensor.data_ptr
    orig_record_stream = torch.Tensor.record_stream
    orig_set_default_tensor_type = torch.set_default_tensor_type

    def set_default_tensor_type(t):
        # torch.set_default_tensor_type(torch.cuda.HalfTensor): the dtype and the device, as PyTorch does
        cuda_dtype = _cuda_dtype_of(t)
        if cuda_dtype is None:
            return orig_set_default_tensor_type(t)
        if not cuda_dtype.is_floating_point:
            raise TypeError("only floating-point types are supported as the default type")
        torch.set_default_dtype(cuda_dtype)
        torch.set_default_device("cuda")

    def type_(self, dtype=None, non_blocking=False, **kwargs):
        if dtype is None and self.is_meta:
            return f"torch.cuda.{_NAME_OF.get(self.dtype, 'Tensor')}"
        cuda_dtype = _cuda_dtype_of(dtype)
        if cuda_dtype is not None:
            if self.is_meta and self.dtype == cuda_dtype:
                return self
            return self.to("cuda", cuda_dtype, non_blocking=non_blocking)
        return orig_type(self, dtype, non_blocking, **kwargs) if dtype is not None else orig_type(self)

    def data_ptr(self):
        # emulated memory has no address; a stable, distinct one per storage (plus the offset) lets
        # code that compares addresses (make_graphed_callables' input copies) decide as on a GPU
        if not self.is_meta:
            return orig_data_ptr(self)
        return _FAKE_BASE + self.untyped_storage()._cdata % (1 << 40) + self.storage_offset() * self.element_size()

    def record_stream(self, stream):
        # the caching allocator's bookkeeping: no GPU op, no runtime call
        if self.is_meta:
            return None
        return orig_record_stream(self, stream)

    out: list[tuple[Any, str, Any]] = [(torch.cuda, name, legacy_type(name)) for name in LEGACY_TYPES]
    out += [(torch.Tensor, "type", type_), (torch.Tensor, "data_ptr", data_ptr),
            (torch.Tensor, "record_stream", record_stream), (torch, "set_default_tensor_type", set_default_tensor_type)]
    return out

