"""tracegen capture (emulation): the CUDA API beyond tensors and modules:
device indices and DataParallel, torch.Stream/Event/Generator on cuda, the default device,
memory statistics, NVTX ranges as markers, legacy tensor types, record_stream, and the one-line
refusal of an API the emulation does not cover."""

import textwrap

import pytest
import torch
from click.testing import CliRunner

from fastrack_core.schema import DepKind
from fastrack_core.traceio import read_trace
from tracegen.cli import main as tracegen_main


@pytest.fixture(scope="module")
def emu():
    from tracegen import emulation

    emulation.preload()
    return emulation


def _capture(tmp_path, body: str, name="work.py", opts=()):
    script = tmp_path / name
    script.write_text(textwrap.dedent(body))
    out = script.with_suffix(".parquet")
    res = CliRunner().invoke(tracegen_main, ["capture", "-o", str(out), *opts, str(script)], catch_exceptions=False)
    return res, out


def _df(path):
    return read_trace(path).table.to_pandas()


def _kernels(df):
    return [n.split(" [")[0] for n in df[df.kind == "kernel"].name]


DP = """
import torch, torch.nn as nn
torch.manual_seed(0)
dev = torch.device(0)
assert dev == torch.device("cuda", 0) and isinstance(dev, torch.device)
net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
model = nn.DataParallel(net) if WRAP else net.to(dev)
x = torch.randn(4, 16)                       # on the host: 256 bytes to copy
y = model(x if WRAP else x.to(dev))
assert y.is_cuda and y.device == dev
y.sum().backward()
"""


def test_device_index_and_data_parallel_is_the_module(emu, tmp_path):
    res_dp, out_dp = _capture(tmp_path, "WRAP = True\n" + DP, "dp.py")
    assert res_dp.exit_code == 0, res_dp.output
    res_plain, out_plain = _capture(tmp_path, "WRAP = False\n" + DP, "plain.py")
    assert res_plain.exit_code == 0, res_plain.output
    dp, plain = _df(out_dp), _df(out_plain)
    # one emulated GPU: DataParallel runs the module itself, kernel for kernel
    assert _kernels(dp) == _kernels(plain) and len(_kernels(dp)) >= 6
    h2d = dp[dp.copy_dir == "H2D"]
    assert (h2d.bytes == 4 * 16 * 4).sum() == 1  # the scattered input: one copy to cuda:0
    assert sorted(h2d.bytes) == sorted(plain[plain.copy_dir == "H2D"].bytes)


def test_torch_stream_event_generator_and_default_device(emu, tmp_path):
    res, out = _capture(tmp_path, """
    import torch
    s = torch.Stream(device="cuda")
    done = torch.Event(device="cuda", enable_timing=True)
    assert isinstance(s, torch.Stream) and isinstance(done, torch.Event)
    g = torch.Generator(device="cuda")
    g.manual_seed(1)
    assert isinstance(g, torch.Generator) and g.device == torch.device("cuda", 0)
    torch.set_default_device("cuda")
    assert torch.get_default_device() == torch.device("cuda", 0)
    x = torch.randn(128, 128, generator=g)          # on the emulated GPU, stream 7
    assert x.is_cuda
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = x @ x                                   # on the side stream
    done.record(s)
    done.wait(torch.cuda.current_stream())
    z = y + 1                                       # waits for the side stream
    ids = torch.tensor([1, 2, 3])                   # default device: an H2D copy of 24 bytes
    with torch.device("cpu"):
        assert not torch.zeros(2).is_cuda
    done.synchronize()
    # left set on purpose: the capture restores the default device
    """)
    assert res.exit_code == 0, res.output
    assert torch.get_default_device() == torch.device("cpu") and torch.empty(1).device.type == "cpu"
    df = _df(out)
    k = df[df.kind == "kernel"]
    mm = k[k.name.str.startswith("aten::mm")]
    assert len(mm) == 1 and mm.stream.iloc[0] not in (-1, 7)
    assert set(k[k.name.str.startswith("aten::randn") | k.name.str.startswith("aten::normal")].stream) == {7}
    add = k[k.name.str.startswith("aten::add")]
    assert len(add) == 1 and add.stream.iloc[0] == 7
    ev = [d for d, kk in zip(add.deps.iloc[0], add.dep_kinds.iloc[0]) if kk == DepKind.EVENT]
    assert ev and df.name[ev[0]].startswith("aten::mm")  # z waited for y through the event
    assert (df[df.copy_dir == "H2D"].bytes == 24).sum() == 1
    assert (df.name == "cudaEventSynchronize").sum() == 1


def test_memory_statistics_fraction_legacy_types_record_stream(emu, tmp_path):
    res, out = _capture(tmp_path, """
    import torch
    stats = torch.cuda.memory_stats()
    print("keys", len(stats), stats["allocated_bytes.all.current"], stats["max_split_size"],
          stats["oversize_allocations.peak"], stats["num_ooms"])
    assert torch.cuda.memory_stats_as_nested_dict()["reserved_bytes"]["large_pool"]["peak"] == 0
    torch.cuda.set_per_process_memory_fraction(0.5)
    assert torch.cuda.get_per_process_memory_fraction() == 0.5
    try:
        torch.cuda.set_per_process_memory_fraction(1.5)
    except ValueError:
        print("fraction refused")
    a = torch.cuda.FloatTensor(2, 3)                # uninitialised: no copy, no kernel
    assert a.shape == (2, 3) and a.dtype == torch.float32 and isinstance(a, torch.cuda.FloatTensor)
    b = torch.cuda.LongTensor([1, 2, 3])            # H2D, 24 bytes
    assert isinstance(b, torch.cuda.LongTensor) and not isinstance(b, torch.cuda.FloatTensor)
    h = torch.ones(4).type(torch.cuda.HalfTensor)   # H2D of the 16 fp32 bytes, then on the GPU
    assert h.type() == "torch.cuda.HalfTensor" and h.is_cuda
    assert torch.ones(2).type("torch.cuda.DoubleTensor").dtype == torch.float64
    s = torch.cuda.Stream()
    torch.cuda.nvtx.range_push("record_stream")
    b.record_stream(s)                              # allocator bookkeeping: nothing recorded
    torch.cuda.nvtx.range_pop()
    """, opts=("--host-time", "modelled"))  # nothing between two markers: no script time
    assert res.exit_code == 0, res.output
    n_keys = 5 + 1 + 9 * 3 * 4 + 2 * 4  # counters, max_split_size, per-pool stats, oversize stats
    assert f"keys {n_keys} 0 -1 0 0" in res.output and "fraction refused" in res.output
    df = _df(out)
    assert sorted(df[df.copy_dir == "H2D"].bytes) == [8, 16, 24]  # DoubleTensor of 2 fp32, HalfTensor of 4 fp32, LongTensor
    i = df.index[df.name == "range_push:record_stream"][0]
    assert df.name[i + 1] == "range_pop:record_stream"  # nothing between the two markers
    with pytest.raises(TypeError):  # the patches are gone: the CPU build's own type again
        torch.cuda.FloatTensor(2)


def test_nvtx_ranges_are_markers(emu, tmp_path):
    res, out = _capture(tmp_path, """
    import torch
    from torch.cuda import nvtx
    x = torch.ones(64, device="cuda")
    assert nvtx.range_push("step") == 0
    with nvtx.range("inner {}", 1):
        y = x * 2
    nvtx.mark("checkpoint")
    assert nvtx.range_pop() == 0 and nvtx.range_pop() == -1
    rid = nvtx.range_start("unnested")
    nvtx.range_end(rid)
    """)
    assert res.exit_code == 0, res.output
    df = _df(out)
    marks = df[df.name.str.startswith("range_")]
    assert list(marks.name) == ["range_push:step", "range_push:inner 1", "range_pop:inner 1",
                                "range_push:checkpoint", "range_pop:checkpoint", "range_pop:step"]
    assert set(marks.kind) == {"cpu"} and set(marks.dur_ns) == {0} and set(marks.thread) == {1}
    # the multiply's launch sits inside the inner range
    launch = df.index[(df.name == "cudaLaunchKernel")][-1]
    assert marks.index[1] < launch < marks.index[2]
    notes = read_trace(out).metadata["capture_notes"]
    assert len(notes) == 1 and "range_start" in notes[0]
    assert res.stderr.count("note: torch.cuda.nvtx.range_start") == 1


def test_torch_compile_is_noted_on_stderr_and_in_metadata(emu, tmp_path):
    res, out = _capture(tmp_path, """
    import torch
    f = torch.compile(torch.nn.Linear(8, 8).cuda())
    g = torch.compile(mode="max-autotune")(torch.nn.Linear(8, 8).cuda())
    f(torch.ones(2, 8, device="cuda"))
    """)
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.stderr.splitlines() if "torch.compile" in ln]
    assert len(lines) == 1 and "eager" in lines[0]
    assert read_trace(out).metadata["capture_notes"] == [lines[0].split("note: ", 1)[1]]


def test_no_notes_no_metadata_key(emu, tmp_path):
    res, out = _capture(tmp_path, "import torch\ntorch.ones(3, device='cuda')\n")
    assert res.exit_code == 0 and "capture_notes" not in read_trace(out).metadata


@pytest.mark.parametrize("call,name", [
    ("torch.cuda.caching_allocator_alloc(1024)", "torch.cuda.caching_allocator_alloc"),
    ("torch.cuda.ExternalStream(1234)", "torch.cuda.ExternalStream"),
    ("torch.cuda.CUDAGraph().raw_cuda_graph()", "torch.cuda.CUDAGraph.raw_cuda_graph"),
])
def test_unsupported_api_is_one_line(emu, tmp_path, call, name):
    res, out = _capture(tmp_path, f"""
    import torch
    x = torch.ones(4, device="cuda")
    def setup():
        {call}
    setup()
    """)
    assert res.exit_code == 2
    assert res.stderr.splitlines() == [f"error: {tmp_path / 'work.py'}: emulation does not support {name}; "
                                       "no trace written"]
    assert "Traceback" not in res.output
    assert not out.exists() and not list(tmp_path.glob("*.part"))


def test_guarded_api_still_runs_and_patches_are_undone(emu, tmp_path):
    before = (torch.device, torch.Generator, torch.Stream, torch.Event, torch.Tensor.type, torch.Tensor.data_ptr,
              torch.cuda.FloatTensor, torch.cuda.caching_allocator_alloc, torch.cuda.nvtx.range_push,
              torch.cuda.CUDAGraph, torch.cuda.graphs.graph_pool_handle)
    res, _ = _capture(tmp_path, """
    import torch
    assert torch.cuda.get_gencode_flags() == torch.cuda.get_gencode_flags()  # guarded, works in the CPU build
    try:
        raise torch.cuda.OutOfMemoryError("x")  # exception classes are left alone
    except torch.cuda.OutOfMemoryError:
        pass
    torch.ones(2, device=0)
    """)
    assert res.exit_code == 0, res.output
    after = (torch.device, torch.Generator, torch.Stream, torch.Event, torch.Tensor.type, torch.Tensor.data_ptr,
             torch.cuda.FloatTensor, torch.cuda.caching_allocator_alloc, torch.cuda.nvtx.range_push,
             torch.cuda.CUDAGraph, torch.cuda.graphs.graph_pool_handle)
    assert after == before
    with pytest.raises(RuntimeError):
        torch.device(0)  # no accelerator here: the CPU build's answer again


def test_set_default_tensor_type_cuda_and_restored_after(emu, tmp_path):
    res, out = _capture(tmp_path, """
    import torch
    torch.set_default_tensor_type(torch.cuda.HalfTensor)   # as the original LLaMA example does
    w = torch.empty(64, 64)
    assert w.is_cuda and w.dtype == torch.float16
    b = torch.tensor([1.0, 2.0])                           # fp16 on the GPU: an H2D copy of 4 bytes
    assert b.is_cuda and b.dtype == torch.float16
    """)
    assert res.exit_code == 0, res.output
    df = _df(out)
    assert list(df[df.copy_dir == "H2D"].bytes) == [4]
    assert torch.get_default_dtype() == torch.float32 and torch.empty(1).device.type == "cpu"
