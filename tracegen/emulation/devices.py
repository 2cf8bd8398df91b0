"""The device-generic PyTorch API on the emulated ``cuda`` device, where the CPU build refuses it:
``torch.device(0)``, ``torch.set_default_device("cuda")`` / ``with torch.device("cuda"):``,
``torch.Generator(device="cuda")``, ``torch.Stream`` / ``torch.Event`` on ``cuda``,
``Module.to(0)`` (an index alone: the DDP tutorial's ``model.to(rank)``), and ``nn.DataParallel``
over the one emulated GPU (``docs/emulation.md``)."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._pytree import tree_map

from tracegen.emulation.streams import EmuEvent, EmuStream
from tracegen.emulation.tensors import is_cuda_device

_CUDA0 = torch.device("cuda", 0)
REAL_DEVICE = torch.device
REAL_GENERATOR = torch.Generator
REAL_STREAM = torch.Stream
REAL_EVENT = torch.Event


def _is_cuda(device) -> bool:
    """``device`` names the emulated GPU (``None`` too: the current accelerator is ``cuda``)."""
    return device is None or is_cuda_device(device) or (isinstance(device, int) and not isinstance(device, bool))


class _StandInMeta(type):
    """A stand-in for a PyTorch class: calling it builds the emulated object (``_make``);
    ``isinstance``/``issubclass`` accept the real class (and the emulated ones, ``_also``);
    class attributes are the real class's."""

    def __call__(cls, *a, **k):
        return cls._make(*a, **k)

    def __instancecheck__(cls, obj):
        return isinstance(obj, (cls._real, *cls._also))

    def __subclasscheck__(cls, sub):
        return issubclass(sub, (cls._real, *cls._also))

    def __getattr__(cls, name):
        return getattr(cls._real, name)


def _stand_in(real: type, make: Callable, also: tuple = ()) -> type:
    return _StandInMeta(real.__name__, (), {"_real": real, "_make": staticmethod(make), "_also": also,
                                            "__doc__": real.__doc__, "__module__": real.__module__})


def _make_device(*a, **k):
    # torch.device(0) / torch.device(index=0) names the current accelerator: the emulated GPU
    if len(a) == 1 and not k and isinstance(a[0], int) and not isinstance(a[0], bool):
        return REAL_DEVICE("cuda", a[0])
    return REAL_DEVICE(*a, **k)


class CudaGenerator(REAL_GENERATOR):
    """``torch.Generator(device="cuda")``: a CPU generator (seeding, state) that reports ``cuda:0``.
    Random ops on emulated tensors draw nothing, so its state never advances there."""

    @property
    def device(self):
        return _CUDA0


def _make_generator(device="cpu"):
    return CudaGenerator() if device is not None and _is_cuda(device) else REAL_GENERATOR(device)


def _make_stream(device=None, *a, priority: int = 0, **k):
    if _is_cuda(device):
        return EmuStream(priority=priority)
    return REAL_STREAM(device, *a, priority=priority, **k)


def _make_event(device=None, *, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
    if _is_cuda(device):
        return EmuEvent(enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)
    return REAL_EVENT(device, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


def _dp_scatter(self, inputs, kwargs, device_ids):
    """``DataParallel.scatter`` over the one emulated GPU: every tensor goes to ``cuda:0`` (a copy
    only for a CPU tensor, as ``comm.scatter`` does), one chunk each."""
    if len(device_ids) != 1:
        return _DP_SCATTER[0](self, inputs, kwargs, device_ids)
    dev = torch.device("cuda", int(device_ids[0]))

    def move(t):
        return t.to(dev) if isinstance(t, torch.Tensor) else t

    return (tuple(tree_map(move, tuple(inputs))),), (tree_map(move, dict(kwargs or {})),)


_DP_SCATTER: list = []
_MODULE_TO: list = []


def _index_device(d):
    """An index alone (``0``, ``torch.device(0)``'s int form) names the emulated GPU."""
    return REAL_DEVICE("cuda", d) if isinstance(d, int) and not isinstance(d, bool) else d


def _module_to(self, *args, **kwargs):
    """``Module.to(0)`` / ``Module.to(device=rank)``: PyTorch parses an index alone as the current
    accelerator, which the CPU build refuses; it is ``cuda:<index>`` here, as on a GPU."""
    if args:
        args = (_index_device(args[0]),) + args[1:]
    if "device" in kwargs:
        kwargs = dict(kwargs, device=_index_device(kwargs["device"]))
    return _MODULE_TO[0](self, *args, **kwargs)


def device_patches(function_mode_ref: list) -> list[tuple[Any, str, Any]]:
    """``(object, attribute, value)`` patches; ``function_mode_ref[0]`` is the session's
    ``TorchFunctionMode`` (a default ``cuda`` device is routed through it)."""
    import torch.utils._device as tud
    from torch.nn.parallel import DataParallel

    _DP_SCATTER[:] = [DataParallel.scatter]
    _MODULE_TO[:] = [torch.nn.Module.to]
    orig_tf = tud.DeviceContext.__torch_function__

    def device_context_tf(self, func, types, args=(), kwargs=None):
        # PyTorch puts a default-device context at the bottom of the mode stack, below the
        # emulator's function mode: give the injected cuda device to that mode to map
        kwargs = kwargs or {}
        if is_cuda_device(self.device) and kwargs.get("device") is None and func in tud._device_constructors():
            kwargs = dict(kwargs, device=self.device)
            return function_mode_ref[0].__torch_function__(func, types, args, kwargs)
        return orig_tf(self, func, types, args, kwargs)

    orig_get_default = torch.get_default_device

    def get_default_device():
        d = orig_get_default() if not _default_is_cuda(tud) else _CUDA0
        return d

    device_cls = _stand_in(REAL_DEVICE, _make_device)
    return [
        (torch, "device", device_cls),
        (torch, "Generator", _stand_in(REAL_GENERATOR, _make_generator)),
        (torch, "Stream", _stand_in(REAL_STREAM, _make_stream, (EmuStream,))),
        (torch, "Event", _stand_in(REAL_EVENT, _make_event, (EmuEvent,))),
        (tud.DeviceContext, "__torch_function__", device_context_tf),
        (torch, "get_default_device", get_default_device),
        (DataParallel, "scatter", _dp_scatter),
        (torch.nn.Module, "to", _module_to),
    ]


def _default_is_cuda(tud) -> bool:
    from torch.overrides import _get_current_function_mode_stack

    for mode in reversed(_get_current_function_mode_stack()):
        if isinstance(mode, tud.DeviceContext):
            return is_cuda_device(mode.device)
    return False


def default_device_state():
    """The global default-device context now (restored by :func:`restore_default_device`)."""
    return getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)


def restore_default_device(saved) -> None:
    """Undo a ``torch.set_default_device`` the script made (its context would outlive the capture)."""
    now = default_device_state()
    if now is saved:
        return
    if now is not None:
        now.__exit__(None, None, None)
    if saved is not None:
        saved.__enter__()
    torch._GLOBAL_DEVICE_CONTEXT.device_context = saved
