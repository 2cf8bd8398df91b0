"""``tracegen capture --window-from/--window-to`` and the setup accounting of ``tracegen info`` and
``replay`` (docs/capture.md, "Setup out of the window")."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("torch")

from fastrack_core.schema import DepKind  # noqa: E402
from fastrack_core.setup_time import setup_split  # noqa: E402
from fastrack_core.traceio import read_trace  # noqa: E402
from tracegen.cli import main as tracegen_main  # noqa: E402
from tracegen.info import trace_info  # noqa: E402

# CPU weights uploaded once (the setup), then a decode loop; a record_function range around it
DECODE = textwrap.dedent("""
    import torch

    def load_weights():
        return [torch.randn(1024, 1024).to("cuda") for _ in range(6)]

    def step(ws, x):
        for w in ws:
            x = torch.relu(x @ w)
        return x

    def generate(ws, n):
        x = torch.randn(8, 1024, device="cuda")
        for _ in range(n):
            x = step(ws, x)
        return x

    ws = load_weights()
    with torch.profiler.record_function("decode"):
        y = generate(ws, 3)
    torch.cuda.nvtx.range_push("teardown")
    y.sum()
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
""")


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("win") / "decode.py"
    path.write_text(DECODE)
    return path


def _capture(script, out, *args):
    return CliRunner().invoke(tracegen_main, ["capture", "--host-time", "modelled", "-o", str(out), *args,
                                              str(script)], catch_exceptions=False)


@pytest.fixture(scope="module")
def captures(script, tmp_path_factory):
    d = tmp_path_factory.mktemp("caps")
    out = {}
    for key, args in {"full": [], "from_fn": ["--window-from", "generate"],
                      "one_call": ["--window-from", "generate", "--window-to", "generate"],
                      "range_to_fn": ["--window-from", "decode", "--window-to", "step"],
                      "to_nvtx": ["--window-to", "teardown"]}.items():
        res = _capture(script, d / f"{key}.parquet", *args)
        assert res.exit_code == 0, res.output
        out[key] = d / f"{key}.parquet"
    return out


def _h2d(t):
    cd = np.array([str(c) for c in t.column("copy_dir").to_pylist()])
    return int((cd == "H2D").sum())


def test_window_from_function_leaves_the_upload_out(captures):
    full, win = read_trace(captures["full"]), read_trace(captures["from_fn"])
    assert _h2d(full.table) == 6 and _h2d(win.table) == 0  # the six weight uploads are gone
    w = win.metadata["window"]
    assert w["from"] == "generate" and w["from_kind"] == "function" and w["to"] is None
    assert w["ops_before"] > 0 and w["before_ns"] > 0 and w["ops_after"] == 0
    assert win.table.num_rows + w["ops_before"] == full.table.num_rows
    names = win.table.column("name").to_pylist()
    assert not any(str(n).startswith("tracegen:window") for n in names)  # the markers are not written
    # no lag left by the dropped work: the first GPU op starts at its launch's end + the launch latency
    t = win.table
    start, dur = t.column("start_ns").to_numpy(), t.column("dur_ns").to_numpy()
    kinds = t.column("kind").to_pylist()
    first_gpu = next(i for i, k in enumerate(kinds) if k in ("kernel", "memcpy", "memset"))
    ds, ks = t.column("deps")[first_gpu].as_py(), t.column("dep_kinds")[first_gpu].as_py()
    launch = ds[ks.index(int(DepKind.LAUNCH))]
    gap = start[first_gpu] - (start[launch] + dur[launch])
    assert 0 <= gap <= 10_000, gap
    assert start.min() == 0
    span_full = (full.table.column("start_ns").to_numpy() + full.table.column("dur_ns").to_numpy()).max()
    assert (start + dur).max() < span_full - w["before_ns"] + 10_000


def test_window_one_call_and_ranges(captures):
    full = read_trace(captures["full"]).table.num_rows
    one = read_trace(captures["one_call"])
    assert one.metadata["window"]["to_kind"] == "function"
    assert one.metadata["window"]["ops_after"] > 0  # the teardown after generate() returned
    rng = read_trace(captures["range_to_fn"])
    w = rng.metadata["window"]
    assert (w["from_kind"], w["to_kind"]) == ("record_function", "function")
    kernels = [k for k in rng.table.column("kind").to_pylist() if k == "kernel"]
    assert len(kernels) == 1 + 6 * 2  # generate()'s randn, then the first step's six GEMMs and six ReLUs
    nv = read_trace(captures["to_nvtx"])
    w = nv.metadata["window"]
    assert w["from"] is None and w["to_kind"] == "nvtx" and w["ops_before"] == 0
    assert nv.table.num_rows < full


def test_window_bad_input_one_line_exit_2_nothing_written(script, tmp_path):
    for args, what in ((["--window-from", "no_such_function_xyz"], "--window-from no_such_function_xyz"),
                       (["--window-from", "generate", "--window-to", "no_such_function_xyz"], "--window-to"),
                       (["--window-from", ""], "empty name")):
        out = tmp_path / "w.parquet"
        res = _capture(script, out, *args)
        assert res.exit_code == 2, res.output
        lines = [ln for ln in res.output.splitlines() if not ln.startswith("tracegen capture: note")]
        assert len(lines) == 1 and what in lines[0], res.output
        assert not out.exists()
    res = CliRunner().invoke(tracegen_main, ["capture", "--nproc", "2", "--window-from", "generate",
                                             "-o", str(tmp_path / "n.parquet"), str(script)])
    assert res.exit_code == 2 and "one-rank" in res.output


def test_info_says_how_much_is_setup(captures):
    full = trace_info(str(captures["full"]))["setup"]
    assert full["rule"] == "upload-prefix" and 0.3 < full["share"] < 1
    win = trace_info(str(captures["from_fn"]))["setup"]
    assert win["rule"] == "window" and win["setup_ns"] == 0 and win["window"]["before_ns"] > 0
    # the upload prefix is what --window-from generate left out, within the first kernel's launch
    assert abs(full["setup_ns"] - win["window"]["before_ns"]) < 50_000
    res = CliRunner().invoke(tracegen_main, ["info", str(captures["full"])])
    assert res.exit_code == 0
    assert any(ln.startswith("setup: ") and " ms span (" in ln for ln in res.output.splitlines())


def test_setup_rules_in_order():
    start, end = np.array([0, 10, 20, 30]), np.array([5, 15, 25, 40])
    computes = np.array([False, False, True, True])
    assert setup_split(start, end, np.array([-1, -1, 0, 0]), computes)["rule"] == "before-first-step"
    assert setup_split(start, end, np.array([-1, -1, 0, 0]), computes)["setup_ns"] == 20
    s = setup_split(start, end, np.array([0, 0, 0, 0]), computes)  # step 0 from the origin: the uploads
    assert (s["rule"], s["setup_ns"], s["span_ns"], s["share"]) == ("upload-prefix", 20, 40, 0.5)
    assert setup_split(start, end, -np.ones(4), np.zeros(4, bool))["rule"] == "none"
    assert setup_split(start, end, -np.ones(4), computes, windowed=True)["setup_ns"] == 0


def test_replay_reports_setup(captures):
    from replay.frontend.cli import main as replay_main

    res = CliRunner().invoke(replay_main, ["--protocol", "baseline", "--json", str(captures["full"])])
    assert res.exit_code == 0, res.output
    s = json.loads(res.output)["setup"]
    assert s["rule"] == "upload-prefix" and s["span_ns"] == json.loads(res.output)["makespan_ns"]
    assert s["setup_overhead_ns"] > 0 and 0 < s["setup_overhead_share"] <= 1.0 + 1e-6  # the encrypted uploads
    res = CliRunner().invoke(replay_main, ["--protocol", "baseline", str(captures["from_fn"])])
    assert res.exit_code == 0
    assert any(ln.startswith("setup ") and "rule window" in ln for ln in res.output.splitlines())
