"""tracegen capture (emulation): CUDA graphs as the hardware runs them. Capture
records the graph's GPU work and runs none of it; each replay is one cudaGraphLaunch call on the
host and the graph's ops on the GPU; the replay side reads each launch as one submission."""

import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

from fastrack_core.schema import DepKind
from fastrack_core.traceio import read_trace
from tracegen.cli import main as tracegen_main

GPU = ("kernel", "memcpy", "memset")


@pytest.fixture(scope="module")
def emu():
    from tracegen import emulation

    emulation.preload()
    return emulation


def _capture(tmp_path, body: str):
    script = tmp_path / "work.py"
    script.write_text(textwrap.dedent(body))
    out = script.with_suffix(".parquet")
    res = CliRunner().invoke(tracegen_main, ["capture", "-o", str(out), str(script)], catch_exceptions=False)
    return res, out


def _launched(df, i):
    """GPU ops with a launch dependency on op ``i``, in start order."""
    ids = [j for j in df.index if df.kind[j] in GPU
           and any(d == i and k == DepKind.LAUNCH for d, k in zip(df.deps[j], df.dep_kinds[j]))]
    return df.loc[ids].sort_values("start_ns")


GRAPH = """
import torch, torch.nn as nn
N = {n}
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64)).cuda()
static_x = torch.zeros(8, 64, device="cuda")
host_x = torch.randn(8, 64).pin_memory()
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s), torch.no_grad():        # warm-up on a side stream, as PyTorch advises
    model(static_x)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
assert not torch.cuda.is_current_stream_capturing()
with torch.no_grad(), torch.cuda.graph(g):
    assert torch.cuda.is_current_stream_capturing()
    static_x.copy_(host_x, non_blocking=True)        # captured: an H2D copy node (8 x 64 x 4 bytes)
    static_y = model(static_x)                       # captured: addmm, relu, addmm
for _ in range(N):
    g.replay()
torch.cuda.synchronize()
"""


@pytest.mark.parametrize("n", [1, 3])
def test_graph_capture_then_replay(emu, tmp_path, n):
    res, out = _capture(tmp_path, GRAPH.format(n=n))
    assert res.exit_code == 0, res.output
    df = read_trace(out).table.to_pandas()
    begin = df.index[df.name == "cudaStreamBeginCapture"]
    end = df.index[df.name == "cudaStreamEndCapture"]
    assert len(begin) == 1 and len(end) == 1
    t0, t1 = df.start_ns[begin[0]], df.start_ns[end[0]]
    # capture: the host makes its calls, the GPU runs nothing launched by them
    during = df[(df.start_ns > t0) & (df.start_ns < t1)]
    host_calls = during[during.kind == "runtime"]
    assert list(host_calls.name) == ["cudaMemcpyAsync", "cudaLaunchKernel", "cudaLaunchKernel", "cudaLaunchKernel"]
    assert all(len(_launched(df, i)) == 0 for i in host_calls.index)
    from tracegen.emulation.graphs import COSTS

    inst = df[df.name == "cudaGraphInstantiate"]
    assert list(inst.dur_ns) == [COSTS.instantiate_ns + 4 * COSTS.instantiate_node_ns]  # 4 nodes
    # replay: N launch calls, each launching the whole graph in capture order on the current stream
    launches = df[df.name == "cudaGraphLaunch"]
    assert len(launches) == n and set(launches.kind) == {"runtime"}
    assert set(launches.dur_ns) == {COSTS.launch_ns}
    for i in launches.index:
        ops = _launched(df, i)
        assert [k.split(" [")[0] for k in ops.name] == ["Memcpy HtoD (Pinned -> Device)", "aten::addmm",
                                                         "aten::relu", "aten::addmm"]
        assert list(ops.bytes)[0] == 8 * 64 * 4 and list(ops.copy_dir)[0] == "H2D"
        assert set(ops.stream) == {7} and set(ops.correlation) == {df.correlation[i]}
        assert (ops.start_ns >= df.start_ns[i] + df.dur_ns[i]).all()
        ends = (ops.start_ns + ops.dur_ns).values
        assert (ops.start_ns.values[1:] >= ends[:-1]).all()  # in order on the stream
    after = df[df.start_ns >= df.start_ns[launches.index[0]]]
    graph_ops = after[after.kind.isin(GPU)]
    assert len(graph_ops) == 4 * n  # nothing else runs after the first launch
    # every kernel of the trace: torch.zeros' fill and the warm-up before the capture, N x 3 after it
    k = df[df.kind == "kernel"]
    before = k[k.start_ns < t0]
    names = [name.split(" [")[0] for name in before.name]
    assert names[0].startswith("aten::zero") and names[1:] == ["aten::addmm", "aten::relu", "aten::addmm"]
    assert len(k) == 4 + 3 * n


def test_replay_reads_one_submission_per_graph_launch(emu, tmp_path):
    from replay.pipeline.build import build_graph
    from replay.protocols.copies import launchers
    from replay.protocols.editor import GraphEditor

    res, out = _capture(tmp_path, GRAPH.format(n=4))
    assert res.exit_code == 0, res.output
    trace = read_trace(out)
    df = trace.table.to_pandas()
    g = build_graph(trace)
    who = launchers(g, GraphEditor(g).edge_dst)
    op_of = {int(o): i for i, o in enumerate(g.op_id)}
    launch_ids = df.index[df.name == "cudaGraphLaunch"]
    graph_nodes = [op_of[j] for i in launch_ids for j in _launched(df, i).index]
    assert len(graph_nodes) == 16
    calls = {int(g.op_id[who[v]]) for v in graph_nodes}
    assert calls == set(int(i) for i in launch_ids)  # 4 launching calls for 16 GPU ops
    assert np.all(who[graph_nodes] >= 0)


def test_make_graphed_callables(emu, tmp_path):
    res, out = _capture(tmp_path, """
    import torch, torch.nn as nn
    m = nn.Linear(32, 32).cuda()
    sample = torch.randn(4, 32, device="cuda", requires_grad=True)
    gm = torch.cuda.make_graphed_callables(m, (sample,), num_warmup_iters=2)
    for _ in range(3):
        y = gm(torch.randn(4, 32, device="cuda", requires_grad=True))
        y.sum().backward()
    """)
    assert res.exit_code == 0, res.output
    df = read_trace(out).table.to_pandas()
    launches = df[df.name == "cudaGraphLaunch"]
    assert len(launches) == 6  # forward and backward graph per call
    fwd = [_launched(df, i) for i in launches.index[0::2]]
    bwd = [_launched(df, i) for i in launches.index[1::2]]
    assert all([n.split(" [")[0] for n in f.name] == ["aten::addmm"] for f in fwd)
    assert all(len(b) >= 2 and all(n.startswith("aten::") for n in b.name) for b in bwd)
    # a fresh input each call is copied into the graph's static input first (D2D, 4 x 32 x 4 bytes)
    d2d = df[df.copy_dir == "D2D"]
    assert (d2d.bytes == 4 * 32 * 4).sum() >= 3
    # the capture itself ran nothing on the GPU: 2 graphs, no op launched between begin and end
    for b, e in zip(df.index[df.name == "cudaStreamBeginCapture"], df.index[df.name == "cudaStreamEndCapture"]):
        inside = df[(df.start_ns > df.start_ns[b]) & (df.start_ns < df.start_ns[e]) & (df.kind == "runtime")]
        assert len(inside) and all(len(_launched(df, i)) == 0 for i in inside.index)


def test_sync_inside_capture_fails_as_cuda_does(emu, tmp_path):
    res, out = _capture(tmp_path, """
    import torch
    x = torch.ones(4, device="cuda")
    with torch.cuda.graph(torch.cuda.CUDAGraph()):
        y = x * 2
        print(y.sum().item())
    """)
    assert res.exit_code == 2 and "operation not permitted when stream is capturing" in res.output
    assert not out.exists()


def test_capture_on_the_default_stream_fails_as_pytorch_does(emu, tmp_path):
    res, out = _capture(tmp_path, """
    import torch
    x = torch.ones(4, device="cuda")
    g = torch.cuda.CUDAGraph()
    g.capture_begin()
    """)
    assert res.exit_code == 2 and "non-default stream" in res.output
    assert not out.exists()
