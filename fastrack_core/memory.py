"""Giving freed memory back to the operating system between the stages of one process.

A replay frees large arrays between its stages (the trace graph once the protocol graph exists,
the ``none`` reference once its figures are kept), but the allocators keep much of it: glibc
serves most numpy arrays from its heap once its dynamic mmap threshold has risen, and does not
return freed heap pages until asked; Arrow's memory pool (mimalloc or jemalloc) keeps freed pages
for reuse. Measured at 1M ops (docs/performance.md): after the trace graph is dropped, the
process's resident memory fell by 11 MiB on its own and by 220 MiB more after this call.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from functools import lru_cache

import pyarrow as pa


def _glibc(name: str, argtypes: list):
    """glibc's function ``name`` (returning int), or None (another C library or system)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


@lru_cache(maxsize=1)
def _malloc_trim():
    """glibc's ``malloc_trim``, or None."""
    return _glibc("malloc_trim", [ctypes.c_size_t])


# glibc's mallopt parameters (<malloc.h>) and the value given to both by :func:`keep_freed_heap`
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
HEAP_THRESHOLD_BYTES = 1 << 30  # 1 GiB: above any one array of a 1M-op replay (docs/performance.md)


@lru_cache(maxsize=1)
def _mallopt():
    """glibc's ``mallopt``, or None."""
    return _glibc("mallopt", [ctypes.c_int, ctypes.c_int])


def keep_freed_heap() -> bool:
    """For a command-line process that allocates and frees many large arrays: serve arrays up to
    :data:`HEAP_THRESHOLD_BYTES` from glibc's heap (not a fresh ``mmap`` each) and keep freed heap
    pages up to that size (no automatic trim), so a freed array's pages are reused by the next one
    instead of being unmapped and faulted in again; :func:`release_free_memory` still gives them
    back at the points the replay chooses. Measured at 1M ops under ``baseline``: about 0.3 s less
    system time, the same peak (docs/performance.md). Never changes a result. True when applied."""
    opt = _mallopt()
    if opt is None:
        return False
    return bool(opt(_M_MMAP_THRESHOLD, HEAP_THRESHOLD_BYTES)) & bool(opt(_M_TRIM_THRESHOLD, HEAP_THRESHOLD_BYTES))


def release_free_memory() -> None:
    """Return the free pages of the C heap and of Arrow's pool to the system (best effort: a no-op
    where the allocator offers no such call). Never changes a result, only resident memory."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
