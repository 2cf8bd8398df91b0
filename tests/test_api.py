"""The Python API (docs/api.md): the worked example runs as written, and the API's numbers are the
command lines' numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import fastrack
from fastrack_core.errors import CaptureError, ConfigError
from replay.frontend.cli import main as replay_main
from replay.frontend.paraminfo import axis_label, unit_of
from tracegen.cli import main as tracegen_main

DOC = Path(__file__).resolve().parent.parent / "docs" / "api.md"


def _example_blocks() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Worked example", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    p = tmp_path_factory.mktemp("api") / "r.parquet"
    r = CliRunner().invoke(tracegen_main, ["synth", "random", "--ops", "300", "--seed", "3", "-o", str(p)])
    assert r.exit_code == 0, r.output
    return p


def test_worked_example_runs_and_agrees_with_the_cli(tmp_path, monkeypatch):
    from tracegen import emulation

    emulation.preload()
    blocks = _example_blocks()
    assert len(blocks) >= 4
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    for code in blocks:
        exec(compile(code, str(DOC), "exec"), ns)  # noqa: S102 - the documented example itself
    assert ns["trace"].num_ops > 0 and (tmp_path / "mlp.parquet").is_file()
    # the notebook's numbers are replay compare's numbers
    r = CliRunner().invoke(replay_main, ["compare", "mlp.parquet", "--protocols", "none,baseline,fastrack", "--json"])
    assert r.exit_code == 0, r.output
    rows = {row["protocol"]: row for row in json.loads(r.output)["rows"]}
    for p, row in ns["table"].iterrows():
        assert row["makespan_ns"] == rows[p]["makespan_ns"]
        assert row["slowdown"] == pytest.approx(rows[p]["slowdown_vs_none"], abs=1e-6)
    assert ns["res"].slowdown > 1.0  # the CC path costs something on a trace with transfers
    wide = ns["wide"]
    assert list(wide.index) == [8, 32, 128] and set(wide.columns) == {"baseline", "fastrack", "none"}
    assert (wide["none"] == 1.0).all()
    # a faster link can only shorten or keep the baseline's makespan
    assert wide["baseline"].is_monotonic_decreasing


def test_replay_and_compare_match_the_cli(synth):
    res = fastrack.replay(synth, "baseline")
    r = CliRunner().invoke(replay_main, ["--protocol", "baseline", str(synth), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert res.makespan_ns == d["makespan_ns"]
    assert res.slowdown == pytest.approx(d["slowdown_vs_none"], abs=1e-6)
    assert res.reference_makespan_ns == d["reference"]["makespan_ns"]
    assert res.to_dict()["makespan_ns"] == d["makespan_ns"]
    assert res.breakdown()["ns"].sum() == sum(d["critical_path_ns"].values())
    # compare's JSON report from the API equals replay compare --json
    cmp = fastrack.compare(synth, "baseline,fastrack")
    r = CliRunner().invoke(replay_main, ["compare", str(synth), "--protocols", "baseline,fastrack", "--json"])
    assert cmp.to_dict()["rows"] == json.loads(r.output)["rows"]
    assert list(cmp.to_frame().index) == ["baseline", "fastrack"]
    long = cmp.breakdown()
    assert set(long.columns) == {"protocol", "category", "ns"}


def test_no_reference_and_captured_have_no_slowdown(synth):
    assert fastrack.replay(synth, "baseline", reference=False).slowdown is None
    cap = fastrack.replay(synth, "captured")
    assert cap.slowdown is None and cap.model is None


def test_params_overrides_change_the_result(synth):
    slow = fastrack.replay(synth, "baseline", params={"pcie.h2d_bandwidth_gb_s": 1, "pcie.d2h_bandwidth_gb_s": 1})
    fast = fastrack.replay(synth, "baseline")
    assert slow.params_digest != fast.params_digest
    assert slow.makespan_ns >= fast.makespan_ns
    with pytest.raises(ConfigError, match="pcie"):
        fastrack.replay(synth, "baseline", params={"pcie.h2d_bandwidth_gbs": 1})


def test_sweep_needs_files_not_in_memory_traces(synth):
    tr = fastrack.load(synth)
    tr.path = None
    with pytest.raises(ConfigError, match="save the trace first"):
        fastrack.sweep(tr, ["baseline"])


def test_capture_failures():
    from tracegen import emulation

    emulation.preload()
    with pytest.raises(CaptureError, match="no GPU work"):
        with fastrack.capture():
            pass
    cap = fastrack.capture()
    with pytest.raises(ZeroDivisionError):
        with cap:
            raise ZeroDivisionError("in the block")
    assert cap.trace is None
    with pytest.raises(CaptureError, match="nothing captured"):
        cap.save("never.parquet")


def test_params_table_has_units_and_sources():
    df = fastrack.params()
    row = df.set_index("name").loc["pcie.h2d_bandwidth_gb_s"]
    assert row["unit"] == "GB/s" and row["source"] and row["doc"]
    assert df.set_index("name").loc["gpu.sms", "unit"] == "count"
    assert "h100-sxm" in fastrack.presets() and "fastrack" in fastrack.protocols()


@pytest.mark.parametrize("column, label", [
    ("pcie.h2d_bandwidth_gb_s", "pcie: h2d bandwidth (GB/s)"),
    ("pcie.latency_ns", "pcie: latency (ns)"),
    ("makespan_ns", "makespan (ms)"),
    ("cp_cpu_crypto_ns", "critical path: cpu crypto (ms)"),
    ("scale.kernel", "kernel duration factor (x)"),
    ("pcie.h2d_bandwidth_gb_s+pcie.d2h_bandwidth_gb_s", "pcie: h2d = d2h bandwidth (GB/s)"),
    ("cpu_crypto.core_gb_s", "cpu crypto: core (GB/s)"),
    ("gpu.sms", "gpu: sms (count)"),
    ("pcie.latency_ns+cpu_crypto.call_overhead_ns", "pcie: latency = cpu crypto: call overhead (ns)"),
    ("protocol", "protocol"),
])
def test_axis_labels(column, label):
    assert axis_label(column) == label


def test_units_from_key_names():
    assert unit_of("auth.parallel_gb_s_per_sm") == "GB/s per sm"
    assert unit_of("bounce.slot_bytes") == "bytes"
    assert unit_of("gpu.sms", {"unit": "count"}) == "count"
    assert unit_of("preset.name") == ""


def test_api_is_lazy_and_listed():
    assert "replay" in dir(fastrack) and "capture" in dir(fastrack)
    with pytest.raises(AttributeError):
        fastrack.no_such_name  # noqa: B018
