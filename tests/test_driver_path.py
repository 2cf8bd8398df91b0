"""The CC driver path of one push (docs/model.md "The driver path"), worked by hand.

Round preset (tests/handgraph.py) with: CPU AES-GCM 1 GB/s without call overhead (1 byte = 1 ns),
PCIe 1 GB/s + 1 us latency, CE crypto 2 GB/s, one bounce slot per chunk, and for these tests
``submit.segment_bytes = 100`` (100 ns), ``submit.wlc_push_bytes = 50`` (50 ns),
``submit.semaphore_bytes = 10`` (10 ns), a work-launch round trip of 1000 ns per push, one VM
exit of 200 ns per push (doorbell) and per wait, and no copy counted as client data
(``direct.h2d = none``: one CPU pass).
"""

from __future__ import annotations

import numpy as np

from fastrack_core.schema import CopyDir, OpKind
from graphs import HandGraph
from handgraph import round_model
from replay.pipeline.engine import schedule
from replay.plugins import load_protocol
from replay.protocols import DerivedKind

DRIVER = dict(**{"submit.segment_bytes": 100, "submit.wlc_push_bytes": 50, "submit.semaphore_bytes": 10,
                 "submit.kernel_ns": 1000, "submit.copy_ns": 1000, "tee.exit_ns": 200, "tee.exits_per_push": 1,
                 "tee.exits_per_wait": 1, "direct.h2d": "none"})


def _run(graph, protocol, **changes):
    model = round_model(**{**DRIVER, **changes})
    out = load_protocol(protocol)(graph, model)
    out.validate()
    return out, schedule(out)


def _one(out, s, kind, lane=None):
    idx = np.flatnonzero(out.kind == kind)
    if lane is not None:
        idx = idx[out.lane[idx] == lane]
    assert idx.size == 1, (kind, idx)
    return int(s.start[idx[0]]), int(s.finish[idx[0]])


def _small_copy():
    """R (a 100 ns cudaMemcpyAsync) issues a 1000-byte pinned H2D copy M; then 50 ns of CPU work N."""
    h = HandGraph()
    r = h.call(100)
    m = h.copy(1000, CopyDir.H2D, 0, r)
    n = h.cpu(50)
    return h.build(), r, m, n


def test_small_copy_timeline_by_hand():
    """One 1000-byte H2D copy, a crossing toll of 3000 ns:

    host thread: R [0, 100]; push: encrypt segment [100, 200], encrypt WLC push [200, 250],
    doorbell VM exit [250, 450], work-launch round trip [450, 1450]; the copy's chunk is
    encrypted [1450, 2450] (1000 B at 1 GB/s).
    GPU side: the copy may start at R's start + the push (100 + 50 + 200 + 1000 = 1350); the
    crossing toll on the H2D secure channel [1350, 4350]; then PCIe [4350, 5350] and the CE
    decryption [4350, 4850] (1000 B at 2 GB/s); the copy is done at
    max(4850, 5350 + 1000 latency + 500 for the last page's decryption) = 6850.
    host: sync_wait [6850, 6850], completion (decrypt 10 B + one VM exit) [6850, 7060], N [7060, 7110].
    """
    g, r, m, n = _small_copy()
    out, s = _run(g, "baseline", **{"submit.crossing_ns": 3000})
    thread = int(out.lane[r])
    assert (int(s.start[r]), int(s.finish[r])) == (0, 100)
    enc = np.flatnonzero(out.kind == DerivedKind.CPU_ENCRYPT)
    assert sorted((int(s.start[i]), int(s.finish[i]), int(out.bytes[i])) for i in enc) == [
        (100, 200, 100), (200, 250, 50), (1450, 2450, 1000)]
    assert _one(out, s, DerivedKind.P2P_SUBMIT) == (250, 450)  # the doorbell's VM exit
    assert _one(out, s, DerivedKind.CC_SUBMIT) == (450, 1450)
    ce_h2d = int(out.lane[np.flatnonzero(out.kind == DerivedKind.CE_DECRYPT)[0]])
    assert _one(out, s, DerivedKind.P2P_SYNC, ce_h2d) == (1350, 4350)  # the crossing toll
    assert _one(out, s, DerivedKind.PCIE) == (4350, 5350)
    assert _one(out, s, DerivedKind.CE_DECRYPT) == (4350, 4850)
    assert (int(s.start[m]), int(s.finish[m])) == (6850, 6850)
    assert _one(out, s, DerivedKind.SYNC_WAIT) == (6850, 6850)
    assert _one(out, s, DerivedKind.P2P_SYNC, thread) == (6850, 7060)  # the completion semaphore
    assert (int(s.start[n]), int(s.finish[n])) == (7060, 7110)
    assert int(s.finish.max()) == 7110


def test_small_copy_without_toll_has_no_toll_node():
    """crossing_ns = 0 (the H100 default): PCIe and the CE start once the chunk is encrypted
    (2450); done at 2450 + 1000 + 1000 + 500 = 4950; completion [4950, 5160]; N [5160, 5210]."""
    g, r, m, n = _small_copy()
    out, s = _run(g, "baseline")
    assert np.count_nonzero(out.kind == DerivedKind.P2P_SYNC) == 1  # the completion only
    assert _one(out, s, DerivedKind.PCIE) == (2450, 3450)
    assert int(s.finish[m]) == 4950
    assert (int(s.start[n]), int(s.finish[n])) == (5160, 5210)


def test_non_blocking_h2d_rule_releases_the_thread():
    """copy_blocks_host = d2h: the H2D copy returns once its chunk is encrypted (2450): no wait
    for the copy and no completion semaphore; N [2450, 2500] while the copy ends at 4950."""
    g, r, m, n = _small_copy()
    out, s = _run(g, "baseline", **{"submit.copy_blocks_host": "d2h"})
    assert np.count_nonzero(out.kind == DerivedKind.P2P_SYNC) == 0
    assert (int(s.start[n]), int(s.finish[n])) == (2450, 2500)
    assert int(s.finish[m]) == 4950


def test_kernel_launch_timeline_by_hand():
    """R (100 ns cudaLaunchKernel) launches kernel K (5000 ns); then N (50 ns of CPU work); the
    CPU TEE slows host work by 1.5x (tee.host_work_ratio):

    host: R [0, 150]; encrypt segment [150, 250], WLC push [250, 300], doorbell exit [300, 500],
    round trip [500, 1500]; N [1500, 1575] (50 x 1.5).
    GPU: K starts at R's start + 1350 (the push) = 1350 and ends at 6350 (not scaled: GPU work).
    """
    h = HandGraph()
    r = h.call(100)
    k = h.kernel(5000, 0, r)
    n = h.cpu(50)
    g = h.build()
    out, s = _run(g, "baseline", **{"tee.host_work_ratio": 1.5})
    assert (int(s.start[r]), int(s.finish[r])) == (0, 150)
    enc = np.flatnonzero(out.kind == DerivedKind.CPU_ENCRYPT)
    assert sorted((int(s.start[i]), int(s.finish[i])) for i in enc) == [(150, 250), (250, 300)]
    assert _one(out, s, DerivedKind.P2P_SUBMIT) == (300, 500)
    assert _one(out, s, DerivedKind.CC_SUBMIT) == (500, 1500)
    assert (int(s.start[n]), int(s.finish[n])) == (1500, 1575)
    assert (int(s.start[k]), int(s.finish[k])) == (1350, 6350)
    # without CC nothing of the push, and no TEE cost on the host
    out0, s0 = _run(g, "none", **{"tee.host_work_ratio": 1.5})
    assert int(s0.finish[r]) == 100 and int(s0.start[k]) == 0


def test_graph_launch_is_one_push():
    """A cudaGraphLaunch of three kernels is one push: one segment, one WLC push, one round trip."""
    h = HandGraph()
    r = h.call(100)
    ks = [h.kernel(1000, 0, r) for _ in range(3)]
    g = h.build()
    out, s = _run(g, "baseline")
    assert np.count_nonzero(out.kind == DerivedKind.CPU_ENCRYPT) == 2
    assert np.count_nonzero(out.kind == DerivedKind.CC_SUBMIT) == 1
    assert int(s.start[ks[0]]) == 1350


def test_push_prices_follow_the_model():
    """model.submit_ns is the push's host time: encryptions + doorbell exits + round trip (0 for
    kinds that push nothing); the C++ core prices cc_submit as the round trip alone."""
    m = round_model(**DRIVER)
    assert m.submit_ns(int(OpKind.KERNEL)).item() == 100 + 50 + 200 + 1000
    assert m.push_round_trip_ns(int(OpKind.MEMCPY)).item() == 1000
    assert m.submit_ns(int(OpKind.CPU)).item() == 0
    assert m.completion_ns() == 10 + 200
