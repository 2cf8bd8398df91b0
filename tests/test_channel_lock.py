"""The secure channel's lock across host threads (docs/model.md "The driver path", "Channels and
serialisation"), worked by hand.

Round preset (tests/handgraph.py) with CPU AES-GCM at 0.5 GB/s (1000 B = 2000 ns, no call
overhead), PCIe 1 GB/s + 1 us latency, CE crypto 2 GB/s, a 1 us push round trip per call, two
bounce slots, and no copy counted as client data (``direct.h2d = none``: one CPU pass). Two host
threads each issue one 1000-byte pinned copy at t = 0 on their own stream.
"""

from __future__ import annotations

import numpy as np
import pytest

from fastrack_core.schema import CopyDir
from graphs import HandGraph
from handgraph import round_model
from replay.graph import LaneType
from replay.pipeline.engine import schedule
from replay.plugins import load_protocol
from replay.protocols import DerivedKind

SLOW_CPU = {"cpu_crypto.core_gb_s": 0.5, "direct.h2d": "none"}


def _run(graph, protocol="baseline", *overrides, **changes):
    model = round_model(*overrides, **{**SLOW_CPU, **changes})
    out = load_protocol(protocol)(graph, model)
    out.validate()
    return out, schedule(out)


def _two_threads(direction, threads=(0, 1)):
    """R0 on thread ``threads[0]`` issues copy M0 on stream 0, R1 on thread ``threads[1]`` issues M1 on stream 1."""
    h = HandGraph()
    r0 = h.call(100, thread=threads[0])
    m0 = h.copy(1000, direction, 0, r0)
    r1 = h.call(100, thread=threads[1])
    m1 = h.copy(1000, direction, 1, r1)
    return h.build(), (r0, m0), (r1, m1)


def _span(s, idx):
    return [(int(s.start[i]), int(s.finish[i])) for i in idx]


def _stage(out, kind, copy):
    """The node of ``kind`` derived from copy node ``copy`` (one chunk)."""
    idx = np.flatnonzero((out.kind == kind) & (out.origin == out.origin[copy]))
    if kind == DerivedKind.SYNC_WAIT:  # the slot take (a 0 ns wait holding a bounce slot), not the copy's wait
        idx = idx[out.hold_lane[idx] >= 0]
    assert idx.size == 1, (kind, idx)
    return int(idx[0])


def _takes(out):
    """The slot takes: sync_wait nodes that hold a bounce slot."""
    return np.flatnonzero((out.kind == DerivedKind.SYNC_WAIT) & (out.hold_lane >= 0))


def test_h2d_encryptions_of_two_threads_serialise_on_one_channel():
    """Both threads: R [0, 100], push round trip [100, 1100], bounce slot taken at 1100 (one each).
    One channel: thread 0 encrypts [1100, 3100]; thread 1 waits for the lock and encrypts
    [3100, 5100]. PCIe 0 [3100, 4100], CE 0 [3100, 3600]: M0 done at 4100 + 1000 latency + 500
    (the last page's decryption) = 5600; PCIe 1 [5100, 6100], CE 1 [5100, 5600]: M1 done at 7600."""
    g, (r0, m0), (r1, m1) = _two_threads(CopyDir.H2D)
    out, s = _run(g)
    enc = [_stage(out, DerivedKind.CPU_ENCRYPT, m) for m in (m0, m1)]
    take = [_stage(out, DerivedKind.SYNC_WAIT, m) for m in (m0, m1)]
    assert out.lane[enc[0]] == out.lane[r0] and out.lane[enc[1]] == out.lane[r1]  # each in its own thread
    assert _span(s, take) == [(1100, 1100), (1100, 1100)]
    assert _span(s, enc) == [(1100, 3100), (3100, 5100)]
    assert s.slot_wait[enc].tolist() == [0, 2000]  # thread 1 waited 2 us for the channel
    assert _span(s, [_stage(out, DerivedKind.PCIE, m) for m in (m0, m1)]) == [(3100, 4100), (5100, 6100)]
    assert _span(s, [_stage(out, DerivedKind.CE_DECRYPT, m) for m in (m0, m1)]) == [(3100, 3600), (5100, 5600)]
    assert [int(s.finish[m]) for m in (m0, m1)] == [5600, 7600]
    # the lock is a pool of its own (one server, never growing); the slots stay in the bounce pool
    lock = int(out.hold_lane[enc[0]])
    assert out.hold_lane[enc[1]] == lock and out.hold_until[enc].tolist() == enc
    assert out.lanes.names[lock] == "rank0/csl_h2d" and out.lanes.type[lock] == LaneType.BOUNCE_POOL
    assert int(s.lane_servers[lock]) == 1
    assert {int(out.lanes.key[out.hold_lane[t]]) for t in take} == {0}  # the bounce pool


def test_h2d_encryptions_overlap_with_two_channels():
    """ce.secure_channels_per_direction = 2: both threads encrypt [1100, 3100] at once. PCIe is one
    link: PCIe 0 [3100, 4100], PCIe 1 [4100, 5100]; the CE operations run on the two channels,
    both [3100, 3600]. M0 done at 5600, M1 at 5100 + 1000 + 500 = 6600: 1 us earlier than on one
    channel."""
    g, (r0, m0), (r1, m1) = _two_threads(CopyDir.H2D)
    out, s = _run(g, "baseline", "ce.secure_channels_per_direction=2")
    enc = [_stage(out, DerivedKind.CPU_ENCRYPT, m) for m in (m0, m1)]
    assert _span(s, enc) == [(1100, 3100), (1100, 3100)]
    assert not s.slot_wait[enc].any()
    assert _span(s, [_stage(out, DerivedKind.PCIE, m) for m in (m0, m1)]) == [(3100, 4100), (4100, 5100)]
    assert _span(s, [_stage(out, DerivedKind.CE_DECRYPT, m) for m in (m0, m1)]) == [(3100, 3600), (3100, 3600)]
    assert [int(s.finish[m]) for m in (m0, m1)] == [5600, 6600]
    assert int(s.lane_servers[out.hold_lane[enc[0]]]) == 2


def test_d2h_decryptions_of_two_threads_serialise_on_one_channel():
    """D2H: each copy is launched at R's start plus the 1 us push (1000). CE 0 [1000, 1500] and
    PCIe 0 [1000, 2000]: chunk 0 has landed at max(2000, 1500 + 1000 for its last page on PCIe)
    + 1000 latency = 3500; CE 1 [1500, 2000] (one channel) and PCIe 1 [2000, 3000]: landed at
    max(3000, 2000 + 1000) + 1000 = 4000. Thread 0 decrypts [3500, 5500]; thread 1's chunk has
    landed at 4000 but the lock is held until 5500: [5500, 7500]. With two channels CE 1 runs
    [1000, 1500] on the second one, the chunk still lands at 4000 (PCIe is one link) and thread 1
    decrypts at once: [4000, 6000]."""
    g, (r0, m0), (r1, m1) = _two_threads(CopyDir.D2H)
    out, s = _run(g)
    dec = [_stage(out, DerivedKind.CPU_DECRYPT, m) for m in (m0, m1)]
    assert _span(s, [_stage(out, DerivedKind.CE_ENCRYPT, m) for m in (m0, m1)]) == [(1000, 1500), (1500, 2000)]
    assert _span(s, [_stage(out, DerivedKind.PCIE, m) for m in (m0, m1)]) == [(1000, 2000), (2000, 3000)]
    assert _span(s, dec) == [(3500, 5500), (5500, 7500)]
    assert s.slot_wait[dec].tolist() == [0, 1500]
    assert out.lanes.names[int(out.hold_lane[dec[0]])] == "rank0/csl_d2h"
    assert not _takes(out).size  # a D2H decryption holds no bounce slot itself
    out, s = _run(g, "baseline", "ce.secure_channels_per_direction=2")
    assert _span(s, [_stage(out, DerivedKind.CE_ENCRYPT, m) for m in (m0, m1)]) == [(1000, 1500), (1000, 1500)]
    dec = [_stage(out, DerivedKind.CPU_DECRYPT, m) for m in (m0, m1)]
    assert _span(s, dec) == [(3500, 5500), (4000, 6000)]


def test_opposite_directions_take_different_locks():
    """Thread 0 copies H2D, thread 1 D2H: one lane each per direction, so no lock at all (each
    direction's channel is used by one thread), and the graph is the one without threads sharing."""
    h = HandGraph()
    m0 = h.copy(1000, CopyDir.H2D, 0, h.call(100, thread=0))
    m1 = h.copy(1000, CopyDir.D2H, 1, h.call(100, thread=1))
    out, s = _run(h.build())
    assert not _takes(out).size
    assert not any(n.endswith(("/csl_h2d", "/csl_d2h")) for n in out.lanes.names)
    enc, dec = _stage(out, DerivedKind.CPU_ENCRYPT, m0), _stage(out, DerivedKind.CPU_DECRYPT, m1)
    assert _span(s, [enc]) == [(1100, 3100)] and s.slot_wait[enc] == 0 and s.slot_wait[dec] == 0


@pytest.mark.parametrize("protocol", ["baseline", "fastrack:overlap"])
def test_one_thread_adds_no_lock(protocol):
    """Two copies from ONE thread: the thread already runs one crypto stage at a time, so the lock
    could never bind and is left out (the graph, and so every digest, is what it was)."""
    g, (r0, m0), (r1, m1) = _two_threads(CopyDir.H2D, threads=(0, 0))
    out, s = _run(g, protocol)
    assert not _takes(out).size
    assert not any(n.endswith("/csl_h2d") for n in out.lanes.names)
    enc = [_stage(out, DerivedKind.CPU_ENCRYPT, m) for m in (m0, m1)]
    assert {int(out.lanes.key[out.hold_lane[e]]) for e in enc} == {0}  # the encryption takes its slot


def test_crypto_workers_are_not_locked():
    """cpu_crypto.threads = 2 (the worker-pool what-if): no lock is modelled; both threads' chunks
    encrypt at once on the two workers, [1100, 3100]."""
    g, (r0, m0), (r1, m1) = _two_threads(CopyDir.H2D)
    out, s = _run(g, "baseline", "cpu_crypto.threads=2")
    enc = [_stage(out, DerivedKind.CPU_ENCRYPT, m) for m in (m0, m1)]
    assert _span(s, enc) == [(1100, 3100), (1100, 3100)]
    assert not _takes(out).size


def test_overlap_streams_only_once_the_encryption_started():
    """fastrack:overlap streams a chunk's PCIe transfer and CE operation with its encryption.
    Thread 0: encryption [1100, 3100], PCIe [1100, 2100], CE [1100, 1600]; M0 done one page after
    the encryption: 3100 + 1000 (PCIe) + 1000 (latency) + 500 (CE) = 5600. Thread 1 waits for the
    lock: encryption [3100, 5100], and its PCIe transfer [3100, 4100] and CE operation [3100, 3600]
    start with it, not when its slot was taken (1100); M1 done at 5100 + 2500 = 7600."""
    g, (r0, m0), (r1, m1) = _two_threads(CopyDir.H2D)
    out, s = _run(g, "fastrack:overlap")
    assert _span(s, [_stage(out, DerivedKind.SYNC_WAIT, m) for m in (m0, m1)]) == [(1100, 1100)] * 2
    assert _span(s, [_stage(out, DerivedKind.CPU_ENCRYPT, m) for m in (m0, m1)]) == [(1100, 3100), (3100, 5100)]
    assert _span(s, [_stage(out, DerivedKind.PCIE, m) for m in (m0, m1)]) == [(1100, 2100), (3100, 4100)]
    assert _span(s, [_stage(out, DerivedKind.CE_DECRYPT, m) for m in (m0, m1)]) == [(1100, 1600), (3100, 3600)]
    assert [int(s.finish[m]) for m in (m0, m1)] == [5600, 7600]


TWO_THREADS = """
import threading
import torch

def copy():
    x = torch.ones(1 << 20, dtype=torch.uint8).pin_memory()
    x.to("cuda", non_blocking=True)
    torch.cuda.synchronize()

threads = [threading.Thread(target=copy) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


def test_threaded_capture(tmp_path):
    """An emulated capture of a script whose two threads each copy 1 MiB of pinned memory to the GPU
    at the same time (tracegen capture, modelled host time): on the shipped preset the second
    thread's encryption starts when the first one's ends; with two channels both start together."""
    pytest.importorskip("torch")
    from click.testing import CliRunner

    from replay.pipeline.run import replay_trace
    from tracegen.cli import main as tracegen_main

    script, trace = tmp_path / "two_copies.py", tmp_path / "t.parquet"
    script.write_text(TWO_THREADS)
    res = CliRunner().invoke(tracegen_main, ["capture", "--overwrite", "--host-time", "modelled", "-o", str(trace),
                                             str(script)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    spans = {}
    for k in (1, 2):
        rep = replay_trace(trace, protocol="baseline", overrides=[f"ce.secure_channels_per_direction={k}"])
        g, s = rep.graph, rep.schedule
        enc = np.flatnonzero((g.kind == DerivedKind.CPU_ENCRYPT) & (g.bytes == 1 << 20))
        assert enc.size == 2 and len({int(g.lane[i]) for i in enc}) == 2  # one chunk on each thread
        enc = enc[np.argsort(s.start[enc], kind="stable")]
        spans[k] = (_span(s, enc), int(s.slot_wait[enc[1]]), s.makespan)
    (a, b), waited, one = spans[1]
    assert b[0] == a[1]  # one channel: the second encryption starts when the first ends,
    assert waited == a[1] - a[0] > 0  # having been ready when the first started
    (c, d), waited, two = spans[2]
    assert waited == 0
    assert c[0] == d[0] == a[0] and c[1] == d[1] == a[1]  # two channels: side by side
    assert two < one
