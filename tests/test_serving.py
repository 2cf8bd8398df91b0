"""Serving metrics from request markers (replay/pipeline/serving.py): hand-worked traces, CLI, errors."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from fastrack_core.markers import request_marker as rm
from replay.frontend.cli import main
from tracefactory import op, write


def host_only():
    """One host thread, two requests, times in ns (hand-worked below):

    t=0      arrive:0
    0-10us   cpu (prefill of 0)          -> first_token:0 at 10 us
    10us     arrive:1
    10-14us  cpu                          -> first_token:1 at 14 us
    14-20us  cpu                          -> token:0 at 20 us, token:1 at 20 us
    20-25us  cpu                          -> token:0 at 25 us, finish:0 at 25 us, finish:1 at 25 us
    """
    ops = []

    def add(kind, name, start, dur):
        deps = [(len(ops) - 1, "program")] if ops else []
        ops.append(op(kind, name, start, dur, thread=1, deps=deps))

    add("cpu", rm("arrive", 0), 0, 0)
    add("cpu", "prefill", 0, 10_000)
    add("cpu", rm("first_token", 0), 10_000, 0)
    add("cpu", rm("arrive", 1), 10_000, 0)
    add("cpu", "prefill", 10_000, 4_000)
    add("cpu", rm("first_token", 1), 14_000, 0)
    add("cpu", "decode", 14_000, 6_000)
    add("cpu", rm("token", 0), 20_000, 0)
    add("cpu", rm("token", 1), 20_000, 0)
    add("cpu", "decode", 20_000, 5_000)
    add("cpu", rm("token", 0), 25_000, 0)
    add("cpu", rm("finish", 0), 25_000, 0)
    add("cpu", rm("finish", 1), 25_000, 0)
    return ops


def test_host_only_trace_hand_worked(tmp_path):
    p = write(tmp_path / "s.parquet", host_only())
    r = CliRunner().invoke(main, ["--protocol", "captured", str(p), "--json", "--serving"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)["serving"]
    req = {q["id"]: q for q in s["requests"]}
    assert req[0]["ttft_ns"] == 10_000 and req[1]["ttft_ns"] == 4_000
    assert req[0]["output_tokens"] == 3 and req[1]["output_tokens"] == 2
    assert req[0]["tpot_ns"] == (25_000 - 10_000) / 2 and req[1]["tpot_ns"] == 20_000 - 14_000
    assert req[0]["e2e_ns"] == 25_000 and req[1]["e2e_ns"] == 15_000
    assert s["output_tokens"] == 5 and s["span_ns"] == 25_000
    assert s["output_tokens_per_s"] == pytest.approx(5 / 25e-6)
    assert s["ttft_ns"]["mean"] == 7_000
    # the TTFT path of request 0 is the 10 us prefill op; of request 1 the 4 us one: all 'cpu'
    b = s["breakdown"]["ttft_per_request_ns"]
    assert b["mechanism"] == {"cpu": 7_000.0} and b["category"] == {"host": 7_000.0}
    # TPOT per token: request 0 walks 25->10 us (15 us, 2 tokens), request 1 20->14 us (6 us, 1)
    t = s["breakdown"]["tpot_per_token_ns"]
    assert t["mechanism"]["cpu"] == pytest.approx((15_000 + 6_000) / 3)


def test_breakdown_adds_up_and_names_the_cc_mechanisms(tmp_path):
    """A request whose token is computed on the GPU and read back with a D2H copy: under
    baseline, its TTFT grows and the growth is attributed to the copy mechanisms."""
    ops = [op("cpu", rm("arrive", 0), 0, 0, thread=1),
           op("runtime", "cudaMemcpyAsync", 0, 5_000, thread=1, deps=[(0, "program")]),
           op("memcpy", "Memcpy HtoD (Pinned -> Device)", 6_000, 2_000, stream=7, device=0, bytes=64 << 10,
              copy_dir="H2D", host_mem="pinned", deps=[(1, "launch")]),
           op("runtime", "cudaLaunchKernel", 5_000, 5_000, thread=1, deps=[(1, "program")]),
           op("kernel", "decode", 11_000, 100_000, stream=7, device=0, deps=[(3, "launch"), (2, "stream")]),
           op("runtime", "cudaMemcpyAsync", 10_000, 5_000, thread=1, deps=[(3, "program")]),
           op("memcpy", "Memcpy DtoH (Device -> Pageable)", 111_000, 1_000, stream=7, device=0, bytes=8,
              copy_dir="D2H", host_mem="pageable", deps=[(5, "launch"), (4, "stream")]),
           op("sync", "cudaStreamSynchronize", 15_000, 98_000, thread=1, deps=[(5, "program"), (6, "sync")]),
           op("cpu", rm("first_token", 0), 113_000, 0, thread=1, deps=[(7, "program")]),
           op("cpu", rm("finish", 0), 113_000, 0, thread=1, deps=[(8, "program")])]
    p = write(tmp_path / "g.parquet", ops)
    from replay.frontend.compare import compare

    d = compare(str(p), ["none", "baseline"])
    rows = {r["protocol"]: r["serving"] for r in d["rows"]}
    for m in rows.values():
        b = m["breakdown"]["ttft_per_request_ns"]
        assert sum(b["mechanism"].values()) == pytest.approx(m["ttft_ns"]["mean"])
        assert sum(b["category"].values()) == pytest.approx(m["ttft_ns"]["mean"])
        assert m["tpot_ns"]["mean"] is None and m["output_tokens"] == 1
    base = rows["baseline"]
    assert base["ttft_ns"]["mean"] > rows["none"]["ttft_ns"]["mean"]
    o = base["overhead_vs_none"]
    assert o["ttft_mean"] > 0 and o["output_tokens_per_s"] < 0
    delta = o["breakdown_delta"]["ttft_per_request_ns"]["mechanism"]
    assert sum(delta.values()) == pytest.approx(base["ttft_ns"]["mean"] - rows["none"]["ttft_ns"]["mean"])
    # the CC data path of the copies is named by mechanism and direction
    assert any(k.startswith(("cpu_encrypt h2d", "cpu_decrypt d2h", "ce_", "pcie", "cc_submit")) for k in delta)


def test_compare_table_has_a_serving_section(tmp_path):
    p = write(tmp_path / "s.parquet", host_only())
    r = CliRunner().invoke(main, ["compare", str(p), "--protocols", "none,baseline"])
    assert r.exit_code == 0, r.output
    assert "TTFT mean" in r.output and "tokens/s" in r.output


def test_run_text_report_has_serving_lines(tmp_path):
    p = write(tmp_path / "s.parquet", host_only())
    r = CliRunner().invoke(main, ["--protocol", "baseline", str(p)])
    assert r.exit_code == 0, r.output
    assert "TTFT" in r.output and "TPOT" in r.output and "tokens/s" in r.output


@pytest.mark.parametrize("cmd", [["--serving"], ["compare", "--serving"]])
def test_serving_asked_of_a_trace_without_markers_is_one_line_exit_2(tmp_path, cmd):
    from test_build import launch_trace

    p = write(tmp_path / "t.parquet", launch_trace())
    tl = tmp_path / "tl.json"
    args = [*cmd, str(p)] + (["--timeline", str(tl)] if cmd == ["--serving"] else [])
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2
    assert len(r.output.strip().splitlines()) == 1 and "request markers" in r.output
    assert not tl.exists()


def test_markers_are_only_zero_duration_cpu_ops(tmp_path):
    from replay.pipeline.run import load_graph
    from replay.pipeline.serving import request_marks

    ops = host_only()
    ops[1]["name"] = rm("arrive", 5)  # a 10 us cpu op with a marker name is not a marker
    g, _ = load_graph(write(tmp_path / "s.parquet", ops))
    marks = request_marks(g)
    assert 5 not in marks.rid.tolist() and len(marks) == 9
    assert np.all(g.dur[marks.node] == 0)


def test_sweep_table_has_serving_columns(tmp_path):
    import pandas as pd

    p = write(tmp_path / "s.parquet", host_only())
    out = tmp_path / "sw.parquet"
    r = CliRunner().invoke(main, ["sweep", str(p), "--protocols", "none,baseline", "-o", str(out), "-j", "1"])
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(out).set_index("protocol")
    assert df.loc["none", "ttft_mean_ns"] == 7_000 and df.loc["none", "output_tokens_per_s_vs_none"] == 1.0
    assert df.loc["baseline", "output_tokens_per_s"] == pytest.approx(5 / 25e-6)  # host-only: nothing to protect
