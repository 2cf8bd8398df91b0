"""The figures (replay/frontend/figures.py): editable text, units in labels, the none reference bar, values
on bars, skipped parameters drawn as skipped."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import fakeplugins
from replay.frontend.cli import main
from replay.frontend.figures import check_format, colours, text_colour
from tracegen.cli import main as tracegen_main


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    p = tmp_path_factory.mktemp("figs") / "r.parquet"
    r = CliRunner().invoke(tracegen_main, ["synth", "random", "--ops", "300", "--seed", "3", "-o", str(p)])
    assert r.exit_code == 0, r.output
    return p


def test_compare_plot_svg_text_reference_bar_and_message(tmp_path, trace):
    svg = tmp_path / "b.svg"
    r = CliRunner().invoke(main, ["compare", str(trace), "--protocols", "baseline,fastrack", "--plot", str(svg)])
    assert r.exit_code == 0, r.output
    assert f"wrote {svg} (3 bars)" in r.output  # none is drawn as the reference though not asked for
    text = svg.read_text()
    # editable text: labels are <text> elements, not glyph paths
    for label in ("critical-path time (ms)", "protocol", "none", "baseline", "fastrack", "critical path"):
        assert f">{label}<" in text, label
    assert "1.00x" in text  # the none bar's slowdown, written above it


def test_compare_json_carries_reference_and_data_parallel(tmp_path, trace):
    r = CliRunner().invoke(main, ["compare", str(trace), "--protocols", "baseline", "--json"])
    d = json.loads(r.output)
    assert d["reference"]["protocol"] == "none" and d["data_parallel"] is None
    assert sum(d["reference"]["critical_path_ns"].values()) > 0


def test_data_parallel_chart_says_how_many_gpus(tmp_path):
    from replay.frontend.compare import plot_breakdown

    cp = {"compute": 3_000_000, "comm": 1_000_000}
    d = {"trace": "t.parquet", "preset": "p", "data_parallel": {"world": 4, "bucket_mb": 25.0},
         "reference": {"protocol": "none", "makespan_ns": 4_000_000, "critical_path_ns": cp},
         "rows": [{"protocol": "baseline", "makespan_ns": 6_000_000, "slowdown_vs_none": 1.5,
                   "critical_path_ns": {"compute": 3_000_000, "comm": 3_000_000}}]}
    svg = tmp_path / "dp.svg"
    plot_breakdown(d, str(svg))
    text = svg.read_text()
    assert "protocol (4 GPUs, data-parallel what-if)" in text and ">none<" in text
    assert "1.50x" in text and ">6<" in text  # total above the bar, in ms
    # legend in stack order: comm (drawn last, on top) is listed before compute
    assert text.index(">comm<") < text.index(">compute<")


def test_pdf_embeds_truetype_text(tmp_path, trace):
    pdf = tmp_path / "b.pdf"
    r = CliRunner().invoke(main, ["compare", str(trace), "--protocols", "baseline", "--plot", str(pdf)])
    assert r.exit_code == 0, r.output
    data = pdf.read_bytes()
    # fonttype 42: TrueType outlines embedded (FontFile2, a CIDFontType2 font), no Type 3 glyph procedures
    assert data[:4] == b"%PDF" and b"/FontFile2" in data and b"/Type3" not in data


def test_tornado_draws_skipped_parameters_as_skipped(tmp_path, trace):
    svg = tmp_path / "t.svg"
    r = CliRunner().invoke(main, ["sensitivity", str(trace), "--protocol", "baseline", "--top", "60", "-j", "1",
                                  "--no-progress", "--plot", str(svg)])
    assert r.exit_code == 0, r.output
    text = svg.read_text()
    # cpu_crypto.threads = 1 cannot be halved: the model rejects 0 threads
    assert "cpu_crypto.threads = 1" in text and "x0.5: skipped (rejected)" in text
    assert "cpu_crypto.core_gb_s = " in text and "GB/s" in text
    assert "makespan change vs the preset (%)" in text


def test_study_plot_labels_have_units_and_legend_sections(tmp_path, trace, monkeypatch):
    fakeplugins.install(monkeypatch)
    out, svg = tmp_path / "s.parquet", tmp_path / "s.svg"
    r = CliRunner().invoke(main, ["sweep", str(trace), "--model", "fake", "--protocols", "fake-slow,fake-fast",
                                  "--set", "pcie.bandwidth_gb_s=8,16", "--set", "cpu.crypto_gb_s=2,4", "-o", str(out),
                                  "-j", "1", "--no-progress"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["plot", str(out), "--x", "pcie.bandwidth_gb_s", "--y", "makespan_ns",
                                  "--style", "protocol", "--hue", "cpu.crypto_gb_s", "-o", str(svg)])
    assert r.exit_code == 0, r.output
    assert "6 line(s)" in r.output  # 2 crypto values x 3 protocols (none added)
    text = svg.read_text()
    for label in ("pcie: bandwidth (GB/s)", "makespan (ms)", "cpu: crypto (GB/s):", "protocol:"):
        assert f">{label}<" in text, label


def test_palette_and_formats():
    assert len(set(colours(8))) == 8 and len(set(colours(12))) == 12
    assert text_colour("#000000") == "white" and text_colour("#F0E442") == "black"
    assert check_format("a.PDF", "-o") == "pdf"
    from fastrack_core.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown image format"):
        check_format("a.gif", "--plot")
