"""The replay command line: JSON output, timeline, one-line errors with exit code 2."""

import json

from click.testing import CliRunner

from replay.cli import main
from test_build import launch_trace
from tracefactory import write


def test_json_output_has_the_contract_keys(tmp_path):
    p = write(tmp_path / "t.parquet", launch_trace())
    r = CliRunner().invoke(main, ["--protocol", "captured", str(p), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    for key in ("protocol", "makespan_ns", "captured_span_ns", "ops", "ranks", "critical_path_ns", "resources"):
        assert key in d
    assert d["makespan_ns"] == 140 and d["ops"] == 6 and d["ranks"] == [0]
    assert sum(d["critical_path_ns"].values()) == 140


def test_summary_and_timeline(tmp_path):
    p = write(tmp_path / "t.parquet", launch_trace())
    tl = tmp_path / "tl.json"
    r = CliRunner().invoke(main, [str(p), "--timeline", str(tl)])
    assert r.exit_code == 0, r.output
    assert "makespan" in r.output and "critical path" in r.output
    events = json.loads(tl.read_text())["traceEvents"]
    xs = [e for e in events if e["ph"] == "X"]
    assert len(xs) == 6
    k1 = next(e for e in xs if e["name"] == "k1")
    assert k1["ts"] == 0.02 and k1["dur"] == 0.1


def test_missing_trace_is_one_line_exit_2(tmp_path):
    r = CliRunner().invoke(main, [str(tmp_path / "missing.parquet")])
    assert r.exit_code == 2
    assert "missing.parquet" in r.output and "no such file" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_bad_timeline_target_leaves_nothing(tmp_path):
    p = tmp_path / "bad.parquet"
    p.write_text("not parquet")
    tl = tmp_path / "tl.json"
    r = CliRunner().invoke(main, [str(p), "--timeline", str(tl)])
    assert r.exit_code == 2 and not tl.exists()
