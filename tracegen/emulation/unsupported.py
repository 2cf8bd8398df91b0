"""What the emulation refuses, and how: a call it cannot emulate stops the capture with one line
naming the call (``emulation does not support torch.cuda.X``), never with PyTorch's CPU-build
message and the emulator's frames (``docs/emulation.md``, "What the emulation refuses").

:func:`guard_namespace` wraps every public function and class of a ``torch.cuda`` namespace that
the emulation does not patch: the original still runs (what works in the CPU build keeps working),
and whatever it raises becomes :class:`EmulationUnsupported` naming the call."""

from __future__ import annotations

import functools
import types
from typing import Any, Callable

from fastrack_core.errors import CaptureError


class EmulationUnsupported(CaptureError):
    """The script called something the emulated GPU cannot do."""

    def __init__(self, call: str, why: str = ""):
        self.call = call
        super().__init__(f"emulation does not support {call}{' (' + why + ')' if why else ''}; no trace written")


def refuse(call: str, why: str = ""):
    """A stand-in that refuses ``call`` whenever it is called."""

    def refused(*_a, **_k):
        raise EmulationUnsupported(call, why)

    refused.__name__ = call.rsplit(".", 1)[-1]
    return refused


def _guarded_function(fn: Callable, call: str) -> Callable:
    @functools.wraps(fn)
    def guarded(*a, **k):
        try:
            return fn(*a, **k)
        except EmulationUnsupported:
            raise
        except Exception:
            raise EmulationUnsupported(call) from None

    return guarded


class _GuardedClassMeta(type):
    """Metaclass of a guarded class: construction runs the original class and turns its failure
    into :class:`EmulationUnsupported`; ``isinstance``/``issubclass`` and class attributes are
    the original's."""

    def __call__(cls, *a, **k):
        try:
            return cls._orig(*a, **k)
        except EmulationUnsupported:
            raise
        except Exception:
            raise EmulationUnsupported(cls._call) from None

    def __instancecheck__(cls, obj):
        return isinstance(obj, cls._orig)

    def __subclasscheck__(cls, sub):
        return issubclass(sub, cls._orig)

    def __getattr__(cls, name):
        return getattr(cls._orig, name)


def _guarded_class(orig: type, call: str) -> type:
    return _GuardedClassMeta(orig.__name__, (), {"_orig": orig, "_call": call, "__doc__": orig.__doc__,
                                                  "__module__": orig.__module__})


def guard_namespace(module: types.ModuleType, prefix: str, skip: set[str]) -> dict[str, Any]:
    """``{name: guarded}`` for the public functions and (non-exception) classes defined by PyTorch
    in ``module`` whose name is not in ``skip`` (the ones the emulation patches itself)."""
    out: dict[str, Any] = {}
    for name, obj in vars(module).items():
        if name.startswith("_") or name in skip:
            continue
        if not str(getattr(obj, "__module__", "") or "").startswith("torch"):
            continue  # typing helpers, stdlib modules re-exported by torch.cuda
        call = f"{prefix}.{name}"
        if isinstance(obj, type):
            if issubclass(obj, BaseException):
                continue  # `except torch.cuda.OutOfMemoryError` must keep working
            out[name] = _guarded_class(obj, call)
        elif isinstance(obj, (types.FunctionType, types.BuiltinFunctionType, functools.partial)):
            out[name] = _guarded_function(obj, call)
    return out
