"""The replay command line: JSON output, timeline, one-line errors with exit code 2."""

import json

from click.testing import CliRunner

from replay.frontend.cli import main
from test_build import launch_trace
from tracefactory import op, write


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


def copy_trace():
    mib8 = 8 << 20
    return [
        op("runtime", "cudaMemcpyAsync", 0, 5_000, thread=1),
        op("memcpy", "Memcpy HtoD (Pinned -> Device)", 6_000, 170_000, stream=7, device=0, bytes=mib8,
           copy_dir="H2D", host_mem="pinned", deps=[(0, "launch")]),
        op("sync", "cudaStreamSynchronize", 5_000, 175_000, thread=1, deps=[(0, "program"), (1, "sync")]),
    ]


def test_tee_timeline_has_resource_tracks_and_bounce_counter(tmp_path):
    p = write(tmp_path / "c.parquet", copy_trace())
    tl = tmp_path / "tl.json"
    r = CliRunner().invoke(main, ["--protocol", "baseline", str(p), "--timeline", str(tl), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["slowdown_vs_none"] > 1 and d["preset"] and d["params_digest"]
    events = json.loads(tl.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"pcie_h2d", "ce_secure_h2d", "cpu_crypto"} <= tracks  # tracks with work (tests/test_timeline.py)
    counter = [e["args"]["slots"] for e in events if e["ph"] == "C"]
    assert counter and min(counter) >= 0 and counter[-1] == 0 and max(counter) >= 1


def test_every_option_of_every_command_has_help():
    import click

    ctx = click.Context(main)
    missing = []
    for name in main.list_commands(ctx):
        cmd = main.get_command(ctx, name)
        for param in cmd.params:
            if isinstance(param, click.Option) and not (param.help or "").strip():
                missing.append(f"replay {name} {param.opts[0]}")
    assert not missing, missing


def test_shared_options_are_declared_once():
    """--model/--preset/--set read the same in every command that replays one configuration."""
    import click

    ctx = click.Context(main)
    helps = {}
    for name in ("run", "compare", "sensitivity"):
        cmd = main.get_command(ctx, name)
        helps[name] = {p.opts[-1]: (p.help, p.default) for p in cmd.params
                       if p.opts[-1] in ("--model", "--preset", "--set")}
    assert len(helps["run"]) == 3
    assert helps["run"] == helps["compare"] == helps["sensitivity"]


def test_slowdown_on_numbers_and_columns():
    import numpy as np
    import pandas as pd

    from replay.pipeline.results import slowdown

    assert slowdown(3, 2) == 1.5
    assert slowdown(2, 3, 6) == 0.666667 and slowdown(2, 3, 9) == 0.666666667
    assert slowdown(5, 0) is None and slowdown(5, None) is None
    col = slowdown(pd.Series([3.0, 2.0, 4.0]), pd.Series([2.0, np.nan, 0.0]), 6)
    assert col.iloc[0] == 1.5 and np.isnan(col.iloc[1]) and np.isinf(col.iloc[2])


def test_a_replay_does_not_import_pandas(tmp_path):
    """pandas costs ~0.3 s of CPU at import, a tenth of a 1M-op replay: a replay of a Parquet
    trace (its consistency checks included) reads columns from the Arrow buffers instead."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    trace = Path(__file__).resolve().parent.parent / "traces" / "llama_infer.parquet"
    code = ("import runpy, sys\n"
            f"sys.argv = ['replay', '--protocol', 'baseline', {str(trace)!r}, '--json']\n"
            "try:\n    runpy.run_module('replay.frontend.cli', run_name='__main__')\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "assert 'pandas' not in sys.modules, 'pandas imported'\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy(),
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert '"makespan_ns"' in res.stdout
