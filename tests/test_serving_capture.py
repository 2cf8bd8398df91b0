"""Request markers from captures: record_function under emulation, Kineto user annotations."""

import textwrap

import pytest
from click.testing import CliRunner

from fastrack.traceio import read_trace
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
    from replay.run import replay_trace
    from replay.serving import serving_metrics

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
    from fastrack.schema import DepKind
    prog = [d for d, k in zip(first.deps, first.dep_kinds) if k == DepKind.PROGRAM]
    assert prog and df.set_index("op_id").loc[prog[0], "name"] in ("cudaStreamSynchronize", "cpu")
