"""replay plot: a figure from a study table; unknown columns are one-line errors."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import fakeplugins
from replay.frontend.cli import main
from tracegen.cli import main as tracegen_main


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    d = tmp_path_factory.mktemp("study")
    t = d / "r.parquet"
    assert CliRunner().invoke(tracegen_main, ["synth", "random", "--ops", "200", "--seed", "4", "-o", str(t)]).exit_code == 0
    mp = pytest.MonkeyPatch()
    fakeplugins.install(mp)
    try:
        out = d / "results.parquet"
        r = CliRunner().invoke(main, ["sweep", str(t), "--model", "fake", "--protocols", "fake-slow,fake-fast",
                                      "--set", "pcie.bandwidth_gb_s=8,16,32", "--set", "cpu.crypto_gb_s=2,4",
                                      "-o", str(out), "-j", "1", "--no-progress"])
        assert r.exit_code == 0, r.output
    finally:
        mp.undo()
    return out


@pytest.mark.parametrize("fmt, magic", [("png", b"\x89PNG"), ("svg", b"<?xml")])
def test_line_plot(tmp_path, study, fmt, magic):
    fig = tmp_path / f"fig.{fmt}"
    r = CliRunner().invoke(main, ["plot", str(study), "--x", "pcie.bandwidth_gb_s", "--y", "slowdown",
                                  "-o", str(fig)])
    assert r.exit_code == 0, r.output
    assert "6 line(s)" in r.output  # 3 protocols x 2 values of the other swept parameter
    assert fig.read_bytes()[:5].startswith(magic)


def test_facet_where_scatter(tmp_path, study):
    fig = tmp_path / "fig.png"
    r = CliRunner().invoke(main, ["plot", str(study), "--x", "pcie.bandwidth_gb_s", "--y", "makespan_ns",
                                  "--facet", "cpu.crypto_gb_s", "--where", "protocol=fake-slow", "--kind", "scatter",
                                  "--logx", "-o", str(fig)])
    assert r.exit_code == 0, r.output
    assert "2 line(s)" in r.output and fig.exists()


@pytest.mark.parametrize("args, message", [
    (["--x", "pcie.bandwdith_gb_s"], "did you mean pcie.bandwidth_gb_s"),
    (["--x", "pcie.bandwidth_gb_s", "--y", "protocol"], "not a numeric column"),
    (["--x", "pcie.bandwidth_gb_s", "--where", "protocol=nope"], "no rows left"),
])
def test_bad_columns(tmp_path, study, args, message):
    fig = tmp_path / "fig.png"
    r = CliRunner().invoke(main, ["plot", str(study), *args, "-o", str(fig)])
    assert r.exit_code == 2 and message in r.output and len(r.output.strip().splitlines()) == 1
    assert not fig.exists()


def test_missing_results_file(tmp_path):
    r = CliRunner().invoke(main, ["plot", str(tmp_path / "no.parquet"), "--x", "a.b", "-o", str(tmp_path / "f.png")])
    assert r.exit_code == 2 and "no such results file" in r.output
