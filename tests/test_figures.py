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
    for label in ("makespan (ms)", "CC overhead vs none (ms)", "none", "baseline", "fastrack", "overhead",
                  "makespan change"):
        assert f">{label}<" in text, label
    assert "1.00x" in text  # the none bar's slowdown, written above it


def test_compare_json_carries_reference_and_data_parallel(tmp_path, trace):
    r = CliRunner().invoke(main, ["compare", str(trace), "--protocols", "baseline", "--json"])
    d = json.loads(r.output)
    assert d["reference"]["protocol"] == "none" and d["data_parallel"] is None
    assert sum(d["reference"]["critical_path_ns"].values()) > 0


def test_data_parallel_chart_says_how_many_gpus_and_draws_the_overhead(tmp_path):
    from replay.frontend.compare import plot_breakdown

    cp = {"compute": 3_000_000, "comm": 1_000_000}
    d = {"trace": "t.parquet", "preset": "p", "data_parallel": {"world": 4, "bucket_mb": 25.0},
         "reference": {"protocol": "none", "makespan_ns": 4_000_000, "critical_path_ns": cp},
         "rows": [{"protocol": "baseline", "makespan_ns": 6_000_000, "slowdown_vs_none": 1.5,
                   "critical_path_ns": {"compute": 2_000_000, "comm": 4_000_000}}]}
    svg = tmp_path / "dp.svg"
    plot_breakdown(d, str(svg))
    text = svg.read_text()
    assert "4 GPUs, data-parallel what-if" in text and ">none<" in text
    assert "1.50x" in text and ">6<" in text  # makespan above the bar, in ms
    # the overhead panel: +2 ms (+50%), comm +3 ms on the path, and the path moving off the GPU (-1 ms)
    assert "+2" in text and "+50.0%" in text and ">comm<" in text and "path moved host&lt;-&gt;GPU" in text
    # legend in stack order: the path shift (drawn last) is listed before comm
    assert text.index("path moved host") < text.index(">comm<")


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


# ----------------------------------------------------------------------------- paper-column checks

@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A sweep of 5 traces x 2 protocols x 5 PCIe bandwidths (log-spaced) x 2 crypto rates."""
    d = tmp_path_factory.mktemp("study")
    traces = []
    for seed in range(5):
        p = d / f"trace-with-a-long-name-{seed}.parquet"
        r = CliRunner().invoke(tracegen_main, ["synth", "random", "--ops", "120", "--seed", str(seed), "-o", str(p)])
        assert r.exit_code == 0, r.output
        traces.append(str(p))
    out = d / "s.parquet"
    r = CliRunner().invoke(main, ["sweep", *traces, "--protocols", "baseline,fastrack",
                                  "--set", "pcie.h2d_bandwidth_gb_s+pcie.d2h_bandwidth_gb_s=2,8,32,128,512",
                                  "--set", "host.staging_copy_gb_s=5,10", "-o", str(out), "-j", "1", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "slowdown vs none" in r.output and "baseline x" in r.output  # the sweep's result table
    return out


@pytest.fixture
def drawn(monkeypatch):
    """Every figure saved while the fixture is active, checked before it is closed: the texts whose
    boxes (matplotlib's tight window extents) overlap another text's."""
    from replay.frontend import figures

    seen: list[tuple[str, list, float]] = []
    real = figures.save

    def checking_save(fig, path, fmt):
        seen.append((str(path), figures.text_overlaps(fig), fig.get_figwidth()))
        real(fig, path, fmt)

    monkeypatch.setattr(figures, "save", checking_save)
    return seen


def _assert_clean(drawn):
    assert drawn
    for path, overlaps, _width in drawn:
        assert overlaps == [], (path, overlaps)


@pytest.mark.parametrize("args", [
    ["--x", "pcie.h2d_bandwidth_gb_s", "--facet", "host.staging_copy_gb_s", "--logx"],  # log ticks in facets
    ["--x", "pcie.h2d_bandwidth_gb_s", "--where", "host.staging_copy_gb_s=5", "--logx"],  # 5 traces: panels
    ["--x", "host.staging_copy_gb_s", "--facet", "pcie.h2d_bandwidth_gb_s", "--logx"],  # long facet titles
    ["--x", "host.staging_copy_gb_s", "--where", "pcie.h2d_bandwidth_gb_s=8", "--kind", "scatter",
     "--hue", "trace"],  # scatter, one panel, long names in the legend
], ids=["logx-facets", "many-traces", "long-facet-titles", "scatter"])
def test_study_plots_have_no_overlapping_labels(tmp_path, study, drawn, args):
    r = CliRunner().invoke(main, ["plot", str(study), "--y", "slowdown", *args, "-o", str(tmp_path / "p.png")])
    assert r.exit_code == 0, r.output
    _assert_clean(drawn)


def test_many_traces_get_panels_not_line_styles(tmp_path, study):
    png = tmp_path / "p.png"
    r = CliRunner().invoke(main, ["plot", str(study), "--x", "pcie.h2d_bandwidth_gb_s", "--y", "slowdown",
                                  "--where", "host.staging_copy_gb_s=5", "-o", str(png)])
    assert r.exit_code == 0, r.output
    assert "one panel per value of trace (5 values" in r.output


def test_log_axis_labels_the_swept_values(tmp_path, study):
    svg = tmp_path / "p.svg"
    r = CliRunner().invoke(main, ["plot", str(study), "--x", "pcie.h2d_bandwidth_gb_s", "--y", "slowdown",
                                  "--facet", "host.staging_copy_gb_s", "--logx", "-o", str(svg)])
    assert r.exit_code == 0, r.output
    text = svg.read_text()
    assert all(f">{v}<" in text for v in (2, 8, 32, 128, 512))


def test_compare_tornado_and_explain_figures_have_no_overlapping_labels(tmp_path, trace, drawn):
    from replay.frontend.figures import COLUMN_IN

    long = "baseline,fastrack,fastrack:overlap,fastrack:direct,fastrack:auth"
    for args in (["compare", str(trace), "--protocols", long, "--plot", str(tmp_path / "c.png")],
                 ["sensitivity", str(trace), "--protocol", "baseline", "-j", "1", "--no-progress", "--plot",
                  str(tmp_path / "t.png")],
                 ["explain", str(trace), "-j", "1", "--protocols", long, "-o", str(tmp_path / "e.md")]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, r.output
    _assert_clean(drawn)
    # explain's figures are one paper column wide
    assert [w for p, _o, w in drawn if ".md" in p or "e." in p.rsplit("/", 1)[-1]] == [COLUMN_IN] * 3


def test_text_overlaps_finds_an_overlap():
    from replay.frontend.figures import paper_style, text_overlaps

    with paper_style() as plt:
        fig, ax = plt.subplots(figsize=(3.5, 2))
        ax.text(0.5, 0.5, "one label")
        ax.text(0.52, 0.5, "another label")
        assert text_overlaps(fig) == [("one label", "another label")]
        plt.close(fig)


@pytest.mark.parametrize("ext", ["svg", "pdf", "png"])
def test_figures_are_reproducible(tmp_path, trace, ext):
    a, b = tmp_path / f"a.{ext}", tmp_path / f"b.{ext}"
    for out in (a, b):
        r = CliRunner().invoke(main, ["compare", str(trace), "--protocols", "baseline", "--plot", str(out)])
        assert r.exit_code == 0, r.output
    assert a.read_bytes() == b.read_bytes()
    if ext == "svg":
        assert b"<dc:date>" not in a.read_bytes()
