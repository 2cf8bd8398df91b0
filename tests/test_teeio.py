"""The ``tee-io`` protocol (replay/protocols/teeio.py, prices in models/h100/teeio.py), checked by hand.

Round preset (tests/handgraph.py): PCIe 1 GB/s (1 byte/ns) + 1 us latency; [tee_io]: 1000 B per
TLP, no TLP overhead, a 100 B MAC per TLP and nothing else, so a transfer's IDE wire bytes are
1.1x its bytes; IDE adds 500 ns of latency; NVLink 10 GB/s, encrypted at half of it (ratio 0.5)
with 500 ns more per ring step.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from fastrack_core.errors import ConfigError
from fastrack_core.schema import CopyDir, HostMem
from graphs import HandGraph, collective_graph
from handgraph import round_model, round_raw
from replay.pipeline.engine import schedule
from replay.plugins import load_protocol
from replay.protocols import DerivedKind


def run(graph, protocol, model):
    out = load_protocol(protocol)(graph, model)
    out.validate()
    return out, schedule(out)


def one_copy(nbytes=1_000_000, direction=CopyDir.H2D, host_mem=HostMem.PINNED):
    """call R (100 ns) issues a copy on stream 0; the thread then does 50 ns of CPU work N."""
    h = HandGraph()
    r = h.call(100)
    m = h.copy(nbytes, direction, 0, r, host_mem=host_mem)
    n = h.cpu(50)
    return h.build(), r, m, n


def test_ide_wire_bytes_by_hand_on_the_shipped_preset():
    # h100-sxm [tee_io]: 256 B TLPs that already carry 24 B each; IDE adds a 4 B prefix and a 12 B MAC
    # per TLP. 1 MiB = 4096 TLPs; 4096 x 16 B of wire bytes at 256/280 payload bytes per wire byte =
    # 59,918.6 -> 59,919: 1,048,576 + 59,919 = 1,108,495; at 50 GB/s 22,170 ns (plain: 20,972 ns, +5.7%).
    from fastrack_h100 import H100Model

    m = H100Model.from_preset("h100-sxm")
    assert int(m.ide_wire_bytes(1 << 20)) == 1_108_495
    assert int(m.ide_pcie_ns(1 << 20, CopyDir.H2D)) == 22_170 and int(m.pcie_ns(1 << 20, CopyDir.H2D)) == 20_972
    # one MAC over 8 TLPs: 8 x 4 B prefixes + 12 B per 8 TLPs -> ceil(4096 x 44 x 256 / (8 x 280)) = ceil(20,597.03) = 20,598
    agg = m.with_overrides(["tee_io.ide_tlps_per_mac=8"])
    assert int(agg.ide_wire_bytes(1 << 20)) == (1 << 20) + 20_598
    assert int(m.ide_wire_bytes(0)) == 0


def test_h2d_copy_is_plain_dma_with_ide_bytes_and_latency():
    # none: the PCIe transfer starts with the call (launch edge, lag 0): 1 MB at 1 byte/ns = [0, 1_000_000],
    #       the copy completes 1 us later, 1_001_000. tee-io: 1.1 MB of wire bytes = [0, 1_100_000], + 1 us
    #       + 500 ns of IDE latency = 1_101_500. The host never waits (pinned: asynchronous): N = [100, 150].
    m = round_model()
    g, r, c, n = one_copy()
    _, none = run(g, "none", m)
    out, s = run(g, "tee-io", m)
    assert int(none.finish[c]) == 1_001_000 and int(s.finish[c]) == 1_101_500
    pcie = np.flatnonzero(out.kind == DerivedKind.PCIE)
    assert pcie.size == 1 and int(out.dur[pcie[0]]) == 1_100_000 and int(out.bytes[pcie[0]]) == 1_000_000
    assert (int(s.start[n]), int(s.finish[n])) == (100, 150)
    # no bounce buffer, no CPU or CE crypto, no submission node, no wait on the host
    for kind in (DerivedKind.CPU_ENCRYPT, DerivedKind.CE_DECRYPT, DerivedKind.CC_SUBMIT, DerivedKind.SYNC_WAIT):
        assert not np.any(out.kind == kind)
    assert out.hold_lane is None or not np.any(out.hold_lane >= 0)


def test_d2h_and_pageable_copies_keep_the_no_tee_shape():
    # a pageable D2H keeps none's staging copy and host wait; only the transfer is 10% longer + 500 ns
    m = round_model()
    g, r, c, n = one_copy(direction=CopyDir.D2H, host_mem=HostMem.PAGEABLE)
    none, s0 = run(g, "none", m)
    out, s = run(g, "tee-io", m)
    assert sorted(out.kind.tolist()) == sorted(none.kind.tolist())  # the same nodes
    assert np.any(out.kind == DerivedKind.HOST_STAGING) and np.any(out.kind == DerivedKind.SYNC_WAIT)
    assert int(s.finish[c]) - int(s0.finish[c]) == 100_000 + 500


def test_submission_cost_when_priced():
    # tee_io.submit_ns = 2 us: one submission node after R on its thread, [100, 2100]; N follows it,
    # [2100, 2150]; the copy's launch waits for it too: PCIe [2000, 1_102_000], done at 1_103_500.
    m = round_model("tee_io.submit_ns=2000")
    g, r, c, n = one_copy()
    out, s = run(g, "tee-io", m)
    sub = np.flatnonzero(out.kind == DerivedKind.CC_SUBMIT)
    assert sub.size == 1 and (int(s.start[sub[0]]), int(s.finish[sub[0]])) == (100, 2100)
    assert (int(s.start[n]), int(s.finish[n])) == (2100, 2150)
    assert int(s.finish[c]) == 1_103_500
    # the VM is still a CPU TEE: tee.host_work_ratio = 1.5 makes R 150 ns and N 75 ns: N = [150, 225]
    _, s = run(g, "tee-io", round_model("tee.host_work_ratio=1.5"))
    assert (int(s.start[n]), int(s.finish[n])) == (150, 225)


def test_collectives_on_encrypted_nvlink_by_hand():
    # 2 ranks, S = 2 MB, ring: each GPU sends 2(N-1)/N S = 2 MB in 2 steps.
    # none: 2 MB at 10 bytes/ns = 200_000 + 2 x 1 us = 202_000.
    # tee-io: 2 MB / 0.5 = 4 MB at 10 bytes/ns = 400_000 + 2 x (1 us + 500 ns) = 403_000; no CE staging.
    m = round_model()
    g, coll = collective_graph(2, 2_000_000, "ncclKernel_AllReduce_RING_LL_Sum_float")
    assert run(g, "none", m)[1].makespan == 202_000
    out, s = run(g, "tee-io", m)
    assert s.makespan == 403_000 and out.dur[coll].tolist() == [403_000, 403_000]
    assert not np.any(np.isin(out.kind, [DerivedKind.CE_ENCRYPT, DerivedKind.P2P_LINK, DerivedKind.P2P_SUBMIT]))
    # over PCIe peer-to-peer (topology.link = pcie: 1 GB/s, 2 us per step) the IDE bytes apply instead:
    # 2.2 MB -> 2_200_000 + 2 x (2 us + 500 ns) = 2_205_000
    p = round_model("topology.link=pcie")
    assert run(g, "tee-io", p)[1].makespan == 2_205_000


def test_a_preset_without_the_table_is_refused_in_one_line():
    from fastrack_h100 import H100Model

    raw = round_raw()
    del raw["tee_io"]
    m = H100Model.from_dict(raw, name="no-tee-io")
    g, *_ = one_copy()
    with pytest.raises(ConfigError, match=r"\[tee_io\] table") as info:
        load_protocol("tee-io")(g, m)
    assert "\n" not in str(info.value)


def test_compare_answers_what_tee_io_would_save(tmp_path):
    # a 64 MiB pinned H2D on the shipped preset: tee-io pays IDE's ~5.7% over none, baseline its CPU
    # encryption in the calling thread (many times more): tee-io is between the two
    trace = tmp_path / "h2d.parquet"
    subprocess.run([sys.executable, "-m", "tracegen.cli", "synth", "memcpy", "--bytes", "64MiB", "--direction", "h2d",
                    "--memory", "pinned", "--repeat", "1", "-o", str(trace)], check=True, capture_output=True)
    from click.testing import CliRunner

    from replay.frontend.cli import main

    res = CliRunner().invoke(main, ["compare", str(trace), "--protocols", "none,baseline,fastrack,tee-io", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["protocol"]: r["slowdown_vs_none"] for r in json.loads(res.output)["rows"]}
    assert 1.0 < rows["tee-io"] < 1.07 < rows["baseline"]
