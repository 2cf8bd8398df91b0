"""fastrack_core.memory: freed pages go back to the system between a replay's stages."""

import platform
import sys

import numpy as np
import pytest

from fastrack_core import memory


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="malloc_trim is glibc's")
def test_glibc_heap_pages_are_returned():
    assert memory._malloc_trim() is not None
    # many mid-sized arrays come from glibc's heap (below its mmap threshold); freeing them keeps
    # the pages resident until trimmed
    keep = [np.ones(16_000, np.int64) for _ in range(2_000)]  # ~245 MiB in 125 KiB pieces
    del keep[::2]
    before = _rss_bytes()
    memory.release_free_memory()
    after = _rss_bytes()
    assert before - after > 60 * 2**20, (before, after)
    assert all(int(a[-1]) == 1 for a in keep)  # what is still held is untouched


def test_release_is_safe_to_call_repeatedly():
    for _ in range(3):
        memory.release_free_memory()
