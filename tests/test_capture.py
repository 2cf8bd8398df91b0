"""tracegen capture: emulated capture of CUDA scripts, the profiler path on a recorded Kineto
file, bad inputs, and the shipped traces."""

import gzip
import os
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import torch  # noqa: E402  (the test extra installs torch==2.13.0)

from fastrack_core.schema import DepKind  # noqa: E402
from fastrack_core.traceio import read_trace  # noqa: E402
from tracegen.cli import main as tracegen_main  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def emu():
    """Import torch and what the emulator preloads once for the whole session."""
    from tracegen import emulation

    emulation.preload()
    return emulation


def _script(tmp_path, body: str, name="work.py") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def _capture(script, *args, out=None):
    out = out or script.with_suffix(".parquet")
    res = CliRunner().invoke(tracegen_main, ["capture", "-o", str(out), *args, str(script)], catch_exceptions=False)
    return res, out


def _df(path):
    return read_trace(path).table.to_pandas()


def _check_deps(df):
    n = len(df)
    assert list(df.op_id) == list(range(n))
    for deps, kinds in zip(df.deps, df.dep_kinds):
        assert len(deps) == len(kinds)
        assert all(0 <= d < n for d in deps)
    # launch deps: runtime call -> GPU op with the same correlation id
    for i, (deps, kinds) in enumerate(zip(df.deps, df.dep_kinds)):
        for d, k in zip(deps, kinds):
            if k == DepKind.LAUNCH:
                assert df.kind[d] == "runtime" and df.correlation[d] == df.correlation[i]
                assert df.start_ns[i] >= df.start_ns[d]
            if k == DepKind.STREAM:
                assert df.start_ns[i] >= df.start_ns[d] + df.dur_ns[d]
            if k == DepKind.SYNC:
                assert df.start_ns[i] + df.dur_ns[i] >= df.start_ns[d] + df.dur_ns[d]


TRAIN = """
import torch, torch.nn as nn, torch.nn.functional as F
device = "cuda"
assert torch.cuda.is_available() and torch.cuda.get_device_name().startswith("NVIDIA H100")
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(32, 64).pin_memory().to(device, non_blocking=True)   # pinned, 8192 bytes
    y = torch.randint(0, 10, (32,)).to(device)                           # pageable, 256 bytes
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    assert x.is_cuda and x.device.type == "cuda"
    print("loss", loss.item())
"""


def test_emulated_training_capture(emu, tmp_path):
    res, out = _capture(_script(tmp_path, TRAIN))
    assert res.exit_code == 0, res.output
    assert "emulated h100-sxm" in res.output and "loss 1.0" in res.output
    t = read_trace(out)
    assert t.metadata["emulated"] is True and t.metadata["device_model"] == "h100-sxm"
    assert t.metadata["source_format"] == "capture-emulated"
    assert t.metadata["tool_versions"]["pytorch"] == torch.__version__
    df = _df(out)
    _check_deps(df)
    k = df[df.kind == "kernel"]
    assert len(k) > 20 and (k.dur_ns > 0).all()
    assert k.name.str.startswith("aten::addmm").any() and k.name.str.startswith("aten::mm").any()
    h2d = df[df.copy_dir == "H2D"]
    assert (h2d[h2d.bytes == 256].host_mem == "pageable").sum() == 3  # the labels
    assert {65536, 1024, 10240, 40} <= set(h2d[h2d.host_mem == "pageable"].bytes)  # model.to(device)
    assert set(h2d[h2d.host_mem == "pinned"].bytes) == {32 * 64 * 4}
    assert (h2d.host_mem == "pinned").sum() == 3
    # .item(): D2H copy of 4 bytes, then a host sync that depends on it
    d2h = df[df.copy_dir == "D2H"]
    assert len(d2h) == 3 and set(d2h.bytes) == {4}
    for i in d2h.index:
        waiters = [j for j in df.index if i in df.deps[j] and df.kind[j] == "sync"]
        assert waiters, "no sync op waits for the D2H copy"
        assert df.start_ns[waiters[0]] + df.dur_ns[waiters[0]] >= df.start_ns[i] + df.dur_ns[i]
    # steps: every optimizer.step() ends one; ops after the last one are step -1
    assert set(df.step) == {0, 1, 2, -1}
    # host thread: a back-to-back sequence
    host = df[df.kind.isin(["cpu", "runtime", "sync"])]
    assert (host.start_ns.values[1:] == (host.start_ns + host.dur_ns).values[:-1]).all()


def test_skip_and_keep_steps(emu, tmp_path):
    res, out = _capture(_script(tmp_path, TRAIN), "--skip-steps", "1", "--steps", "1")
    assert res.exit_code == 0, res.output
    df = _df(out)
    assert set(df.step) == {1}
    assert df.start_ns.min() == 0
    _check_deps(df)


GPU_BOUND = """
import torch
a = torch.ones(4096, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.nn.Parameter(torch.ones(4096, 4096, device="cuda", dtype=torch.bfloat16))
opt = torch.optim.SGD([w], lr=0.1)
for step in range(3):          # no read-back: the GPU runs milliseconds behind the host
    y = a
    for _ in range(6):
        y = y @ w
    y.float().sum().backward()
    opt.step()
    opt.zero_grad()
"""


def _first_gpu_gap(df):
    """Launch call end -> start of the first GPU op, ns."""
    gpu = df[df.kind.isin(["kernel", "memcpy", "memset"])].sort_values("start_ns")
    first = gpu.iloc[0]
    call = [d for d, k in zip(first.deps, first.dep_kinds) if k == DepKind.LAUNCH][0]
    return int(first.start_ns - (df.start_ns[call] + df.dur_ns[call]))


def test_skipped_steps_leave_no_phantom_launch_lag(emu, tmp_path):
    """The step before the kept ones leaves a GPU tail; once it is dropped, the first kept
    kernel starts at its launch call's end plus the launch latency, not behind the dropped tail."""
    from tracegen.emulation.costmodel import H100_SXM

    script = _script(tmp_path, GPU_BOUND)
    res, full_out = _capture(script, out=tmp_path / "full.parquet")
    assert res.exit_code == 0, res.output
    full = _df(full_out)
    step1 = full[full.step == 1]
    # without slicing, step 1's first kernel is queued behind step 0's tail (the test's premise)
    k1 = step1[step1.kind == "kernel"].sort_values("start_ns").iloc[0]
    call = [d for d, k in zip(k1.deps, k1.dep_kinds) if k == DepKind.LAUNCH][0]
    assert k1.start_ns - (full.start_ns[call] + full.dur_ns[call]) > 1_000_000
    res, out = _capture(script, "--skip-steps", "1", "--steps", "1", out=tmp_path / "kept.parquet")
    assert res.exit_code == 0, res.output
    df = _df(out)
    _check_deps(df)
    assert set(df.step) == {1} and df.start_ns.min() == 0
    assert _first_gpu_gap(df) == H100_SXM.launch_latency_ns
    # the kept step's GPU work is what it was, and now ends no later than its host ops plus the work
    gpu = df[df.kind == "kernel"]
    assert sorted(gpu.dur_ns) == sorted(step1[step1.kind == "kernel"].dur_ns)
    span = (df.start_ns + df.dur_ns).max()
    assert span < (step1.start_ns + step1.dur_ns).max() - step1.start_ns.min()
    # the host thread is still back to back, and every GPU op starts when its kept deps allow
    host = df[df.kind.isin(["cpu", "runtime", "sync"])]
    assert (host.start_ns.values[1:] == (host.start_ns + host.dur_ns).values[:-1]).all()
    ends = df.start_ns + df.dur_ns
    for i in gpu.index:
        bound = max(ends[d] + (H100_SXM.launch_latency_ns if k == DepKind.LAUNCH else 0)
                    for d, k in zip(df.deps[i], df.dep_kinds[i]) if k in (DepKind.LAUNCH, DepKind.STREAM))
        assert df.start_ns[i] == bound


STREAMS = """
import torch
torch.manual_seed(0)
torch.cuda.manual_seed_all(0)
a = torch.ones(1024, 1024, device="cuda", dtype=torch.bfloat16)
side = torch.cuda.Stream()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
b = a @ a
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    c = b * 2
ev = side.record_event()
torch.cuda.current_stream().wait_event(ev)
d = c + 1
end.record()
end.synchronize()
assert start.elapsed_time(end) > 0
vals = d.cpu().tolist()
assert vals[0][0] == 1.0 and int(d.argmax()) == 1024 * 1024 // 2   # large: stand-ins (reads.py)
assert d.float().cpu().numpy().shape == (1024, 1024)
sel = a[a > 0]                      # data-dependent size: every element assumed selected
assert sel.shape == (1024 * 1024,)
assert torch.nonzero(a).shape == (1024 * 1024, 2)
assert bool(torch.all(a == 1)) and not bool(torch.any(a != 1))
loss = torch.tensor(5.0, device="cuda")
n = 0
while loss > 1.0:                   # a small tensor: real values, 5 -> 2.5 -> 1.25 -> 0.625
    loss = loss * 0.5
    n += 1
assert n == 3
print(torch.cuda.memory_allocated(), torch.cuda.device_count())
"""


def test_streams_events_and_reads(emu, tmp_path):
    res, out = _capture(_script(tmp_path, STREAMS))
    assert res.exit_code == 0, res.output
    df = _df(out)
    _check_deps(df)
    gpu = df[df.kind.isin(["kernel", "memcpy", "memset"])]
    assert gpu.stream.nunique() == 2
    side = gpu[gpu.stream != 7]
    assert len(side) == 1 and side.name.iloc[0].startswith("aten::mul")
    ev_edges = [(d, i) for i in df.index for d, k in zip(df.deps[i], df.dep_kinds[i]) if k == DepKind.EVENT]
    assert len(ev_edges) == 2  # main -> side (wait_stream), side -> main (wait_event)
    for d, i in ev_edges:
        assert df.stream[d] != df.stream[i]
        assert df.start_ns[i] >= df.start_ns[d] + df.dur_ns[d]
    assert (df.name == "cudaEventSynchronize").sum() == 1
    assert (df[df.copy_dir == "D2H"].bytes == 1024 * 1024 * 2).sum() == 1  # d.cpu()
    assert (df[df.copy_dir == "D2H"].bytes == 1024 * 1024 * 4).sum() == 1  # d.float().cpu()


def test_explicit_profiler_steps_and_dataloader(emu, tmp_path):
    body = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    data = TensorDataset(torch.randn(12, 16), torch.randn(12, 4))
    loader = DataLoader(data, batch_size=4, pin_memory=True)
    w = torch.randn(16, 4, device="cuda")
    for i, (x, y) in enumerate(loader):
        with torch.profiler.record_function(f"ProfilerStep#{i}"):
            x = x.to("cuda", non_blocking=True)
            y = y.cuda(non_blocking=True)
            l = ((x @ w - y) ** 2).mean()
    """
    res, out = _capture(_script(tmp_path, body))
    assert res.exit_code == 0, res.output
    df = _df(out)
    h2d = df[df.copy_dir == "H2D"]
    assert (h2d.host_mem == "pinned").sum() == 6 and set(h2d[h2d.host_mem == "pinned"].bytes) == {256, 64}
    assert set(df[df.name.str.startswith("aten::mm")].step) == {0, 1, 2}
    assert set(df[df.name.str.startswith("aten::randn")].step) == {-1}  # before the first step


def test_script_args_and_argv(emu, tmp_path):
    body = """
    import sys, torch
    assert sys.argv[1:] == ["--n", "3"], sys.argv
    import helper  # the script's folder is on sys.path
    x = torch.zeros(int(sys.argv[2]), device="cuda")
    """
    (tmp_path / "helper.py").write_text("X = 1\n")
    script = _script(tmp_path, body)
    out = tmp_path / "o.parquet"
    res = CliRunner().invoke(tracegen_main, ["capture", "-o", str(out), str(script), "--", "--n", "3"])
    assert res.exit_code == 0, res.output
    assert read_trace(out).metadata["trace_name"] == "work"


# ----------------------------------------------------------------------------- bad input

def test_missing_script(tmp_path):
    res = CliRunner().invoke(tracegen_main, ["capture", str(tmp_path / "nope.py")])
    assert res.exit_code == 2 and "no such script" in res.output


# ----------------------------------------------------------------------------- output paths

TINY = "import pathlib, torch\npathlib.Path('ran.txt').touch()\ntorch.ones(3, device='cuda') * 2\n"


def _one_line_refusal(res, *words):
    assert res.exit_code == 2, (res.output, res.exception)
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, err


def test_default_output_is_the_current_directory(emu, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "traces").mkdir()  # a traces/ folder here is not where the default goes
    res = CliRunner().invoke(tracegen_main, ["capture", str(_script(tmp_path / "traces", TINY, "w.py"))])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "w.parquet").is_file()
    assert not (tmp_path / "traces" / "w.parquet").exists()


def test_existing_output_needs_overwrite_and_is_checked_before_running(emu, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = _script(tmp_path, TINY, "w.py")
    out = tmp_path / "w.parquet"
    out.write_bytes(b"keep me")
    res = CliRunner().invoke(tracegen_main, ["capture", str(script)])
    _one_line_refusal(res, "w.parquet", "--overwrite")
    assert out.read_bytes() == b"keep me" and not (tmp_path / "ran.txt").exists()  # the script never ran
    res = CliRunner().invoke(tracegen_main, ["capture", "--overwrite", str(script)])
    assert res.exit_code == 0, res.output
    assert read_trace(out).num_ops > 0 and (tmp_path / "ran.txt").exists()


@pytest.mark.parametrize("what", ["devnull", "symlink", "script"])
def test_output_refused_even_with_overwrite(emu, tmp_path, monkeypatch, what):
    monkeypatch.chdir(tmp_path)
    script = _script(tmp_path, TINY, "w.py")
    target = tmp_path / "target.parquet"
    target.write_bytes(b"keep me")
    out = {"devnull": Path(os.devnull), "symlink": tmp_path / "link.parquet", "script": script}[what]
    if what == "symlink":
        out.symlink_to(target)
    res = CliRunner().invoke(tracegen_main, ["capture", "--overwrite", "-o", str(out), str(script)])
    _one_line_refusal(res, str(out))
    assert target.read_bytes() == b"keep me" and not (tmp_path / "ran.txt").exists()
    assert script.read_text() == TINY


def test_script_that_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)  # never opened: refused from its file type
    _one_line_refusal(CliRunner().invoke(tracegen_main, ["capture", "-o", str(tmp_path / "o.parquet"), str(fifo)]),
                      "pipe.py", "FIFO")
    _one_line_refusal(CliRunner().invoke(tracegen_main, ["capture", "-o", str(tmp_path / "o.parquet"), str(tmp_path)]),
                      "directory")


def test_script_that_raises(emu, tmp_path):
    script = _script(tmp_path, """
    import torch
    x = torch.ones(3, device="cuda")
    def inner():
        raise ValueError("boom in the script")
    inner()
    """)
    res, out = _capture(script)
    assert res.exit_code == 2
    assert "Traceback" in res.output and "inner()" in res.output and "boom in the script" in res.output
    assert "the script raised ValueError" in res.output
    assert not out.exists() and not list(tmp_path.glob("*.part"))


def test_script_that_exits_nonzero(emu, tmp_path):
    res, out = _capture(_script(tmp_path, "import torch, sys\ntorch.ones(2, device='cuda')\nsys.exit(3)\n"))
    assert res.exit_code == 2 and "exited with status 3" in res.output
    assert not out.exists()


def test_script_without_gpu_work(emu, tmp_path):
    res, out = _capture(_script(tmp_path, "import torch\nprint(torch.ones(3).sum())\n"))
    assert res.exit_code == 2 and "no GPU work" in res.output
    assert not out.exists()


def test_no_steps_to_skip(emu, tmp_path):
    res, out = _capture(_script(tmp_path, "import torch\ntorch.ones(3, device='cuda')\n"), "--skip-steps", "1")
    assert res.exit_code == 2 and "no step boundaries" in res.output


def test_patches_are_undone(emu, tmp_path):
    before = (torch.cuda.is_available(), torch.cuda.device_count(), torch.Tensor.pin_memory, torch.compile)
    res, _ = _capture(_script(tmp_path, "import torch\ntorch.ones(3, device='cuda')\n"))
    assert res.exit_code == 0, res.output
    assert (torch.cuda.is_available(), torch.cuda.device_count(), torch.Tensor.pin_memory, torch.compile) == before
    assert torch.ones(2).device.type == "cpu" and not torch.ones(2, device="meta").is_cuda


# ----------------------------------------------------------------------------- profiler path

def test_profiler_path_on_recorded_kineto(emu, tmp_path, monkeypatch):
    """capture_profiler with torch.profiler replaced by a stand-in that 'exports' a recorded
    Kineto trace (A100, torch.cuda sync calls): the same conversion code path as on a GPU."""
    import torch.profiler as tprof

    from tracegen import capture as cap

    recorded = DATA / "a100_cuda_event_sync_tiny.json.gz"

    class FakeProfile:
        def __init__(self, *a, **kw):
            assert kw["record_shapes"] is True and len(kw["activities"]) == 2

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def step(self):
            pass

        def export_chrome_trace(self, path):
            with gzip.open(recorded, "rb") as src, open(path, "wb") as dst:
                shutil.copyfileobj(src, dst)

    monkeypatch.setattr(tprof, "profile", FakeProfile)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "NVIDIA A100-PG509-200")
    script = _script(tmp_path, "x = 1\n")
    table, meta = cap.capture_profiler(script)
    assert meta["emulated"] is False and meta["device_model"] is None
    assert meta["source_format"] == "capture-profiler" and meta["gpu_model"] == "NVIDIA A100-PG509-200"
    kinds = table.column("kind").to_pylist()
    assert kinds.count("kernel") == 4 and kinds.count("memcpy") == 1 and kinds.count("sync") >= 3
    out = tmp_path / "p.parquet"
    from fastrack_core.traceio import write_trace

    write_trace(out, table, meta)
    assert read_trace(out).num_ops == table.num_rows


def test_no_emulate_without_gpu(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    res = CliRunner().invoke(tracegen_main, ["capture", "--no-emulate", str(_script(tmp_path, "x=1\n"))])
    assert res.exit_code == 2 and "needs a CUDA GPU" in res.output


# ----------------------------------------------------------------------------- shipped traces

SHIPPED = {  # file: (H2D copies, D2H copies, kept steps)
    "llama.parquet": (3, 3, 3),
    "llama_infer.parquet": (1, 33, 33),
    "resnet.parquet": (4, 2, 2),
    "bert_infer.parquet": (6, 3, 3),
}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_shipped_traces(name):
    """The shipped traces exist, are small, and exercise what the TEE protocols change:
    host->device copies, device->host reads and the host synchronisations that wait for them."""
    path = ROOT / "traces" / name
    assert path.stat().st_size < 4 * 1024 * 1024
    t = read_trace(path)
    assert t.metadata["emulated"] is True and t.metadata["device_model"] == "h100-sxm"
    assert "modelled host time" in t.metadata["capture_tool"]
    kinds = t.column("kind")
    assert (kinds == "kernel").sum() > 100
    assert (t.column("dur_ns") >= 0).all()
    assert np.isin(["cudaLaunchKernel"], t.column("name")).all()
    n_h2d, n_d2h, n_steps = SHIPPED[name]
    copy_dir = t.column("copy_dir")
    assert (copy_dir == "H2D").sum() == n_h2d
    assert (copy_dir == "D2H").sum() >= n_d2h
    assert (kinds == "sync").sum() >= n_d2h
    steps = t.column("step")
    assert len(np.unique(steps[steps >= 0])) == n_steps
    if name in ("llama.parquet", "resnet.parquet", "bert_infer.parquet"):  # non_blocking pinned inputs
        host_mem = t.column("host_mem")
        assert ((copy_dir == "H2D") & (host_mem == "pinned")).sum() == n_h2d
    if name == "resnet.parquet":  # a batch of 64 224x224 RGB fp32 images per step
        nbytes = t.column("bytes")
        assert (nbytes[copy_dir == "H2D"] == 64 * 3 * 224 * 224 * 4).sum() == 2


# ----------------------------------------------------------------------------- host time


def _host_ops(df):
    return df[df.kind.isin(["cpu", "runtime", "sync"])].reset_index(drop=True)


def test_modelled_host_time_is_the_named_costs(emu, tmp_path):
    """Three known ops: each host op lasts exactly its modelled cost (costmodel.H100_SXM)."""
    from tracegen.emulation.costmodel import H100_SXM as S

    body = """
    import torch
    a = torch.empty(256, 256, device="cuda")   # allocation: aten_view_host_ns, no kernel
    b = a.relu()                               # 1 kernel: aten_op_host_ns + cudaLaunchKernel
    c = b + b                                  # 1 kernel
    d = c.sum()                                # 1 kernel
    """
    res, out = _capture(_script(tmp_path, body), "--host-time", "modelled")
    assert res.exit_code == 0, res.output
    df = _df(out)
    host = _host_ops(df)
    assert list(host.kind) == ["cpu", "runtime"] * 3
    assert list(host.name) == ["aten::relu", "cudaLaunchKernel", "aten::add", "cudaLaunchKernel",
                               "aten::sum", "cudaLaunchKernel"]
    assert list(host.dur_ns) == [S.aten_view_host_ns + S.aten_op_host_ns, S.launch_kernel_ns,
                                 S.aten_op_host_ns, S.launch_kernel_ns, S.aten_op_host_ns, S.launch_kernel_ns]
    assert list(host.start_ns) == [0, 6600, 9800, 15900, 19100, 25200]
    assert (df.kind == "kernel").sum() == 3


def test_modelled_module_call_copy_and_sync(emu, tmp_path):
    """A module call, a blocking pageable H2D copy and a .item(): Python per module call,
    cudaMemcpyAsync call cost, and a sync that returns sync_return_ns after the copy ends."""
    from tracegen.emulation.costmodel import H100_SXM as S

    body = """
    import torch
    lin = torch.nn.Linear(8, 8, bias=False, device="cuda")   # empty + init kernel(s)
    x = torch.ones(4, 8).to("cuda", non_blocking=True)     # pageable H2D
    y = lin(x)                                              # module call + mm
    print(y.sum().item())
    """
    res, out = _capture(_script(tmp_path, body), "--host-time", "modelled")
    assert res.exit_code == 0, res.output
    df = _df(out)
    host = _host_ops(df)
    mm = df.index[(df.kind == "kernel") & df.name.str.startswith("aten::mm")][0]
    launch = [d for d, k in zip(df.deps[mm], df.dep_kinds[mm]) if k == DepKind.LAUNCH][0]
    gap = host[(host.start_ns + host.dur_ns) == df.start_ns[launch]]
    assert gap.name.iloc[0] == "aten::mm"
    # module call, the weight's transpose (a view) and mm itself
    assert gap.dur_ns.iloc[0] == S.module_call_host_ns + S.aten_view_host_ns + S.aten_op_host_ns
    memcpy_calls = host[host.name == "cudaMemcpyAsync"]
    assert set(memcpy_calls[memcpy_calls.kind == "runtime"].dur_ns) == {S.memcpy_call_ns}
    d2h = df.index[df.copy_dir == "D2H"][0]
    sync = df.index[(df.kind == "sync") & (df.name == "cudaStreamSynchronize")][-1]
    assert d2h in list(df.deps[sync])
    assert df.start_ns[sync] + df.dur_ns[sync] == df.start_ns[d2h] + df.dur_ns[d2h] + S.sync_return_ns


def test_measured_host_time_option(emu, tmp_path):
    res, out = _capture(_script(tmp_path, "import torch\nx = torch.ones(3, device='cuda') * 2\n"),
                        "--host-time", "measured")
    assert res.exit_code == 0, res.output
    assert "measured host time" in read_trace(out).metadata["capture_tool"]
    res = CliRunner().invoke(tracegen_main, ["capture", "--host-time", "guessed", "x.py"])
    assert res.exit_code == 2


def test_prof_step_marks_steps(emu, tmp_path):
    body = """
    import torch
    x = torch.ones(64, 64, device="cuda")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            x = x @ x
            prof.step()
    """
    res, out = _capture(_script(tmp_path, body), "--skip-steps", "1", "--steps", "2")
    assert res.exit_code == 0, res.output
    df = _df(out)
    assert set(df.step) == {1, 2}
    assert (df[df.kind == "kernel"].name.str.startswith("aten::mm")).sum() == 2
