"""Protocol transforms: hand-checked timings under a round-number preset, and properties on random graphs.

Round preset (tests/handgraph.py, ROUND): PCIe 1 GB/s each way (1 MB = 1 ms) + 1 us latency,
CPU AES-GCM 1 GB/s in the calling thread, pageable staging 10 GB/s, copy-engine crypto 2 GB/s
(one secure channel per direction, 2 copy engines for Fastrack's split), 1 us encrypted submission
per call, bounce slots of 1 MB (2 of them), H2D direct-eligible, D2H not; 4 KiB crypto pages.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fastrack_core.errors import GraphError
from fastrack_core.schema import CopyDir, DepKind, HostMem, OpKind
from graphs import HandGraph, big_graph
from handgraph import round_model
from replay.pipeline.engine import schedule
from replay.graph import Category, OpGraph
from replay.pipeline.results import critical_path, summarize
from replay.names import NONE
from replay.plugins import PROTOCOLS_GROUP, ProtocolAlias, available_protocols, load_entry, load_protocol
from replay.protocols import DerivedKind
from replay.protocols.cc import CCProtocol


def _own_names() -> list[str]:
    """Every installed protocol under its own name (the registry, so that a new protocol is tested
    without editing this file). Aliases are left out: each names another protocol, tested under its
    own name, or a multi-GPU system with options, which refuses a graph without collectives
    (tests/test_multigpu.py)."""
    return [p for p in available_protocols() if not isinstance(load_entry(PROTOCOLS_GROUP, "protocol", p), ProtocolAlias)]


def _is_cc(name: str) -> bool:
    """Whether the protocol's host<->GPU side is the H100 CC data path (replay/protocols/cc.py):
    what CC adds to a copy (CE and CPU crypto stages, the host waiting for the copy) is checked on those."""
    obj = load_protocol(name)
    return isinstance(obj, CCProtocol) or isinstance(getattr(obj, "host", None), CCProtocol)


TEE = [p for p in _own_names() if p != NONE]  # every TEE protocol installed
ALL = [NONE] + TEE
CC = [p for p in TEE if _is_cc(p)]
FIXES = [p for p in TEE if p.partition(":")[0] == "fastrack"]  # Fastrack, and each of its fixes alone


def test_the_protocol_lists_are_the_registry():
    assert NONE in available_protocols() and {"baseline", "fastrack", "ppcie"} <= set(TEE)
    assert "cc-multi" not in TEE  # an alias of baseline
    assert set(FIXES) >= {"fastrack", "fastrack:direct", "fastrack:auth", "fastrack:overlap"}
    assert set(CC) >= {"baseline", "ppcie", *FIXES}


def run(graph: OpGraph, protocol: str, model=None):
    model = model or round_model()
    out = load_protocol(protocol)(graph, model)
    out.validate()
    return out, schedule(out)


def one_copy(direction, nbytes=2_000_000, host_mem=HostMem.PINNED):
    """call R (100 ns) issues a copy on stream 0; the thread then does 50 ns of CPU work N."""
    h = HandGraph()
    r = h.call(100)
    m = h.copy(nbytes, direction, 0, r, host_mem=host_mem)
    nxt = h.cpu(50)
    return h.build(), r, m, nxt


# ------------------------------------------------------------------------------ hand-checked


def test_h2d_none():
    # PCIe 2 MB at 1 GB/s: [0, 2_000_000]; the copy completes 1 us later; the host never waits.
    g, r, m, nxt = one_copy(CopyDir.H2D)
    out, s = run(g, "none")
    assert s.finish[m] == 2_001_000
    assert s.start[nxt] == 100
    assert s.makespan == 2_001_000


def test_pageable_none_stages_on_the_calling_thread():
    # H2D pageable: the thread copies 2 MB into staging at 10 GB/s [100, 200_100] and returns; the DMA
    # streams behind it [0, 2_000_000] (it starts with the copy's prerequisites), done at 2_001_000.
    g, r, m, nxt = one_copy(CopyDir.H2D, host_mem=HostMem.PAGEABLE)
    out, s = run(g, "none")
    st = np.flatnonzero(out.kind == DerivedKind.HOST_STAGING)
    assert s.start[st].tolist() == [100] and s.finish[st].tolist() == [200_100]
    assert out.lane[st[0]] == out.lane[r]
    assert s.start[nxt] == 200_100 and s.finish[m] == 2_001_000
    # D2H pageable: the call returns only once the copy is complete and out of staging
    g, r, m, nxt = one_copy(CopyDir.D2H, host_mem=HostMem.PAGEABLE)
    out, s = run(g, "none")
    assert s.start[nxt] == s.finish[m] == 2_001_000


def test_h2d_baseline_pipelined_copy_hand_worked():
    # Round preset, 2 MB H2D from pinned memory, direct.h2d = "all" (the data arrived encrypted), so the
    # baseline pays TWO CPU passes per 1 MB chunk (decrypt the client's ciphertext + re-encrypt): 2 ms.
    # R [0,100]; submit [100,1100]; calling thread, per chunk: decrypt the client's ciphertext, then
    # encrypt for the GPU: dec0 [1100, 1_001_100], enc0 [1_001_100, 2_001_100],
    # dec1 [2_001_100, 3_001_100], enc1 [3_001_100, 4_001_100].
    # Chunk 0: PCIe and the CE secure copy start together once enc0 is done: pcie0 [2_001_100, 3_001_100],
    #   ce0 [2_001_100, 2_501_100] (1 MB at 2 GB/s); done0 = max(ce0 end, pcie0 end + 1 us latency +
    #   one 4 KiB page at 2 GB/s = 2048 ns) = 3_004_148.
    # Chunk 1: gate enc1 = 4_001_100 > done0: pcie1 [4_001_100, 5_001_100], ce1 [4_001_100, 4_501_100];
    #   done1 = 5_001_100 + 1000 + 2048 = 5_004_148 = the copy; the host waits for it, N after.
    g, r, m, nxt = one_copy(CopyDir.H2D)
    out, s = run(g, "baseline")
    enc = np.flatnonzero(out.kind == DerivedKind.CPU_ENCRYPT)
    dec = np.flatnonzero(out.kind == DerivedKind.CPU_RECRYPT)  # decrypting the client's ciphertext
    pcie = np.flatnonzero(out.kind == DerivedKind.PCIE)
    ce = np.flatnonzero(out.kind == DerivedKind.CE_DECRYPT)
    assert (out.lane[enc] == out.lane[r]).all() and (out.lane[dec] == out.lane[r]).all()  # the calling thread
    assert s.start[dec].tolist() == [1100, 2_001_100]
    assert s.start[enc].tolist() == [1_001_100, 3_001_100] and s.finish[enc].tolist() == [2_001_100, 4_001_100]
    assert s.start[pcie].tolist() == [2_001_100, 4_001_100] and s.start[ce].tolist() == [2_001_100, 4_001_100]
    assert s.finish[ce].tolist() == [2_501_100, 4_501_100]
    assert s.finish[m] == 5_004_148 and s.start[nxt] == 5_004_148 and s.makespan == 5_004_198
    assert not np.any(out.kind == DerivedKind.GPU_AUTH)  # the tag is checked inside the CE operation
    # from pinned memory but small (under min_bytes) the data is host-built: one CPU pass (1 ms per chunk)
    out, s = run(g, "baseline", round_model("direct.min_bytes=10000000"))
    enc = np.flatnonzero(out.kind == DerivedKind.CPU_ENCRYPT)
    assert s.finish[enc].tolist() == [1_001_100, 2_001_100]
    assert not np.any(out.kind == DerivedKind.CPU_RECRYPT)


def test_h2d_ce_bound_chunk():
    # CE at 0.5 GB/s (slower than PCIe): chunk 0 done at ce0's end, and the channel serialises chunks.
    g, r, m, nxt = one_copy(CopyDir.H2D)
    out, s = run(g, "fastrack:direct", round_model("ce.crypto_gb_s=0.5"))
    # no CPU pass; pcie0 [1000, 1_001_000], ce0 [1000, 2_001_000]; ce1 waits for ce0: [2_001_000, 4_001_000]
    ce = np.flatnonzero(out.kind == DerivedKind.CE_DECRYPT)
    assert s.start[ce].tolist() == [1000, 2_001_000]
    assert s.finish[m] == 4_001_000


def test_h2d_single_fixes_and_fastrack():
    g, r, m, nxt = one_copy(CopyDir.H2D)
    # direct: no CPU pass: pcie [1000, 2_001_000]; ce0 [1000, 501_000]; ce1 after done0 = 1_004_048;
    #   done1 = 2_001_000 + 3048
    assert run(g, "fastrack:direct")[1].finish[m] == 2_004_048
    # auth: the CE crypto splits over 2 engines: one page's tail is 1024 ns: 5_001_100 + 1000 + 1024
    assert run(g, "fastrack:auth")[1].finish[m] == 5_003_124
    # overlap: pcie0 and ce0 start with enc0 (after dec0, at 1_001_100); chunk 1's PCIe starts when enc1
    #   starts (3_001_100); the copy ends one page after enc1: 4_001_100 + 4096 (page at PCIe) + 1000 + 2048
    assert run(g, "fastrack:overlap")[1].finish[m] == 4_008_244
    # all three: as direct with the split tail: 2_001_000 + 1000 + 1024
    assert run(g, "fastrack")[1].finish[m] == 2_003_024


def test_d2h_baseline_and_overlap():
    # baseline: ce_encrypt and PCIe start together at 1000 (launch lag = the submission):
    #   ce0 [1000, 501_000], pcie0 [1000, 1_001_000]; landed0 = max(1_001_000, 501_000 + 4096) + 1000;
    #   the CPU decrypts chunk 0 as soon as it landed: [1_002_000, 2_002_000] (the calling thread);
    #   chunk 1: ce1 [501_000, 1_001_000] after ce0, pcie1 [1_001_000, 2_001_000], landed 2_002_000 = M;
    #   cpu1 [2_002_000, 3_002_000]; N at 3_002_000.
    g, r, m, nxt = one_copy(CopyDir.D2H)
    out, s = run(g, "baseline")
    dec = np.flatnonzero(out.kind == DerivedKind.CPU_DECRYPT)
    assert s.start[dec].tolist() == [1_002_000, 2_002_000]
    assert s.finish[m] == 2_002_000
    assert s.start[nxt] == 3_002_000
    # overlap: the CPU decrypts as pages land; the call returns one page (4096 ns) after the last landed
    out, s = run(g, "fastrack:overlap")
    assert s.finish[m] == 2_002_000
    assert s.start[nxt] == 2_006_096


def test_d2h_qualifying_costs_two_passes():
    g, r, m, nxt = one_copy(CopyDir.D2H)
    out, s = run(g, "baseline", round_model("direct.d2h=all"))
    dec = np.flatnonzero(out.kind == DerivedKind.CPU_DECRYPT)
    enc = np.flatnonzero(out.kind == DerivedKind.CPU_RECRYPT)  # re-encrypted for the client after decryption
    assert s.start[dec].tolist() == [1_002_000, 3_002_000] and s.start[enc].tolist() == [2_002_000, 4_002_000]
    assert s.start[nxt] == 5_002_000
    out, s = run(g, "fastrack:direct", round_model("direct.d2h=all"))
    assert not np.any(out.kind == DerivedKind.CPU_DECRYPT) and not np.any(out.kind == DerivedKind.CPU_RECRYPT)
    assert s.start[nxt] == s.finish[m]


def test_direct_pageable_copy_keeps_the_staging_copy():
    g, r, m, nxt = one_copy(CopyDir.H2D, host_mem=HostMem.PAGEABLE)
    out, s = run(g, "fastrack:direct")
    st = np.flatnonzero(out.kind == DerivedKind.HOST_STAGING)
    assert len(st) == 2 and (out.dur[st] == 100_000).all()  # 1 MB at 10 GB/s per chunk
    assert not np.any(out.kind == DerivedKind.CPU_ENCRYPT)


def test_graph_launch_is_one_submission():
    # one call launching 3 kernels (a graph launch): one 1 us submission on the host, and every kernel
    # is delayed by that same 1 us, not by the sum
    h = HandGraph()
    r = h.call(100)
    ks = [h.kernel(10, i, r) for i in range(3)]
    nxt = h.cpu(10)
    out, s = run(h.build(), "baseline")
    sub = np.flatnonzero(out.kind == DerivedKind.CC_SUBMIT)
    assert out.dur[sub].tolist() == [1000]
    assert [int(s.start[k]) for k in ks] == [1000, 1000, 1000]
    assert s.start[nxt] == 1100


def test_bounce_back_pressure():
    # one slot, host-built data (one CPU pass): enc1 must wait until pcie0 frees the slot:
    # enc0 [1100, 1_001_100], pcie0 [1_001_100, 2_001_100], enc1 [2_001_100, 3_001_100], pcie1 [.., 4_001_100]
    g, r, m, nxt = one_copy(CopyDir.H2D)
    out, s = run(g, "baseline", round_model("bounce.slots=1", "direct.h2d=none"))
    enc = np.flatnonzero(out.kind == DerivedKind.CPU_ENCRYPT)
    pcie = np.flatnonzero(out.kind == DerivedKind.PCIE)
    assert s.start[enc].tolist() == [1100, 2_001_100]
    assert s.finish[pcie].tolist() == [2_001_100, 4_001_100]
    # enc1 was ready at 1_001_100 (after enc0 on the calling thread) and waited 1 ms for the slot:
    # on the critical path as bounce_wait
    assert s.slot_wait[enc].tolist() == [0, 1_000_000]
    assert critical_path(out, s)["bounce_wait"] == 1_000_000
    pool = [r for r in summarize(out, s, "baseline", g.n).resources if r["type"] == "bounce_pool"]
    assert [(p["servers"], p["peak_servers"], p["ops"]) for p in pool] == [(1, 1, 2)]


def test_pool_doubles_when_every_slot_is_in_use():
    # as above (one slot at first, host-built data), but the pool may double up to 4: enc1 finds the only slot held
    # by pcie0 [1_001_100, 2_001_100] and the pool grows to 2 instead of waiting; later chunks find
    # a slot freed by then: 4 chunks need 2 slots, no chunk waits
    g, r, m, nxt = one_copy(CopyDir.H2D, 4_000_000)
    out, s = run(g, "baseline", round_model("bounce.slots=1", "bounce.growth=double", "bounce.max_slots=4", "direct.h2d=none"))
    enc = np.flatnonzero(out.kind == DerivedKind.CPU_ENCRYPT)
    assert s.start[enc].tolist() == [1100, 1_001_100, 2_001_100, 3_001_100]
    assert not s.slot_wait.any()
    pool = [r for r in summarize(out, s, "baseline", g.n).resources if r["type"] == "bounce_pool"]
    assert [(p["servers"], p["peak_servers"]) for p in pool] == [(1, 2)]
    # growth "none" keeps one slot: every chunk after the first waits for the previous PCIe transfer
    out, s = run(g, "baseline", round_model("bounce.slots=1", "bounce.growth=none", "bounce.max_slots=4", "direct.h2d=none"))
    assert s.slot_wait[np.flatnonzero(out.kind == DerivedKind.CPU_ENCRYPT)].tolist() == [0] + [1_000_000] * 3


def test_pool_is_shared_across_copies_and_threads():
    # two threads each copy 1 MB H2D; with one slot the second encryption waits for the first PCIe.
    h = HandGraph()
    r0 = h.call(100, thread=0)
    h.copy(1_000_000, CopyDir.H2D, 0, r0)
    r1 = h.call(100, thread=1)
    h.copy(1_000_000, CopyDir.H2D, 1, r1)
    out, s = run(h.build(), "baseline", round_model("bounce.slots=1"))
    enc = np.flatnonzero(out.kind == DerivedKind.CPU_ENCRYPT)
    pcie = np.flatnonzero(out.kind == DerivedKind.PCIE)
    assert s.start[enc[1]] == s.finish[pcie[0]]
    assert len({int(x) for x in out.hold_lane[enc]}) == 1  # one pool per rank


def test_slot_is_reclaimed_when_freed_not_in_ring_order():
    # host-built data, 2 slots, no growth. Thread 0 copies 3 MB D2H: chunk 0's PCIe write takes a
    # slot at once [1000, 1_001_000]; thread 1 then copies 1 MB H2D: its encryption takes the other
    # slot right after its submission [1100, 1_001_100] and its PCIe transfer frees it at 2_001_100.
    # The D2H's chunk 1 waited for a slot and gets that one, before its own chunk 0's decryption
    # frees the first (2_002_000): slots come back when freed, not in ring order (where the H2D
    # chunk, a later ring position, would have waited for the D2H's slots to come back).
    h = HandGraph()
    r0 = h.call(100, thread=0)
    big = h.copy(3_000_000, CopyDir.D2H, 0, r0)
    r1 = h.call(100, thread=1)
    small = h.copy(1_000_000, CopyDir.H2D, 1, r1)
    out, s = run(h.build(), "baseline", round_model("direct.h2d=none"))
    enc = np.flatnonzero(out.kind == DerivedKind.CPU_ENCRYPT)
    dec = np.flatnonzero(out.kind == DerivedKind.CPU_DECRYPT)
    pcie = np.flatnonzero(out.kind == DerivedKind.PCIE)
    d2h = pcie[out.copy_dir[out.origin[pcie]] == CopyDir.D2H]
    h2d = pcie[out.copy_dir[out.origin[pcie]] == CopyDir.H2D]
    assert s.start[enc].tolist() == [1100] and s.slot_wait[enc].tolist() == [0]
    assert s.finish[h2d].tolist() == [2_001_100] and s.finish[dec[0]] == 2_002_000
    assert s.start[d2h[1]] == 2_001_100 and s.slot_wait[d2h[1]] > 0
    assert s.finish[small] < s.finish[big] < s.finish[dec].max()


def test_large_d2h_waits_for_a_freed_slot():
    # 3 chunks, 2 slots, no growth: the CPU decrypts chunk by chunk, so chunk 2's PCIe write waits
    # for chunk 0's decryption to free a slot (baseline and overlap alike); the pool never grows
    g, r, m, nxt = one_copy(CopyDir.D2H, 3_000_000)
    for p in ("baseline", "fastrack:overlap"):
        out, s = run(g, p)
        dec = np.flatnonzero(out.kind == DerivedKind.CPU_DECRYPT)
        pcie = np.flatnonzero(out.kind == DerivedKind.PCIE)
        assert s.start[pcie[2]] >= s.finish[dec[0]], p
        assert int(s.lane_servers[out.hold_lane[pcie[0]]]) == 2, p
        assert not np.any(out.dep_kind == DepKind.RESOURCE), p  # slots are holds, not edges


def test_small_copy_not_delayed_by_unrelated_large_one():
    # thread 0 / stream 0: a 6 MB H2D (6 chunks, each 2 ms of CPU passes then one CE secure-copy
    # operation on the H2D channel); thread 1 / stream 1 issues a 4 KB H2D just after. The shared
    # lanes (the secure channel, PCIe) serve the small copy as soon as it is ready: it waits at most
    # for one big chunk in service on each of them, not for the whole transfer (issue-order FIFO
    # made it wait for all 6 CE operations).
    h = HandGraph()
    h.copy(6_000_000, CopyDir.H2D, 0, h.call(100, thread=0))
    small = h.copy(4096, CopyDir.H2D, 1, h.call(100, thread=1))
    out, s = run(h.build(), "baseline", round_model("bounce.max_slots=8"))
    alone = HandGraph()
    alone.copy(4096, CopyDir.H2D, 1, alone.call(100, thread=1))
    ref = run(alone.build(), "baseline", round_model("bounce.max_slots=8"))[1].finish[1]
    big_nodes = np.flatnonzero((out.origin == out.origin[1]) & (out.lane >= 0))
    shared = big_nodes[out.lanes.shared[out.lane[big_nodes]]]
    one_chunk_each = sum(int(out.dur[shared[out.lane[shared] == ln]].max()) for ln in np.unique(out.lane[shared]))
    assert ref <= s.finish[small] <= ref + one_chunk_each
    ce = np.flatnonzero((out.kind == DerivedKind.CE_DECRYPT) & (out.origin == out.origin[1]))
    assert ce.size == 6 and s.finish[small] < s.start[ce].max()


def _two_copies(big_dir: str, small_dir: str | None, big_bytes: int = 64 << 20):
    """Thread 1 / stream 1: a big pageable copy at t=0; thread 2 / stream 2, 10 us later: a 4 KiB one."""
    from tracefactory import op

    name = {"H2D": "Memcpy HtoD (Pageable -> Device)", "D2H": "Memcpy DtoH (Device -> Pageable)"}
    ops = [op("runtime", "cudaMemcpyAsync", 0, 5_000, thread=1),
           op("memcpy", name[big_dir], 6_000, 1_000_000, stream=1, device=0, bytes=big_bytes, copy_dir=big_dir,
              host_mem="pageable", deps=[(0, "launch")]),
           op("sync", "cudaStreamSynchronize", 5_000, 1_002_000, thread=1, deps=[(0, "program"), (1, "sync")])]
    if small_dir is not None:
        ops += [op("runtime", "cudaMemcpyAsync", 10_000, 5_000, thread=2),
                op("memcpy", name[small_dir], 16_000, 2_000, stream=2, device=0, bytes=4096, copy_dir=small_dir,
                   host_mem="pageable", deps=[(3, "launch")]),
                op("sync", "cudaStreamSynchronize", 15_000, 4_000, thread=2, deps=[(3, "program"), (4, "sync")])]
    return ops


@pytest.mark.parametrize("big_dir,small_dir", [("H2D", "D2H"), ("D2H", "H2D")])
@pytest.mark.parametrize("protocol", ["baseline", "fastrack"])
def test_small_copy_on_its_own_thread_is_not_delayed_by_a_large_one(tmp_path, big_dir, small_dir, protocol):
    # On the shipped preset, through the protocol: a 4 KiB copy on its own thread and stream
    # finishes within a few microseconds of when it finishes alone, not after the unrelated
    # 64 MiB copy's CE operations (H2D/D2H) or its slots coming back in ring order (D2H/H2D).
    from replay.pipeline.run import replay_trace
    from tracefactory import write

    both = replay_trace(write(tmp_path / "both.parquet", _two_copies(big_dir, small_dir)), protocol=protocol)
    alone = _two_copies(big_dir, small_dir)[3:]
    for o in alone:
        o["deps"] = [d - 3 for d in o["deps"]]
    ref = replay_trace(write(tmp_path / "alone.parquet", alone), protocol=protocol).schedule.finish[1]
    small, big = both.schedule.finish[4], both.schedule.finish[1]
    assert ref <= small <= ref + 10_000 < 1_000_000 < big



def test_kernel_launch_pays_submission_and_copy_is_host_synchronous():
    # kernel K (5 us) on stream 0 launched by R0; copy on stream 0 launched by R1 must wait for K
    # (stream order) and the host waits for the copy.
    h = HandGraph()
    r0 = h.call(100)
    k = h.kernel(5000, 0, r0)
    r1 = h.call(100)
    m = h.copy(0, CopyDir.H2D, 0, r1)
    nxt = h.cpu(10)
    g = h.build()
    out, s = run(g, "baseline")
    sub = np.flatnonzero(out.kind == DerivedKind.CC_SUBMIT)
    assert out.dur[sub].tolist() == [1000, 1000]  # one submission per call
    assert s.start[k] == 1000  # launch lag 0 + 1 us submission
    assert s.start[nxt] >= s.finish[k]
    assert s.start[nxt] == s.finish[m]
    # under none the host does not wait for the copy
    _, s0 = run(g, "none")
    assert s0.start[nxt] < s0.finish[k]


def test_cpu_crypto_workers():
    # two crypto threads: both chunks encrypt in parallel on the CPU_CRYPTO lane
    g, r, m, nxt = one_copy(CopyDir.H2D)
    out, s = run(g, "baseline", round_model("cpu_crypto.threads=2", "direct.h2d=none"))
    enc = np.flatnonzero(out.kind == DerivedKind.CPU_ENCRYPT)
    assert s.start[enc].tolist() == [1100, 1100]
    assert (out.lane[enc] != out.lane[r]).all()


def test_derived_nodes_are_labelled():
    g, *_ = one_copy(CopyDir.H2D)
    for p in ALL:
        out, _ = run(g, p)
        new = np.arange(g.n, out.n)
        assert (out.kind[new] >= 16).all()
        assert all(int(kd) in out.kind_names for kd in np.unique(out.kind[new]))
        assert (out.op_id[new] > g.op_id.max()).all()
        assert set(out.origin[new].tolist()) <= set(g.origin.tolist())
        cats = {DerivedKind(int(kd)): Category(int(c)) for kd, c in zip(out.kind[new], out.category[new])}
        if DerivedKind.PCIE in cats:
            assert cats[DerivedKind.PCIE] == Category.PCIE
        if DerivedKind.CPU_ENCRYPT in cats:
            assert cats[DerivedKind.CPU_ENCRYPT] == Category.CPU_CRYPTO


def test_copy_without_launcher():
    h = HandGraph()
    m = h.copy(1_500_000, CopyDir.H2D, 0, None)
    k = h.kernel(10, 0, None)
    for p in ALL:
        out, s = run(h.build(), p)
        assert s.start[k] >= s.finish[m]


def test_host_sync_cycle_is_reported():
    # a copy whose stream waits (event) for a kernel launched *after* the copy call: under CC the
    # call blocks until the copy is done, so that kernel can never be launched.
    h = HandGraph()
    r0 = h.call(10)
    m = h.copy(10, CopyDir.H2D, 0, r0)
    r1 = h.call(10)
    k = h.kernel(10, 1, r1)
    h.dep(k, m, DepKind.EVENT)
    g = h.build()
    run(g, "none")
    with pytest.raises(GraphError, match="host-synchronous"):
        run(g, "baseline")


# ------------------------------------------------------------------------------ properties


def random_graph(seed: int, ranks: int = 1, single_flow: bool = False) -> OpGraph:
    """Random trace graph; ``single_flow``: one host thread and one stream per rank."""
    rng = np.random.default_rng(seed)
    h = HandGraph()
    last_gpu: dict = {}
    for rank in range(ranks):
        threads = 1 if single_flow else int(rng.integers(1, 3))
        streams = 1 if single_flow else int(rng.integers(1, 4))
        for _ in range(int(rng.integers(3, 25))):
            t = int(rng.integers(threads))
            s = int(rng.integers(streams))
            x = rng.random()
            if x < 0.2:
                h.cpu(int(rng.integers(0, 5000)), thread=t, rank=rank)
            elif x < 0.5:
                r = h.call(int(rng.integers(1, 2000)), thread=t, rank=rank)
                last_gpu[(rank, s)] = h.kernel(int(rng.integers(0, 3_000_000)), s, r, rank=rank)
            elif x < 0.85:
                r = h.call(int(rng.integers(1, 2000)), thread=t, rank=rank)
                nbytes = int(rng.choice([0, 4, 4096, 700_000, 1_000_000, 2_500_000, 5_000_000]))
                d = CopyDir.H2D if rng.random() < 0.6 else CopyDir.D2H
                mem = HostMem.PINNED if rng.random() < 0.5 else HostMem.PAGEABLE
                last_gpu[(rank, s)] = h.copy(nbytes, d, s, r, rank=rank, dur=int(rng.integers(1, 1000)),
                                             host_mem=mem)
            elif x < 0.93 and (rank, s) in last_gpu:
                h.sync(last_gpu[(rank, s)], dur=int(rng.integers(0, 100)), thread=t, rank=rank)
            elif last_gpu:
                # cross-stream event: the next op on stream s2 waits for the last op of stream s
                s2 = int(rng.integers(streams))
                if (rank, s) in last_gpu and s2 != s:
                    r = h.call(10, thread=t, rank=rank)
                    kk = h.kernel(int(rng.integers(0, 100_000)), s2, r, rank=rank)
                    h.dep(last_gpu[(rank, s)], kk, DepKind.EVENT)
                    last_gpu[(rank, s2)] = kk
    return h.build()


SEEDS = st.integers(0, 2**32 - 1)
PROP = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def makespans(g, model, protocols=ALL):
    return {p: run(g, p, model)[1].makespan for p in protocols}


# Makespan guarantees hold for one flow per rank (one host thread, one stream): the shared lanes
# then never arbitrate between independent flows, and the schedule is monotone in every duration.
# With several flows, work-conserving shared lanes admit timing anomalies (Graham 1969; a faster
# stage can let a non-critical chunk take a server first): measured on these random graphs, a
# "better" setting was slower in about 0.3% of cases, by up to 10%. For those graphs the tests
# check what does not depend on arbitration: the work each fix or resource leaves on every lane.
SINGLE_FLOW = st.builds(lambda seed, ranks: random_graph(seed, ranks, single_flow=True), SEEDS, st.integers(1, 2))
BETTER = st.sampled_from(["cpu_crypto.core_gb_s=4.0", "cpu_crypto.call_overhead_ns=0", "pcie.h2d_bandwidth_gb_s=8.0",
                          "pcie.d2h_bandwidth_gb_s=3.0", "ce.crypto_gb_s=16.0", "ce.op_overhead_ns=0",
                          "host.staging_copy_gb_s=40.0", "bounce.slots=3", "bounce.slots=64", "bounce.growth=double",
                          "pcie.latency_ns=0", "submit.copy_ns=0", "submit.kernel_ns=0"])


@PROP
@given(SINGLE_FLOW)
def test_none_fastest_and_fixes_never_slower(g):
    ms = makespans(g, round_model())
    for p in TEE:
        assert ms["none"] <= ms[p], (p, ms)
    for p in FIXES:
        assert ms[p] <= ms["baseline"], (p, ms)


@PROP
@given(SINGLE_FLOW, BETTER)
def test_more_resources_never_slower(g, better):
    worse = round_model("ce.op_overhead_ns=300", "cpu_crypto.call_overhead_ns=200")
    better_model = worse.with_overrides([better])
    base = makespans(g, worse, ALL)
    more = makespans(g, better_model, ALL)
    for p in ALL:
        assert more[p] <= base[p], (p, better, base[p], more[p])


@PROP
@given(SINGLE_FLOW)
def test_more_crypto_workers_never_slower(g):
    # threads > 1 is a per-rank worker pool (not comparable with inline encryption, threads = 1).
    # The bounce pool may grow here: with a fixed 2-slot pool, more workers take slots earlier and
    # a greedy hand-out of a finite pool admits the same timing anomaly as shared lanes (found:
    # random_graph(1, 2, single_flow=True), baseline 1 ms slower with 5 workers than with 2).
    pool = ("bounce.growth=double", "bounce.max_slots=64")
    base = makespans(g, round_model("cpu_crypto.threads=2", *pool), TEE)
    more = makespans(g, round_model("cpu_crypto.threads=5", *pool), TEE)
    for p in TEE:
        assert more[p] <= base[p], (p, base[p], more[p])


def _work(g: OpGraph) -> dict[int, int]:
    """Busy time per lane type (sum of node durations)."""
    on = g.lane >= 0
    return {int(t): int(g.dur[on][g.lanes.type[g.lane[on]] == t].sum()) for t in np.unique(g.lanes.type)}


@PROP
@given(SEEDS, BETTER)
def test_fixes_and_resources_never_add_work_with_several_flows(seed, better):
    g = random_graph(seed, 2)
    base = {p: load_protocol(p)(g, round_model()) for p in ALL}
    work = {p: _work(out) for p, out in base.items()}
    for p in FIXES:
        assert all(w <= work["baseline"].get(t, 0) for t, w in work[p].items()), (p, work)
    for p in TEE:
        assert all(w <= work[p].get(t, 0) for t, w in work["none"].items()), (p, work)
        more = _work(load_protocol(p)(g, round_model(better)))
        assert all(w <= work[p].get(t, 0) for t, w in more.items()), (p, better, work[p], more)
        assert sum(critical_path(base[p], schedule(base[p])).values()) == schedule(base[p]).makespan


def _stage_bytes(out: OpGraph, kind: DerivedKind) -> dict[int, int]:
    sel = np.flatnonzero(out.kind == kind)
    res: dict[int, int] = {}
    for o, b in zip(out.origin[sel].tolist(), out.bytes[sel].tolist()):
        res[o] = res.get(o, 0) + b
    return res


@PROP
@given(SEEDS)
def test_bytes_conserved_per_copy(seed):
    g = random_graph(seed, 2)
    copies = np.flatnonzero((g.kind == OpKind.MEMCPY) & np.isin(g.copy_dir, [CopyDir.H2D, CopyDir.D2H]))
    want = {int(g.origin[i]): int(g.bytes[i]) for i in copies}
    for p in ALL:
        out, _ = run(g, p)
        assert _stage_bytes(out, DerivedKind.PCIE) == want, p
        if p in CC:
            assert not np.any(out.kind == DerivedKind.GPU_AUTH), p  # no separate authentication stage
            ce = {**_stage_bytes(out, DerivedKind.CE_DECRYPT), **_stage_bytes(out, DerivedKind.CE_ENCRYPT)}
            assert ce == want, p
            cpu = {**_stage_bytes(out, DerivedKind.CPU_ENCRYPT), **_stage_bytes(out, DerivedKind.CPU_DECRYPT),
                   **_stage_bytes(out, DerivedKind.HOST_STAGING), **_stage_bytes(out, DerivedKind.CPU_RECRYPT)}
            assert all(cpu[o] == want[o] for o in cpu), p


def _arrays(g: OpGraph) -> dict:
    import dataclasses

    out = {}
    for f in dataclasses.fields(g):
        v = getattr(g, f.name)
        if isinstance(v, np.ndarray):
            out[f.name] = v.copy()
    for f in ("rank", "type", "key", "servers"):
        out["lanes." + f] = getattr(g.lanes, f).copy()
    out["lanes.names"] = g.lanes.names
    out["names"] = g.names
    return out


@PROP
@given(SEEDS)
def test_deterministic_and_input_untouched(seed):
    g = random_graph(seed, 2)
    before = _arrays(g)
    model = round_model()
    for p in ALL:
        a = load_protocol(p)(g, model)
        b = load_protocol(p)(g, model)
        for name, v in _arrays(a).items():
            w = _arrays(b)[name]
            assert (np.array_equal(v, w) if isinstance(v, np.ndarray) else v == w), (p, name)
        for name, v in _arrays(g).items():
            assert (np.array_equal(v, before[name]) if isinstance(v, np.ndarray) else v == before[name]), (p, name)


def test_one_call_launching_two_copies():
    # e.g. a graph launch: both copies are waited for, one after the other, on the calling thread
    h = HandGraph()
    r = h.call(100)
    a = h.copy(1_000_000, CopyDir.H2D, 0, r)
    b = h.copy(500_000, CopyDir.D2H, 1, r)
    nxt = h.cpu(10)
    for p in CC:
        out, s = run(h.build(), p)
        assert s.start[nxt] >= max(s.finish[a], s.finish[b]), p
        waits = np.flatnonzero(out.kind == DerivedKind.SYNC_WAIT)
        assert len(waits) == 2 and (out.lane[waits] == out.lane[r]).all()


def test_big_graph_small_scale_sanity():
    g = big_graph(20_000)
    ms = makespans(g, round_model())
    assert ms["none"] <= ms["fastrack"] <= ms["baseline"]
