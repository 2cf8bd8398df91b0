"""Giving freed memory back to the operating system between the stages of one process.

A replay frees large arrays between its stages (the trace graph once the protocol graph exists,
the ``none`` reference once its figures are kept), but the allocators keep much of it: glibc
serves most numpy arrays from its heap once its dynamic mmap threshold has risen, and does not
return freed heap pages until asked; Arrow's memory pool (mimalloc or jemalloc) keeps freed pages
for reuse. Measured at 1M ops (docs/performance.md): after the trace graph is dropped, the
process's resident memory fell by 11 MiB on its own and by 220 MiB more after this call.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import sys
import threading
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


#: Below this much resident memory the replay does not give free pages back between its steps
#: (:func:`release_when_large`): a trim costs CPU, since the next arrays fault the returned pages in
#: again and the kernel zeroes each one, and while the process is small it returns too little to
#: matter. Measured at 1M ops under ``baseline``, ten runs each (docs/performance.md, "Memory"):
#: CPU 2.42 s with every trim, 2.12 s at 512 MiB, 2.27 s at 1 GiB (no trim at all); peak 680,
#: 685 and 757 MiB. At 10M ops every trim point is above it, so the trims that hold that peak
#: down still run.
RELEASE_MIN_RESIDENT_BYTES = 512 << 20


def resident_bytes() -> int | None:
    """This process's resident memory in bytes (``/proc/self/statm``), or None where unknown."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


_reusing = 0  # how many reusing_freed_memory() blocks are open (in any thread)
_reusing_lock = threading.Lock()


@contextlib.contextmanager
def reusing_freed_memory():
    """A block of work that frees and allocates graphs of the same sizes again and again (a range
    study's points): inside it :func:`release_when_large` gives nothing back, so the next graph
    reuses the freed pages instead of faulting fresh ones in (the kernel zeroes each); the
    outermost block's end releases once. Measured on a one-job 1M-op range study: system time
    2.3 s -> 1.0 s, the peak within 40 MiB (docs/model.md, "Prediction ranges"). Never changes a
    result. Blocks nest and may be open in several threads at once (a threaded study opens none:
    each thread's glibc arena would keep its own pages)."""
    global _reusing
    with _reusing_lock:
        _reusing += 1
    try:
        yield
    finally:
        with _reusing_lock:
            _reusing -= 1
            last = _reusing == 0
        if last:
            release_when_large()


def release_when_large() -> bool:
    """:func:`release_free_memory` where the process holds at least
    :data:`RELEASE_MIN_RESIDENT_BYTES` (or its size is unknown) and no
    :func:`reusing_freed_memory` block is open; what the replay calls between its steps. True when
    it released."""
    if _reusing:
        return False
    rss = resident_bytes()
    if rss is not None and rss < RELEASE_MIN_RESIDENT_BYTES:
        return False
    release_free_memory()
    return True


def release_free_memory() -> None:
    """Return the free pages of the C heap and of Arrow's pool to the system (best effort: a no-op
    where the allocator offers no such call). Never changes a result, only resident memory."""
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
