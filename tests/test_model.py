"""The hardware-model interface, the H100 model's prices (worked out by hand) and the plug-in registry."""

from __future__ import annotations

import numpy as np
import pytest

from fastrack_core.errors import PluginError
from fastrack_core.schema import CopyDir, HostMem, OpKind
from fastrack_h100 import H100Model
from graphs import HandGraph
from handgraph import round_model, round_raw
from replay.graph import NO_LANE, LaneType
from replay.model import CRYPTO_PAGE_BYTES, HardwareModel, bytes_ns
from replay.plugins import available_models, available_protocols, load_model, load_protocol


def test_bytes_ns_is_exact_and_rounds_up():
    assert bytes_ns(1_000_000, 1.0) == 1_000_000  # 1 GB/s = 1 byte/ns
    assert bytes_ns(1_000_000, 0.1) == 10_000_000  # no float surprise
    assert bytes_ns(3, 2.0) == 2  # 1.5 ns -> 2
    assert bytes_ns(0, 50.0) == 0
    assert bytes_ns(np.array([346, 347]), 3.46).tolist() == [100, 101]
    assert bytes_ns(np.array([1, 2]), 50.0).dtype == np.int64


def test_round_prices_by_hand():
    m = round_model()
    # PCIe 1 GB/s: 1 MB occupies the link 1 ms; latency is separate
    assert m.pcie_ns(1_000_000, CopyDir.H2D) == 1_000_000
    assert m.pcie_latency_ns(CopyDir.D2H) == 1000
    assert m.pcie_time_ns(1_000_000, CopyDir.D2H) == 1_001_000
    # CPU 1 GB/s, no per-call cost in the round preset
    assert m.cpu_encrypt_ns(500_000) == 500_000
    assert m.cpu_decrypt_ns(500_000) == 500_000
    # CE 2 GB/s; split over the 2 copy engines (Fastrack fix 2), the larger half sets the time
    assert m.ce_crypto_ns(1_000_000) == 500_000
    assert m.ce_crypto_ns(1_000_001, m.ce_split_parts) == 250_001  # ceil(500_000.5 B / 2 B/ns)
    assert m.ce_split_parts == 2
    # pageable staging 10 GB/s
    assert m.staging_copy_ns(1_000_000) == 100_000
    # the optional [auth] table (emulated authentication kernel): 0.5 GB/s serial, 4 SMs x 1 GB/s parallel
    assert m.emulates_auth_kernel
    assert m.auth_ns(1_000_000, parallel=False) == 2_000_000
    assert m.auth_ns(1_000_000, parallel=True) == 250_000
    # submission per kind; host ops submit nothing
    kinds = np.array([OpKind.KERNEL, OpKind.MEMCPY, OpKind.CPU, OpKind.SYNC, 99])
    assert m.submit_ns(kinds).tolist() == [1000, 1000, 0, 0, 0]
    assert (m.bounce_slot_bytes, m.bounce_slots, m.cpu_crypto_threads) == (1_000_000, 2, 1)


def test_cpu_crypto_fixed_cost_per_call():
    # 4 KiB calls at 425 ns each + bytes at 4 GB/s: 8 KiB = 2 calls = 850 + 2048 ns
    m = round_model("cpu_crypto.call_overhead_ns=425", "cpu_crypto.call_bytes=4096", "cpu_crypto.core_gb_s=4.0")
    assert m.cpu_encrypt_ns(8192) == 850 + 2048
    assert m.cpu_encrypt_ns(8193) == 3 * 425 + 2049
    assert m.cpu_encrypt_ns(0) == 425  # one call even for an empty buffer


def test_h100_cpu_crypto_curves_match_openssl():
    """Each host preset's fit reproduces its one-core ``openssl speed -evp aes-256-gcm`` figures."""
    vaes = H100Model.from_preset("h100-sxm")  # [S15] VAES column, fitted at 1 / 8 / 16 KiB
    for size, gb_s in ((1024, 4.70), (8192, 7.53), (16384, 7.92)):
        assert vaes.cpu_crypto_gb_s(size) == pytest.approx(gb_s, rel=0.01), size
    aesni = H100Model.from_preset("h100-sxm-aesni")  # [S17], fitted at 256 B / 1 KiB / 8 KiB
    for size, gb_s in ((256, 0.54), (1024, 1.46), (8192, 3.46)):
        assert aesni.cpu_crypto_gb_s(size) == pytest.approx(gb_s, rel=0.05), size
    # one 2 MiB slot, encrypted as 4 KiB calls: ~6.95 GB/s (VAES), ~2.9 GB/s (AES-NI)
    slot = vaes.bounce_slot_bytes
    assert slot / vaes.cpu_encrypt_ns(slot) == pytest.approx(6.95, rel=0.01)
    assert slot / aesni.cpu_encrypt_ns(slot) == pytest.approx(2.9, rel=0.01)
    # the pageable staging copy is never slower than AES-GCM over the same bytes
    for m in (vaes, aesni):
        assert m.staging_copy_ns(slot) <= m.cpu_encrypt_ns(slot)


def test_h100_orders_of_magnitude():
    m = H100Model.from_preset()
    one_mib = 1 << 20
    # CPU encryption is several times slower than the link
    assert m.cpu_encrypt_ns(one_mib) > 5 * m.pcie_ns(one_mib, CopyDir.H2D)
    # the shipped path has no separate authentication kernel: the default preset has no [auth] table
    assert not m.emulates_auth_kernel and "auth" not in m.params
    assert m.auth_ns(one_mib, parallel=False) == 0
    # one push: encrypt the 512 B segment (94 + 62 ns) and the 364 B work-launch push (94 + 45 ns), then
    # the 1300 ns work-launch round trip (docs/model.md "The driver path")
    assert m.submit_ns(OpKind.KERNEL) == 156 + 139 + 1300


def test_direct_rule():
    m = round_model("direct.h2d=pinned", "direct.d2h=all", "direct.min_bytes=10")
    d = np.array([CopyDir.H2D, CopyDir.H2D, CopyDir.H2D, CopyDir.D2H, CopyDir.D2H])
    mem = np.array([HostMem.PINNED, HostMem.PAGEABLE, HostMem.PINNED, HostMem.NONE, HostMem.PAGEABLE])
    b = np.array([100, 100, 5, 100, 100])
    assert m.direct_eligible(d, mem, b).tolist() == [True, False, False, True, True]
    assert not round_model("direct.h2d=none").direct_eligible(d, mem, b)[:3].any()


def test_add_lanes_per_rank_and_idempotent():
    h = HandGraph()
    r0 = h.call(1, rank=0)
    h.kernel(1, 0, r0, rank=0)
    r1 = h.call(1, rank=1)
    h.kernel(1, 0, r1, rank=1)
    g = h.build()
    m = round_model("cpu_crypto.threads=3")
    g2 = m.add_lanes(g)
    assert len(g2.lanes) == len(g.lanes) + 2 * 7  # 6 lane specs + the D2H secure channel, per rank
    assert m.add_lanes(g2) is g2
    assert len(g.lanes) == 4  # input untouched
    ce = m.lane_index(g2, [0, 1, 7], LaneType.COPY_ENGINE)
    assert ce[2] == NO_LANE and ce[0] != ce[1]
    assert g2.lanes.servers[ce[0]] == 2  # copy engines of the round preset
    assert g2.lanes.servers[m.lane_index(g2, [1], LaneType.CPU_CRYPTO)[0]] == 3
    assert g2.lanes.names[ce[1]] == "rank1/copy_engines"
    # one secure-copy channel per direction (GPU_CRYPTO key 0 = H2D, key 1 = D2H)
    assert g2.lanes.find(0, LaneType.GPU_CRYPTO, 0) != NO_LANE and g2.lanes.find(0, LaneType.GPU_CRYPTO, 1) != NO_LANE
    assert g2.lanes.servers[g2.lanes.find(1, LaneType.GPU_CRYPTO, 1)] == 1


def test_params_and_describe():
    m = H100Model.from_preset()
    rows = m.describe()
    assert ("pcie", "latency_ns", 2000, m.sources["pcie"]["latency_ns"]) in rows
    assert len(rows) == sum(len(v) for v in m.params.values())
    p = m.params
    p["pcie"]["latency_ns"] = 1  # a copy: the model is not changed through it
    assert m.params["pcie"]["latency_ns"] == 2000


def test_interface_is_abstract():
    class Half(HardwareModel):
        name = "half"

    with pytest.raises(TypeError):
        Half(None)  # pricing methods missing


class SingleGpuModel(H100Model):
    """The H100 model without its GPU-to-GPU half (the base class's versions put back)."""

    name = "single-gpu"
    link_gb_s = HardwareModel.link_gb_s
    link_latency_ns = HardwareModel.link_latency_ns
    link_ns = HardwareModel.link_ns
    key_rotation_ns = HardwareModel.key_rotation_ns
    crypto_page_bytes = HardwareModel.crypto_page_bytes


def _two_rank_all_reduce():
    h = HandGraph()
    members = []
    for rank in (0, 1):
        call = h.call(1000, rank=rank)
        members.append(h.gpu(OpKind.COLLECTIVE, 5, 0, call, rank=rank, nbytes=1_000_000))
    g = h.build()
    group = g.group.copy()
    group[members] = 3
    return g.replace(group=group), members


def test_multi_gpu_half_of_the_interface():
    m = round_model()
    assert m.prices_links and m.default_allreduce == "ring" and m.crypto_page_bytes == 4096
    single = SingleGpuModel.from_dict(round_raw())
    assert not single.prices_links and single.default_allreduce == "ring"
    assert single.crypto_page_bytes == CRYPTO_PAGE_BYTES == 4096  # a default: the single-GPU CC path uses it too
    for call in (lambda: single.link_ns(10, 2), lambda: single.link_gb_s(2), lambda: single.link_latency_ns(2),
                 lambda: single.key_rotation_ns(10, 1)):
        with pytest.raises(PluginError, match="'single-gpu' does not price GPU-to-GPU communication"):
            call()


def test_collectives_need_the_multi_gpu_half():
    g, members = _two_rank_all_reduce()
    single = SingleGpuModel.from_dict(round_raw())
    # without link prices a collective keeps its traced duration; with them it is priced on the topology
    assert load_protocol("none")(g, single).dur[members].tolist() == [5, 5]
    assert load_protocol("none")(g, round_model()).dur[members].tolist() != [5, 5]
    with pytest.raises(PluginError, match="needs a hardware model that prices GPU-to-GPU links"):
        load_protocol("cc-multi")(g, single)


# ------------------------------------------------------------------------------ plug-ins


def test_registry_lists_installed_plugins():
    assert "h100" in available_models()
    assert {"none", "baseline", "fastrack", "fastrack:direct", "fastrack:auth", "fastrack:overlap"} <= set(
        available_protocols())
    assert load_model("h100") is H100Model
    proto = load_protocol("fastrack")
    assert proto.name == "fastrack" and callable(proto)


def test_unknown_names_list_installed():
    with pytest.raises(PluginError, match=r"unknown model \(a str of 4 characters\); installed models: .*h100"):
        load_model("b200")
    with pytest.raises(PluginError, match=r"unknown protocol \(a str of 4 characters\); did you mean 'fastrack'\?; installed protocols: .*baseline.*fastrack"):
        load_protocol("fast")


def test_run_replay_contract():
    """What replay.pipeline.run uses: load_model(name).from_preset(preset, overrides) and protocol(graph, hw)."""
    hw = load_model("h100").from_preset(None, ["bounce.slots=8"])
    assert hw.preset_name == "h100-sxm" and hw.params["bounce"]["slots"] == 8 and len(hw.digest) == 64
    h = HandGraph()
    r = h.call(10)
    h.copy(4 << 20, CopyDir.H2D, 0, r)
    g = h.build()
    out = load_protocol("baseline")(g, hw)
    assert out.n > g.n


# ------------------------------------------------------------------------------ validation script


def _validate_module():
    from scriptload import load_script

    return load_script("benchmarks/validation/validate_model.py")


def test_validate_model_refuses_a_file_without_markers(tmp_path, capsys):
    mod = _validate_module()
    p = tmp_path / "doc.md"
    p.write_text("no markers here\n")
    assert mod.main(["--write", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "doc.md" in err[0] and "nothing written" in err[0]
    assert p.read_text() == "no markers here\n"
    assert mod.main(["--write", str(tmp_path / "missing.md")]) == 2
    assert mod.main(["--preset", "h200", "--write", str(p)]) == 2  # markers checked first: still refused


def test_validate_model_replaces_only_between_markers(tmp_path):
    mod = _validate_module()
    p = tmp_path / "doc.md"
    p.write_text(f"before\n{mod.BEGIN}\nold\n{mod.END}\nafter\n")
    mod.write_section(p, "new\n")
    assert p.read_text() == f"before\n{mod.BEGIN}\nnew\n{mod.END}\nafter\n"


@pytest.mark.slow
def test_docs_validation_section_is_current():
    """The generated block of docs/validation.md is what benchmarks/validation/validate_model.py computes today."""
    from pathlib import Path

    from fastrack_core.docsection import between, read_section

    mod = _validate_module()
    doc = Path(__file__).resolve().parent.parent / "docs" / "validation.md"
    assert read_section(doc, mod.BEGIN, mod.END) == between(mod.BEGIN, mod.section("h100-sxm"), mod.END)
