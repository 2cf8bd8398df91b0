"""Features CC switches off (replay/protocols/featuresoff.py), each on a hand graph, plus properties.

Round preset (tests/handgraph.py) with a ``[features]`` table: NVLink 10 GB/s and 1 us per ring step;
NVLS all-reduce at 20 GB/s of algorithm bandwidth + 2 us. Ring all-reduce of S per rank on N GPUs:
2(N-1)/N S over the link + 2(N-1) steps; NVLS: S / 20 GB/s + 2 us.
"""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from fastrack_core.schema import CopyDir, HostMem
from graphs import HandGraph, collective_graph
from handgraph import round_raw
from replay.pipeline.engine import schedule
from replay.plugins import load_protocol
from replay.protocols import DerivedKind
from replay.protocols.featuresoff import CC_OFF, features_off, host_register_off, multicast_off, price_reference

FEATURES = {"nvls": True, "nvls_allreduce_gb_s": 20.0, "nvls_latency_ns": 2000, "registered_pinned": "none"}


def model(*overrides, features=True):
    from fastrack_h100 import H100Model

    raw = round_raw()
    if features:
        raw["features"] = dict(FEATURES)
        raw["features"].update({k + "_source": "test: round number" for k in FEATURES})
    return H100Model.from_dict(raw, list(overrides), name="round+features")


def coll_dur(graph, protocol, m, coll):
    out = load_protocol(protocol)(graph, m)
    out.validate()
    schedule(out)
    return out.dur[coll].tolist()


S = 10_000_000  # 10 MB per rank
RING4 = 1_500_000 + 6 * 1000  # 4 ranks: 15 MB at 10 bytes/ns + 6 steps of 1 us
NVLS = 500_000 + 2000  # 10 MB at 20 bytes/ns + 2 us


def test_reference_takes_nvls_and_cc_the_ring():
    m = model()
    g, coll = collective_graph(4, S, "nccl:all_reduce")  # the trace names no algorithm: NCCL's tuner picks
    assert coll_dur(g, "none", m, coll) == [NVLS] * 4
    assert coll_dur(g, "ppcie", m, coll) == [RING4] * 4  # CC: no multicast, ring in plaintext over NVLink
    # without the [features] table (or with nvls off, or without NVSwitch) the reference is the ring, as before
    assert coll_dur(g, "none", model(features=False), coll) == [RING4] * 4
    assert coll_dur(g, "none", model("features.nvls=false"), coll) == [RING4] * 4
    # topology.link = pcie (no NVSwitch): 1 GB/s, 2 us a step: 15_000_000 + 6 x 2 us, never NVLS
    assert coll_dur(g, "none", model("topology.link=pcie"), coll) == [15_000_000 + 12_000] * 4


def test_the_tuner_keeps_the_ring_where_it_is_faster_and_names_decide():
    # 2 ranks, 10 kB: ring 10_000 B at 10 bytes/ns + 2 steps = 3_000 ns; NVLS 500 + 2_000 = 2_500 -> NVLS;
    # with nvls_latency_ns = 5 us NVLS would take 5_500: the ring stays
    g, coll = collective_graph(2, 10_000, "nccl:all_reduce")
    assert coll_dur(g, "none", model(), coll) == [2_500, 2_500]
    assert coll_dur(g, "none", model("features.nvls_latency_ns=5000"), coll) == [3_000, 3_000]
    # a trace whose kernel names the ring keeps it; one that names NVLS runs NVLS (as measured) ...
    g, coll = collective_graph(4, S, "ncclKernel_AllReduce_RING_LL_Sum_float")
    assert coll_dur(g, "none", model(), coll) == [RING4] * 4
    g, coll = collective_graph(4, S, "ncclDevKernel_AllReduce_Sum_f32_NVLS")
    assert coll_dur(g, "none", model(), coll) == [NVLS] * 4
    # ... and under CC it is renamed to NCCL's ring kernel and priced as the ring
    off = multicast_off(g)
    assert {off.names[i] for i in off.name[coll]} == {"ncclDevKernel_AllReduce_Sum_f32_RING"}
    assert coll_dur(g, "ppcie", model(), coll) == [RING4] * 4
    # all-gather is not an all-reduce: never NVLS here
    g, coll = collective_graph(4, S, "nccl:all_gather")
    assert coll_dur(g, "none", model(), coll) == coll_dur(g, "none", model(features=False), coll)


def test_an_inferred_size_keeps_its_measured_duration():
    # bytes = 0: the size is inferred from the measured 5 ns, whatever algorithm ran: no re-pricing as NVLS
    g, coll = collective_graph(4, 0, "nccl:all_reduce")
    assert coll_dur(g, "none", model(), coll) == coll_dur(g, "none", model(features=False), coll)


def test_tee_io_keeps_multicast_only_when_the_preset_says():
    # tee-io with NVLS: 10 MB / 0.5 = 20 MB at 20 bytes/ns + 2 us + 500 ns of NVLink encryption = 1_002_500;
    # without (the default): the ring on encrypted NVLink: 30 MB at 10 bytes/ns + 6 x 1.5 us = 3_009_000
    g, coll = collective_graph(4, S, "nccl:all_reduce")
    assert coll_dur(g, "tee-io", model(), coll) == [3_009_000] * 4
    assert coll_dur(g, "tee-io", model("tee_io.multicast=true"), coll) == [1_002_500] * 4


def one_copy(nbytes, host_mem):
    h = HandGraph()
    r = h.call(100)
    c = h.copy(nbytes, CopyDir.H2D, 0, r, host_mem=host_mem)
    h.cpu(50)
    return h.build(), c


def test_registered_memory_falls_back_to_pageable_under_cc():
    # fastrack:direct with direct.h2d = pinned: a pinned 2 MB H2D goes direct (no CPU encryption); if the
    # program pinned it with cudaHostRegister (features.registered_pinned = all) CC leaves it pageable:
    # it no longer qualifies, and the CPU encrypts its two 1 MB chunks (two CPU passes: client data)
    g, c = one_copy(2_000_000, HostMem.PINNED)
    direct = load_protocol("fastrack:direct")
    kept = direct(g, model("direct.h2d=pinned"))
    lost = direct(g, model("direct.h2d=pinned", "features.registered_pinned=all"))
    assert not np.any(kept.kind == DerivedKind.CPU_ENCRYPT)
    assert int(np.sum(lost.kind == DerivedKind.CPU_ENCRYPT)) == 2
    # the transform itself: only that copy's host_mem changes; with "none" the graph is the same object
    m = model("features.registered_pinned=all")
    out = host_register_off(g, m)
    assert out.host_mem[c] == HostMem.PAGEABLE and g.host_mem[c] == HostMem.PINNED
    assert host_register_off(g, model()) is g
    # none and tee-io keep registered memory: the copy stays pinned, so asynchronous (no host wait)
    for p in ("none", "tee-io"):
        assert not np.any(load_protocol(p)(g, m).kind == DerivedKind.SYNC_WAIT)


NAMES = ["nccl:all_reduce", "ncclDevKernel_AllReduce_Sum_f32_NVLS", "ncclKernel_AllReduce_NVLSTree_Sum_bf16",
         "ncclKernel_AllReduce_RING_LL_Sum_float", "nccl:all_gather", "ncclDevKernel_AllGather_RING_LL"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 8), st.integers(0, 50_000_000), st.sampled_from(NAMES), st.booleans(),
       st.sampled_from(["none", "all"]), st.sampled_from([HostMem.PINNED, HostMem.PAGEABLE, HostMem.NONE]))
def test_features_off_only_renames_and_unpins(ranks, nbytes, name, nvls, registered, mem):
    """For any graph: the transforms keep every node, edge, duration, byte count and lane; they only
    rename NVLS all-reduces (to RING) and mark pinned copies pageable; applying them twice changes
    nothing more; the input is never modified; the no-TEE reference is never slower than the ring."""
    m = model(f"features.nvls={'true' if nvls else 'false'}", f"features.registered_pinned={registered}")
    g, coll = collective_graph(ranks, nbytes, name)
    h = HandGraph()
    r = h.call(100)
    h.copy(1_000_000, CopyDir.H2D, 0, r, host_mem=mem)
    before = {f: getattr(g, f).copy() for f in ("dur", "name", "host_mem", "dep_src", "dep_kind", "dep_lag")}
    for graph in (g, h.build()):
        out = features_off(graph, m, CC_OFF)
        for f in ("kind", "dur", "bytes", "lane", "dep_ptr", "dep_src", "dep_kind", "dep_lag", "group", "rank"):
            assert np.array_equal(getattr(out, f), getattr(graph, f)), f
        for i in range(graph.n):
            was, now = graph.names[int(graph.name[i])], out.names[int(out.name[i])]
            assert now == was or ("nvls" in was.lower() and "RING" in now and "nvls" not in now.lower())
        changed = out.host_mem != graph.host_mem
        assert np.all(graph.host_mem[changed] == HostMem.PINNED) and np.all(out.host_mem[changed] == HostMem.PAGEABLE)
        again = features_off(out, m, CC_OFF)
        assert again.names == out.names and np.array_equal(again.name, out.name)
        assert np.array_equal(again.host_mem, out.host_mem)
    for f, v in before.items():
        assert np.array_equal(getattr(g, f), v), f
    ref = price_reference(g, m)
    ring = price_reference(g, model("features.nvls=false"))
    assert np.all(ref.dur[coll] <= ring.dur[coll])


def test_listed_with_their_sources():
    from click.testing import CliRunner

    from replay.frontend.cli import main

    res = CliRunner().invoke(main, ["list", "protocols"])
    assert res.exit_code == 0
    assert "features CC switches off" in res.output
    for name, src in (("multicast:", "[S62]"), ("host-register:", "[S64]")):
        block = res.output.split(f"  {name}", 1)[1].split("\n  ", 1)[0]
        assert src in res.output and "off under: baseline" in res.output.split(f"  {name}", 1)[1]
        assert block
    rows = {r["name"]: r for r in json.loads(CliRunner().invoke(main, ["list", "protocols", "--json"]).output)}
    assert {f["feature"] for f in rows["baseline"]["features_off"]} == {"multicast", "host-register"}
    assert {f["feature"] for f in rows["ppcie"]["features_off"]} == {"multicast", "host-register"}
    assert "features_off" not in rows["none"] and "features_off" not in rows["tee-io"]
    assert all(f["source"] for f in rows["fastrack"]["features_off"])
