"""Presets of the H100 model and the strict loader (replay.config): every error names the file,
the table and the key, and lists what is known."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fastrack_core.errors import ConfigError
from fastrack_h100 import PRESETS_DIR, H100Model, H100Params
from handgraph import round_model, round_raw
from replay import config

SXM = PRESETS_DIR / "h100-sxm.toml"


def test_shipped_presets_load_with_a_source_for_every_value():
    assert {"h100-sxm", "h100-pcie", "h100-sxm-aesni"} <= set(H100Model.available_presets())
    for name in H100Model.available_presets():
        m = H100Model.from_preset(name)
        assert m.preset_name == name
        for table, body in m.params.items():
            for key in body:
                src = m.sources[table][key].strip()
                assert src, (name, table, key)
                if table in ("topology", "keys", "p2p"):  # multi-GPU tables: docs/multi-gpu.md
                    continue
                # every single-GPU source cites docs/sources.md or says it is an assumption
                assert re.search(r"\[S\d+\]", src) or src.startswith("assumption"), (name, table, key, src)


def test_host_presets_differ_only_in_cpu_crypto():
    vaes, aesni = H100Model.from_preset("h100-sxm"), H100Model.from_preset("h100-sxm-aesni")
    diff = {(t, k) for t in vaes.params for k in vaes.params[t] if vaes.params[t][k] != aesni.params[t][k]}
    assert diff == {("cpu_crypto", "core_gb_s"), ("cpu_crypto", "call_overhead_ns")}
    assert vaes.cpu_crypto_gb_s(4096) > 2 * aesni.cpu_crypto_gb_s(4096)


def test_preset_for_another_model_is_refused(tmp_path):
    msg = _err(tmp_path, SXM.read_text().replace('model = "h100"', 'model = "b200"'))
    assert "[preset] model: this preset is for model (a str of 4 characters), not 'h100'" in msg and "bad.toml" in msg
    # also through extends: a variant of another model's preset
    (tmp_path / "other.toml").write_text(SXM.read_text().replace('model = "h100"', 'model = "b200"'))
    v = _write(tmp_path, '[preset]\nname = "v"\ndescription = ""\nextends = "other"\n', "v.toml")
    with pytest.raises(ConfigError, match=r"is for model \(a str of 4 characters\)"):
        H100Model.from_preset(str(v))


def test_optional_auth_table(tmp_path):
    # the default presets have no [auth] table (no separate authentication on the shipped H100);
    # a preset may add it (the Fastrack paper's emulated kernel), whole
    assert "auth" not in H100Model.from_preset().params
    with pytest.raises(ConfigError, match=r"table \[auth\] is optional and this preset does not have it"):
        H100Model.from_preset(None, ["auth.serial_gb_s=8"])
    v = _write(tmp_path, '[preset]\nname = "emu"\ndescription = ""\nextends = "%s"\n\n[auth]\n'
               'serial_gb_s = 8.0\nserial_gb_s_source = "assumption: t"\nparallel_gb_s_per_sm = 1.0\n'
               'parallel_gb_s_per_sm_source = "assumption: t"\nop_overhead_ns = 0\n'
               'op_overhead_ns_source = "assumption: t"\n' % SXM.as_posix(), "emu.toml")
    m = H100Model.from_preset(str(v))
    assert m.emulates_auth_kernel and m.params["auth"]["serial_gb_s"] == 8.0
    msg = _err(tmp_path, SXM.read_text() + '\n[auth]\nserial_gb_s = 8.0\nserial_gb_s_source = "x"\n')
    assert "[auth] is missing key 'parallel_gb_s_per_sm'" in msg


def test_default_preset_is_sxm_and_pcie_overrides_only_what_differs():
    sxm, pcie = H100Model.from_preset(), H100Model.from_preset("h100-pcie")
    assert sxm.preset_name == "h100-sxm"
    diff = {(t, k) for t in sxm.params for k in sxm.params[t] if sxm.params[t][k] != pcie.params[t][k]}
    assert diff == {("gpu", "sms"), ("topology", "link")}  # H100 PCIe: no NVSwitch (docs/multi-gpu.md)
    assert pcie.params["gpu"]["sms"] == 114
    assert "114" in pcie.sources["gpu"]["sms"]


def test_schema_has_units_and_docs():
    assert config.schema_problems(H100Params) == []


def test_preset_by_path(tmp_path):
    p = tmp_path / "mine.toml"
    p.write_text(SXM.read_text().replace('name = "h100-sxm"', 'name = "mine"').replace("latency_ns = 2000",
                                                                                        "latency_ns = 1700"))
    m = H100Model.from_preset(str(p))
    assert m.preset_name == "mine" and m.params["pcie"]["latency_ns"] == 1700
    assert m.preset_path == str(p)


def _write(tmp_path, text: str, name="bad.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _err(tmp_path, text: str) -> str:
    p = _write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        H100Model.from_preset(str(p))
    msg = str(exc.value)
    assert str(p) in msg  # names the file
    return msg


def test_typo_key_names_key_table_and_known_keys(tmp_path):
    msg = _err(tmp_path, SXM.read_text().replace("latency_ns = 2000", "latency_us = 1"))
    assert "[pcie] unknown key (a str of 10 characters)" in msg
    assert "did you mean 'latency_ns'" in msg
    assert "h2d_bandwidth_gb_s, d2h_bandwidth_gb_s, latency_ns" in msg


def test_missing_key(tmp_path):
    msg = _err(tmp_path, re.sub(r"\nslots = 32\nslots_source = .*\n", "\n", SXM.read_text()))
    assert "[bounce] is missing key 'slots'" in msg


def test_missing_source(tmp_path):
    msg = _err(tmp_path, re.sub(r"\nlatency_ns_source = .*\n", "\n", SXM.read_text()))
    assert "[pcie] latency_ns needs a source" in msg


def test_wrong_type(tmp_path):
    msg = _err(tmp_path, SXM.read_text().replace("latency_ns = 2000", 'latency_ns = "1 us"'))
    assert "[pcie] latency_ns: expected an integer, got str of 4 characters" in msg
    msg = _err(tmp_path, SXM.read_text().replace("latency_ns = 2000", "latency_ns = 1.5"))
    assert "[pcie] latency_ns: expected an integer, got float 1.5" in msg


def test_out_of_range_and_choices(tmp_path):
    msg = _err(tmp_path, SXM.read_text().replace("h2d_bandwidth_gb_s = 50.0", "h2d_bandwidth_gb_s = 0"))
    assert "[pcie] h2d_bandwidth_gb_s: must be >= 0.001" in msg
    msg = _err(tmp_path, SXM.read_text().replace('h2d = "pinned"', 'h2d = "some"'))
    assert "[direct] h2d: expected one of 'all', 'pinned', 'pageable', 'none'" in msg


def test_unknown_table_and_missing_preset_table(tmp_path):
    msg = _err(tmp_path, SXM.read_text() + "\n[nvlink]\nbandwidth_gb_s = 1\n")
    assert "unknown table (a str of 6 characters)" in msg and "known tables: gpu, pcie" in msg
    msg = _err(tmp_path, SXM.read_text().replace("[preset]", "[meta]"))
    assert "unknown table (a str of 4 characters)" in msg or "missing table [preset]" in msg


def test_not_toml(tmp_path):
    msg = _err(tmp_path, "[pcie\n")
    assert "not valid TOML" in msg


def test_unknown_preset_name_lists_available():
    with pytest.raises(ConfigError, match=r"unknown preset 'a100'; available presets: .*h100-pcie, h100-sxm"):
        H100Model.from_preset("a100")


def test_extends_cycle(tmp_path):
    a = _write(tmp_path, '[preset]\nname = "a"\ndescription = ""\nextends = "b"\n', "a.toml")
    _write(tmp_path, '[preset]\nname = "b"\ndescription = ""\nextends = "a"\n', "b.toml")
    with pytest.raises(ConfigError, match="cycle"):
        H100Model.from_preset(str(a))


def test_extends_variant_states_only_differences(tmp_path):
    (tmp_path / "base.toml").write_text(SXM.read_text())
    v = _write(tmp_path, '[preset]\nname = "v"\ndescription = "faster link"\nextends = "base"\n\n'
                         '[pcie]\nlatency_ns = 10\nlatency_ns_source = "assumption: test"\n', "v.toml")
    m = H100Model.from_preset(str(v))
    assert m.params["pcie"]["latency_ns"] == 10 and m.sources["pcie"]["latency_ns"] == "assumption: test"
    assert m.params["pcie"]["h2d_bandwidth_gb_s"] == 50.0


# ------------------------------------------------------------------------------ --set


def test_set_overrides_with_type_checks():
    m = H100Model.from_preset(None, ["pcie.h2d_bandwidth_gb_s=32", "bounce.slots=64", "direct.h2d=pinned",
                                     "pcie.latency_ns=2_000"])
    assert m.params["pcie"]["h2d_bandwidth_gb_s"] == 32.0
    assert isinstance(m.params["pcie"]["h2d_bandwidth_gb_s"], float)
    assert m.params["bounce"]["slots"] == 64
    assert m.params["direct"]["h2d"] == "pinned"
    assert m.params["pcie"]["latency_ns"] == 2000
    assert m.sources["bounce"]["slots"] == "override: --set bounce.slots=64"
    # integral floats are accepted for integer keys (sweeps write 64.0)
    assert H100Model.from_preset(None, ["bounce.slots=64.0"]).params["bounce"]["slots"] == 64


@pytest.mark.parametrize("text, expect", [
    ("pcie.bandwidth_gb_s=32", r"\[pcie\] unknown key \(a str of 14 characters\).*known keys: h2d_bandwidth_gb_s"),
    ("pcie.latency_us=3", r"did you mean 'latency_ns'"),
    ("pcie.latency_ns=fast", r"--set pcie.latency_ns: expected an integer .*got str of 4 characters"),
    ("pcie.latency_ns=1.5", r"expected an integer"),
    ("bounce.slots=0", r"--set bounce.slots: must be >= 1, got int 0"),
    ("pcie.latency_ns", r"expected SECTION.KEY=VALUE"),
    ("latency_ns=3", r"expected SECTION.KEY=VALUE"),
    ("nvlink.bandwidth_gb_s=3", r"unknown table \(a str of 6 characters\)"),
    ("direct.h2d=maybe", r"expected one of 'all'"),
])
def test_bad_set(text, expect):
    with pytest.raises(ConfigError, match=expect):
        H100Model.from_preset(None, [text])


def test_digest_changes_with_values_not_with_sources():
    a, b = H100Model.from_preset(), H100Model.from_preset()
    assert a.digest == b.digest and len(a.digest) == 64
    assert H100Model.from_preset(None, ["pcie.latency_ns=999"]).digest != a.digest
    assert H100Model.from_preset(None, ["pcie.latency_ns=2000"]).digest == a.digest  # same value
    assert round_model().digest == H100Model.from_dict(round_raw()).digest


def test_with_overrides():
    m = round_model()
    m2 = m.with_overrides(["bounce.slots=7"])
    assert m2.params["bounce"]["slots"] == 7 and m.params["bounce"]["slots"] == 2
    assert m2.preset_name == m.preset_name


def test_every_parameter_is_documented():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "model.md").read_text()
    m = H100Model.from_preset()
    for table, body in m.params.items():
        for key in body:
            assert f"`{table}.{key}`" in doc, f"docs/model.md does not document {table}.{key}"


@pytest.mark.parametrize("setting,expected", [
    ("pcie.h2d_bandwidth_gb_s=nan", "expected a finite number"),
    ("pcie.h2d_bandwidth_gb_s=inf", "expected a finite number"),
    ("pcie.h2d_bandwidth_gb_s=5e-5", "must be >= 0.001"),  # would round to a free transfer
    ("pcie.latency_ns=9223372036854775807", "must be <= 10000000000"),
    ("gpu.copy_engines=1000000000", "must be <= 64"),
    ("bounce.slot_bytes=1", "must be >= 4096"),
    ("p2p.chunk_bytes=100", "must be >= 4096"),
    ("cpu_crypto.call_bytes=1e300", "must be <= 1099511627776, got int with 301 digits"),
])
def test_every_numeric_parameter_is_range_checked(setting, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)):
        config.load_preset(H100Params, SXM, [setting])


def test_unit_bounds_narrow_a_parameters_own_range():
    import dataclasses

    from fastrack_h100.params import PcieParams

    f = {x.name: x for x in dataclasses.fields(PcieParams)}
    assert config.value_range(f["h2d_bandwidth_gb_s"]) == (1e-3, 1e5)
    assert config.value_range(f["latency_ns"]) == (0, 10**10)
