"""The one place that decides how hot loops are compiled.

``njit`` is numba's, with results cached on disk, applied lazily: decorating a function costs
nothing, and numba (about 0.4 s to import) is imported when a decorated function is first
*called*. At that moment every decorated function is wrapped in a numba dispatcher (compiled on
its own first call, as with a plain ``numba.njit``) and put back in its module's namespace under
its name, so kernels that call each other are typed against dispatchers. ``FASTRACK_NO_JIT=1`` makes ``njit`` a
no-op, so the same functions run as plain Python (same results, slower): useful for debugging
and coverage.
"""

from __future__ import annotations

import functools
import os
import sys
import threading

_lock = threading.Lock()


class _Deferred:
    """A function to be compiled by ``numba.njit(**options)`` when it is first called."""

    def __init__(self, func, options: dict):
        self.py_func = func
        self.options = options
        self.compiled = None
        functools.update_wrapper(self, func)
        _registry.append(self)

    def __call__(self, *args, **kwargs):
        compiled = self.compiled
        if compiled is None:
            compiled = _compile_module(self)
        return compiled(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<deferred njit {self.py_func.__qualname__}>"


_registry: list[_Deferred] = []  # every deferred function not yet wrapped


def _compile_module(first: _Deferred):
    """Wrap every deferred function in a numba dispatcher (numba compiles each on its first call)
    and rebind the names that hold them in their modules, so that kernels calling each other,
    across modules too, are typed against dispatchers."""
    from numba import njit as numba_njit

    with _lock:
        if first.compiled is None:
            first.compiled = numba_njit(**first.options)(first.py_func)
        todo = _registry[:]
        _registry.clear()
        for d in todo:
            if d.compiled is None:
                d.compiled = numba_njit(**d.options)(d.py_func)
        for name in {d.py_func.__module__ for d in todo + [first]}:
            module = sys.modules.get(name)
            for attr, value in list(vars(module).items()) if module is not None else ():
                if isinstance(value, _Deferred) and value.compiled is not None:
                    setattr(module, attr, value.compiled)
    return first.compiled


if os.environ.get("FASTRACK_NO_JIT"):

    def njit(*args, **kwargs):
        if args and callable(args[0]):
            return args[0]
        return lambda f: f

else:

    def njit(*args, **kwargs):
        if args and callable(args[0]):
            return _Deferred(args[0], {})
        return lambda f: _Deferred(f, kwargs)


__all__ = ["njit"]
