"""``--scale KIND=FACTOR`` on run, compare and as a sweep axis; bad factors are one line, exit 2,
nothing written."""

import json

import pandas as pd
import pytest
from click.testing import CliRunner

from replay.frontend.cli import main
from test_causal import queue_trace
from tracefactory import write

BAD = ["gpu=2", "kernel=-1", "kernel=0", "kernel=nan", "kernel=inf", "kernel=abc", "kernel", "=2", "kernel=1001"]


@pytest.fixture
def trace(tmp_path):
    ops = queue_trace()
    ops[3]["dur_ns"] = 20  # the host finishes early: the GPU queue sets the makespan
    return write(tmp_path / "q.parquet", ops)


def test_run_scale_changes_the_makespan_and_is_named(trace):
    def run(*scale):
        r = CliRunner().invoke(main, [str(trace), "--json", *[a for s in scale for a in ("--scale", s)]])
        assert r.exit_code == 0, r.output
        return json.loads(r.output)

    base, fast = run(), run("kernel=0.5")
    assert base["scales"] == {} and fast["scales"] == {"kernel": 0.5}
    assert fast["makespan_ns"] < base["makespan_ns"]
    both = run("kernel=0.5", "host=2")
    assert both["scales"] == {"kernel": 0.5, "host": 2.0}
    assert "launch_latency_ns" in base["calibration"]


def test_compare_scale(trace):
    r = CliRunner().invoke(main, ["compare", str(trace), "--protocols", "fastrack", "--json", "--scale", "kernel=2"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["scales"] == {"kernel": 2.0}
    plain = json.loads(CliRunner().invoke(main, ["compare", str(trace), "--protocols", "fastrack", "--json"]).output)
    assert d["rows"][0]["makespan_ns"] > plain["rows"][0]["makespan_ns"]


@pytest.mark.parametrize("bad", BAD)
def test_bad_scale_is_one_line_exit_2_nothing_written(trace, tmp_path, bad):
    tl = tmp_path / "tl.json"
    r = CliRunner().invoke(main, [str(trace), "--scale", bad, "--timeline", str(tl)])
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and "--scale" in r.output
    assert not tl.exists()
    plot = tmp_path / "c.png"
    r = CliRunner().invoke(main, ["compare", str(trace), "--scale", bad, "--plot", str(plot)])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert not plot.exists()


def test_repeated_kind_is_an_error(trace):
    r = CliRunner().invoke(main, [str(trace), "--scale", "kernel=2", "--scale", "kernel=3"])
    assert r.exit_code == 2 and "given twice" in r.output


def test_sweep_scale_axis(trace, tmp_path):
    out = tmp_path / "s.parquet"
    r = CliRunner().invoke(main, ["sweep", "--no-progress", str(trace), "--protocols", "captured", "-j", "1",
                                  "--set", "scale.kernel=0.5,1,2", "-o", str(out)])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(out)
    df = df[df.protocol == "captured"].sort_values("scale.kernel")
    assert df["scale.kernel"].tolist() == [0.5, 1.0, 2.0]
    assert df["makespan_ns"].is_monotonic_increasing and df["makespan_ns"].nunique() == 3


@pytest.mark.parametrize("bad", ["scale.gpu=2", "scale.kernel=0", "scale.kernel=x", "scale.host=-1"])
def test_sweep_bad_scale_is_one_line_exit_2_nothing_written(trace, tmp_path, bad):
    out = tmp_path / "s.parquet"
    r = CliRunner().invoke(main, ["sweep", "--no-progress", str(trace), "--protocols", "captured", "-j", "1",
                                  "--set", bad, "-o", str(out)])
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and "scale." in r.output
    assert not out.exists() and not list(tmp_path.glob("s.parquet*"))
