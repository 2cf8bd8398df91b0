"""replay sensitivity: one-at-a-time perturbation, ranking, table and tornado plot."""

from __future__ import annotations

import pandas as pd
import pytest
from click.testing import CliRunner

import fakeplugins
from replay.frontend.cli import main
from tracegen.cli import main as tracegen_main


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    p = tmp_path_factory.mktemp("traces") / "r.parquet"
    r = CliRunner().invoke(tracegen_main, ["synth", "random", "--ops", "300", "--seed", "3", "-o", str(p)])
    assert r.exit_code == 0, r.output
    return str(p)


@pytest.fixture
def fake(monkeypatch):
    fakeplugins.install(monkeypatch)


def run(*args):
    return CliRunner().invoke(main, ["sensitivity", "--no-progress", *map(str, args)])


def test_ranks_parameters_and_writes_table_and_plot(tmp_path, trace, fake):
    out, png = tmp_path / "s.parquet", tmp_path / "tornado.png"
    r = run(trace, "--protocol", "fake-slow", "--model", "fake", "-o", out, "--plot", png, "-j", 1)
    assert r.exit_code == 0, r.output
    assert "crypto_gb_s" in r.output and "rank" in r.output
    df = pd.read_parquet(out)
    # numeric parameters only (bool and str are not perturbed): 4 parameters x 2 factors
    assert sorted(df["parameter"].unique()) == ["cpu.cores", "cpu.crypto_gb_s", "pcie.bandwidth_gb_s",
                                                 "pcie.latency_ns"]
    assert len(df) == 8 and set(df["factor"]) == {0.5, 2.0}
    # the fake protocol is dominated by CPU crypto (4 GB/s) over PCIe (32 GB/s); cores do nothing
    top = df.sort_values("rank").drop_duplicates("parameter")["parameter"].tolist()
    assert top[0] == "cpu.crypto_gb_s" and top[-1] == "cpu.cores"
    slower = df[(df["parameter"] == "cpu.crypto_gb_s") & (df["factor"] == 0.5)]["change"].iloc[0]
    assert slower > 0
    assert (df.loc[df["parameter"] == "cpu.cores", "change"] == 0).all()
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"


def test_pool_gives_the_same_table(tmp_path, trace, fake):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert run(trace, "--protocol", "fake-fast", "--model", "fake", "-o", a, "-j", 1).exit_code == 0
    assert run(trace, "--protocol", "fake-fast", "--model", "fake", "-o", b, "-j", 2).exit_code == 0
    pd.testing.assert_frame_equal(pd.read_parquet(a), pd.read_parquet(b))


@pytest.mark.parametrize("args, message", [
    (["--protocol", "nope"], "unknown protocol (a str of 4 characters)"),
    (["--protocol", "fake-slow", "--factors", "0.5,,2"], "empty value"),
    (["--protocol", "fake-slow", "--factors", "1"], "not a useful factor"),
    (["--protocol", "fake-slow", "--set", "pcie.nope=3"], "unknown parameter (a str of 9 characters)"),
    (["--protocol", "fake-slow", "--plot", "x.gif"], "unknown image format"),
])
def test_bad_input(tmp_path, trace, fake, args, message):
    r = run(trace, "--model", "fake", *args, "-j", 1)
    assert r.exit_code == 2, r.output
    assert message in r.output and len(r.output.strip().splitlines()) == 1


def test_real_model(tmp_path, trace):
    out = tmp_path / "s.parquet"
    r = run(trace, "--protocol", "baseline", "-o", out, "-j", 2, "--factors", "0.5,2")
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(out)
    assert "cpu_crypto.core_gb_s" in set(df["parameter"])
    assert df["rank"].min() == 1
