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


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="mallopt is glibc's")
def test_kept_heap_serves_large_arrays_and_still_gives_them_back():
    """After keep_freed_heap (a process setting: run in a child), a large freed array stays
    resident for the next one (no automatic trim), and release_free_memory still returns it."""
    import subprocess

    code = ("import numpy as np\n"
            "from fastrack_core import memory\n"
            "def rss():\n"
            "    return int(open('/proc/self/statm').read().split()[1]) * 4096\n"
            "assert memory.keep_freed_heap()\n"
            "a = np.ones(64 * 2**20 // 8, np.int64); b = np.ones(8, np.int64)  # b: the heap's top stays in use\n"
            "held = rss(); del a; kept = rss()\n"
            "memory.release_free_memory(); trimmed = rss()\n"
            "assert held - kept < 8 * 2**20, (held, kept)  # 64 MiB freed, still resident: from the heap\n"
            "assert kept - trimmed > 48 * 2**20, (kept, trimmed)  # given back when asked\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]


def test_the_replay_releases_only_once_the_process_is_large(monkeypatch):
    # release_when_large (what the replay calls between its steps) skips the trim while the
    # process is below RELEASE_MIN_RESIDENT_BYTES and trims at or above it
    rss = memory.resident_bytes()
    if rss is None:
        pytest.skip("no /proc/self/statm: the release always runs")
    assert abs(rss - _rss_bytes()) < 64 * 2**20
    calls = []
    monkeypatch.setattr(memory, "release_free_memory", lambda: calls.append(1))
    monkeypatch.setattr(memory, "RELEASE_MIN_RESIDENT_BYTES", rss + (1 << 40))
    assert memory.release_when_large() is False and calls == []
    monkeypatch.setattr(memory, "RELEASE_MIN_RESIDENT_BYTES", 0)
    assert memory.release_when_large() is True and calls == [1]


def test_reusing_blocks_hold_the_release_until_the_outermost_ends(monkeypatch):
    # inside reusing_freed_memory() (a range study's points) release_when_large gives nothing
    # back; blocks nest, and the outermost one's end releases once
    calls = []
    monkeypatch.setattr(memory, "release_free_memory", lambda: calls.append(1))
    monkeypatch.setattr(memory, "RELEASE_MIN_RESIDENT_BYTES", 0)
    with memory.reusing_freed_memory():
        assert memory.release_when_large() is False
        with memory.reusing_freed_memory():
            assert memory.release_when_large() is False
        assert calls == []  # (the inner end is not the outermost)
        assert memory.release_when_large() is False
    assert calls == [1]
    assert memory.release_when_large() is True and calls == [1, 1]


def test_a_failing_block_still_ends_its_hold(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "release_free_memory", lambda: calls.append(1))
    monkeypatch.setattr(memory, "RELEASE_MIN_RESIDENT_BYTES", 0)
    with pytest.raises(RuntimeError):
        with memory.reusing_freed_memory():
            raise RuntimeError("point failed")
    assert calls == [1] and memory._reusing == 0

