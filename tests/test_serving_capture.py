"""Request markers from captures: record_function under emulation, Kineto user annotations."""

import textwrap

import numpy as np

import pytest
from click.testing import CliRunner

from fastrack_core.traceio import read_trace
from tracegen.cli import main as tracegen_main

SCRIPT = """
import torch
from torch.profiler import record_function
w = torch.randn(64, 64, device="cuda")
for rid in range(2):
    with record_function(f"request:arrive:{rid}"):
        pass
    x = torch.randn(4, 64).to("cuda")
    for k in range(3):
        x = x @ w
        tok = int(x.sum().item())   # the host has the token
        ev = "first_token" if k == 0 else "token"
        with record_function(f"request:{ev}:{rid}"):
            pass
    with record_function(f"request:finish:{rid}"):
        pass
    with record_function("request:bogus:1"):   # not a marker name: stays a plain range
        pass
"""


@pytest.fixture(scope="module")
def emu():
    from tracegen import emulation

    emulation.preload()
    return emulation


def test_record_function_writes_request_markers(emu, tmp_path):
    p = tmp_path / "serve.py"
    p.write_text(textwrap.dedent(SCRIPT))
    out = tmp_path / "serve.parquet"
    r = CliRunner().invoke(tracegen_main, ["capture", "-o", str(out), str(p)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    df = read_trace(out).table.to_pandas()
    marks = df[df.name.str.startswith("request:")]
    assert list(marks.name) == [f"request:{e}:{rid}" for rid in range(2)
                                for e in ("arrive", "first_token", "token", "token", "finish")]
    assert (marks.kind == "cpu").all() and (marks.dur_ns == 0).all()
    # each token marker comes after the D2H read of that token (program order on the host thread)
    reads = df[(df.copy_dir == "D2H")].index
    firsts = marks[marks.name.str.contains("first_token|:token:")].index
    assert len(reads) == 6 and all(f > r for f, r in zip(firsts, reads))
    from replay.pipeline.run import replay_trace
    from replay.pipeline.serving import serving_metrics

    rep = replay_trace(out, "none")
    m = serving_metrics(rep.graph, rep.schedule)
    assert m["complete_requests"] == 2 and m["output_tokens"] == 6
    assert m["ttft_ns"]["mean"] > 0 and m["tpot_ns"]["mean"] > 0


def test_kineto_user_annotations_become_request_markers(tmp_path):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_kineto_import import X, frame, kern, rt, write
    from tracegen.importers.kineto import import_kineto

    ev = [X("user_annotation", "request:arrive:7", 0.0, 2.0),
          rt("cudaLaunchKernel", 5.0, 4.0, 1), kern("gemm", 10.0, 50.0, 1),
          rt("cudaMemcpyAsync", 12.0, 3.0, 2), kern("Memcpy DtoH (Device -> Pinned)", 60.0, 1.0, 2, cat="gpu_memcpy"),
          rt("cudaStreamSynchronize", 16.0, 46.0, 3),
          X("user_annotation", "request:first_token:7", 63.0, 1.5),
          X("cpu_op", "request:finish:7", 65.0, 0.5),
          X("user_annotation", "request:nonsense:7", 66.0, 0.5),  # not a marker name: an annotation
          rt("cudaLaunchKernel", 70.0, 4.0, 4), kern("gemm", 75.0, 50.0, 4)]
    table, _ = import_kineto([write(tmp_path / "k.json", ev)])
    df = frame(table).sort_values("op_id")
    marks = df[df.name.str.startswith("request:")]
    assert list(marks.name) == ["request:arrive:7", "request:first_token:7", "request:finish:7"]
    assert (marks.kind == "cpu").all() and (marks.dur_ns == 0).all()
    assert list(marks.start_ns - df.start_ns.min()) == [0, 63_000, 65_000]
    # markers sit in program order between the calls of their thread
    first = marks[marks.name == "request:first_token:7"].iloc[0]
    from fastrack_core.schema import DepKind
    prog = [d for d, k in zip(first.deps, first.dep_kinds) if k == DepKind.PROGRAM]
    assert prog and df.set_index("op_id").loc[prog[0], "name"] in ("cudaStreamSynchronize", "cpu")


ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name,requests", [("serving.parquet", 8), ("serving_offload.parquet", 16)])
def test_shipped_serving_traces_carry_complete_requests(name, requests):
    from collections import Counter

    from fastrack_core.markers import parse_request_marker

    t = read_trace(ROOT / "traces" / name)
    assert (ROOT / "traces" / name).stat().st_size < 2 * 1024 * 1024
    names = t.column("name")
    parsed = [parse_request_marker(str(n)) for n in names[np.char.startswith(names.astype(str), "request:")]]
    by_event = Counter(e for e, _ in parsed)
    assert by_event["arrive"] == by_event["first_token"] == by_event["finish"] == requests
    assert by_event["token"] > 0
    copy_dir = t.column("copy_dir")
    assert (copy_dir == "H2D").sum() > 0 and (copy_dir == "D2H").sum() > 0


def _capture_example(tmp_path, script, *args):
    out = tmp_path / "ex.parquet"
    r = CliRunner().invoke(tracegen_main, ["capture", "-o", str(out), str(ROOT / "examples" / script), "--", *args],
                           catch_exceptions=False)
    return r, out


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["--overlap"], ["--overlap", "--async-h2d"], ["--pageable-inputs"]])
def test_serving_example_capture(emu, tmp_path, extra):
    r, out = _capture_example(tmp_path, "serving.py", "--model", "tiny", "--requests", "3", "--concurrency", "2",
                              "--input-len", "24", "--output-len", "4", *extra)
    assert r.exit_code == 0, r.output
    df = read_trace(out).table.to_pandas()
    marks = df[df.name.str.startswith("request:")].name.str.split(":").str[1].value_counts()
    assert marks["arrive"] == marks["first_token"] == marks["finish"] == 3
    h2d = df[df.copy_dir == "H2D"]
    assert len(h2d) > 0 and (h2d.bytes < 4096).all()  # only small host-built inputs (weights made on the GPU)
    assert set(h2d.host_mem) == ({"pageable"} if "--pageable-inputs" in extra else {"pinned"})
    if "--async-h2d" in extra:  # input copies on their own stream
        assert h2d.stream.nunique() == 1 and h2d.stream.iloc[0] != df[df.kind == "kernel"].stream.mode()[0]
    assert (df.copy_dir == "D2H").sum() >= marks["first_token"]  # a readback per step


@pytest.mark.slow
def test_serving_example_refuses_a_concurrency_it_cannot_run(emu, tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, str(ROOT / "examples" / "serving.py"), "--concurrency", "513"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--concurrency" in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("offload", ["weights", "kv"])
def test_offload_example_moves_data_every_step(emu, tmp_path, offload):
    r, out = _capture_example(tmp_path, "offload.py", "--model", "tiny", "--offload", offload, "--batch", "2",
                              "--prompt-len", "8", "--gen-len", "3")
    assert r.exit_code == 0, r.output
    df = read_trace(out).table.to_pandas()
    h2d = df[(df.copy_dir == "H2D") & (df.host_mem == "pinned")]
    # weights: 4 matrices per layer in each of the 3 forwards; kv: K and V per layer in the 2 forwards with a past
    expected = 3 * 2 * 4 if offload == "weights" else 2 * 2 * 2
    assert (h2d.bytes >= 512).sum() == expected and (df.bytes[df.kind == "memcpy"] > 0).all()
    if offload == "kv":
        assert ((df.copy_dir == "D2H") & (df.host_mem == "pinned")).sum() == 3 * 2 * 2


@pytest.mark.slow
def test_validate_serving_quick_writes_between_the_markers(tmp_path):
    import subprocess
    import sys

    doc = tmp_path / "serving.md"
    doc.write_text("head\n<!-- validate_serving:begin -->\nold\n<!-- validate_serving:end -->\ntail\n")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "validation" / "validate_serving.py"), "--quick", "--write",
                        str(doc)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    text = doc.read_text()
    assert text.startswith("head\n") and text.endswith("tail\n") and "old" not in text
    assert "| 1 |" in text and "opt" not in text.split("### 3.")[0]
    bad = tmp_path / "nomarkers.md"
    bad.write_text("nothing\n")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "validation" / "validate_serving.py"), "--quick", "--write",
                        str(bad)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and bad.read_text() == "nothing\n"


def test_serving_example_decodes_in_cuda_graphs(emu, tmp_path):
    """--cuda-graphs (hand-checked schedule): 3 requests of 16 prompt + 4 output tokens at
    concurrency 2. Step 0 prefills r0 and r1 (eager), steps 1-3 decode both (bucket 2), step 4
    prefills r2 (eager), steps 5-7 decode it (bucket 1). A graph step is 5 H2D inputs into the
    static buffers, one cudaGraphLaunch, one D2H readback; an eager step launches its kernels."""
    r, out = _capture_example(tmp_path, "serving.py", "--model", "tiny", "--requests", "3", "--concurrency", "2",
                              "--input-len", "16", "--output-len", "4", "--range-ratio", "1", "--max-len", "32",
                              "--cuda-graphs")
    assert r.exit_code == 0, r.output
    df = read_trace(out).table.to_pandas()
    # graphs of buckets 1 and 2 captured once, at start-up
    assert (df.name == "cudaStreamBeginCapture").sum() == 2 and (df.name == "cudaGraphInstantiate").sum() == 2
    assert sorted(set(df.step) - {-1}) == list(range(8))  # ProfilerStep#0..7 (-1: start-up, the captures)
    for k in range(8):
        st = df[df.step == k]
        launches = (st.name == "cudaGraphLaunch").sum()
        h2d = ((st.kind == "memcpy") & (st.copy_dir == "H2D")).sum()
        d2h = ((st.kind == "memcpy") & (st.copy_dir == "D2H")).sum()
        if k in (0, 4):  # prefill steps run eagerly
            assert launches == 0 and (st.name == "cudaLaunchKernel").sum() > 20 and h2d == 6, k
        else:
            assert launches == 1 and (st.name == "cudaLaunchKernel").sum() == 0 and h2d == 5, k
            calls = list(st[st.kind == "runtime"].sort_values("start_ns").name)
            assert calls == ["cudaMemcpyAsync"] * 5 + ["cudaGraphLaunch", "cudaMemcpyAsync"], k  # inputs, replay, readback
        assert d2h == 1, k
    # under baseline CC the TPOT breakdown names the input-copy and readback mechanisms
    from replay.pipeline.run import replay_trace
    from replay.pipeline.serving import overhead, serving_metrics

    runs = {p: replay_trace(out, p) for p in ("none", "baseline")}
    m = {p: serving_metrics(rep.graph, rep.schedule) for p, rep in runs.items()}
    assert m["baseline"]["output_tokens"] == 12
    mech = overhead(m["baseline"], m["none"])["breakdown_delta"]["tpot_per_token_ns"]["mechanism"]
    assert any(k.endswith(" h2d") and v > 0 for k, v in mech.items()), mech
    assert any(k.endswith(" d2h") and v > 0 for k, v in mech.items()), mech
