"""Capture classes found on unmodified public scripts (docs/capture.md, "Script patterns"):
Module.to(rank), formatting and printing device tensors, data-dependent shapes under
inference_mode and ops without a meta kernel, the float stand-in, torch.save, and tracegen's own
options after SCRIPT."""

import textwrap

import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")

from fastrack_core.traceio import read_trace  # noqa: E402
from tracegen.cli import main as tracegen_main  # noqa: E402
from tracegen.emulation.reads import STANDIN_NOTE  # noqa: E402


@pytest.fixture(scope="module")
def emu():
    from tracegen import emulation

    emulation.preload()
    return emulation


def _capture(tmp_path, body, *args, opts=("--host-time", "modelled")):
    script = tmp_path / "work.py"
    script.write_text(textwrap.dedent(body))
    out = tmp_path / "work.parquet"
    res = CliRunner().invoke(tracegen_main, ["capture", "--overwrite", "-o", str(out), *opts, str(script), *args],
                             catch_exceptions=False)
    return res, out


def _df(out):
    return read_trace(out).table.to_pandas()


def test_module_to_an_index(emu, tmp_path):
    res, out = _capture(tmp_path, """
    import torch, torch.nn as nn
    rank = 0
    model = nn.Linear(8, 8).to(rank)                 # the DDP tutorial's line
    assert model.weight.is_cuda
    nn.Linear(8, 8).to(torch.device(0), torch.float16)
    m = nn.Linear(8, 8).to(device=0)
    assert m.weight.is_cuda and m.weight.device == torch.device("cuda", 0)
    nn.Linear(8, 8).cuda(0)
    model(torch.ones(2, 8).to(0)).sum().item()
    """)
    assert res.exit_code == 0, res.output
    assert (_df(out).kind == "memcpy").sum() >= 4  # the weights went up
    with pytest.raises(RuntimeError):
        torch.nn.Linear(2, 2).to(0)  # after the capture: the CPU build's own answer again


def test_format_and_print_read_the_value(emu, tmp_path):
    res, out = _capture(tmp_path, """
    import torch
    loss = torch.tensor([1.25, 2.5], device="cuda").sum()
    print(f"loss {loss:.4f}")
    print("pct %.2f" % loss)
    print(loss)
    print(torch.arange(3, device="cuda", dtype=torch.int32))
    try:
        f"{torch.ones(2, device='cuda'):.2f}"
    except TypeError as exc:
        print("TypeError:", exc)
    """)
    assert res.exit_code == 0, res.output
    assert "loss 3.7500" in res.output and "pct 3.75" in res.output
    assert "tensor(3.7500, device='cuda:0')" in res.output
    assert "tensor([0, 1, 2], device='cuda:0', dtype=torch.int32)" in res.output
    assert "TypeError: unsupported format string passed to Tensor.__format__" in res.output
    df = _df(out)
    d2h = df[(df.kind == "memcpy") & (df.copy_dir == "D2H")]
    # f-string, %, print(loss), print(arange): four reads, each a D2H copy then a host sync
    assert len(d2h) == 4 and sorted(d2h.bytes) == [4, 4, 4, 12]
    assert (df.kind == "sync").sum() >= 4
    assert STANDIN_NOTE not in res.output  # small tensors: real values


def test_print_of_a_large_tensor_reads_the_summary(emu, tmp_path):
    res, out = _capture(tmp_path, """
    import torch
    print(torch.randn(100, 100, device="cuda"))
    """)
    assert res.exit_code == 0, res.output
    assert "device='cuda:0'" in res.output and "..." in res.output
    d2h = _df(out).query("kind == 'memcpy'")
    assert list(d2h[d2h.copy_dir == "D2H"].bytes) == [6 * 6 * 4]  # the 3 + 3 edge items per dim


def test_data_dependent_shapes(emu, tmp_path):
    res, out = _capture(tmp_path, """
    import torch
    big = torch.randn(100_000, device="cuda")
    with torch.inference_mode():
        (idx,) = torch.where(big > 0)               # nonzero_numpy: no meta kernel under inference_mode
        assert idx.shape == (100_000,)              # every element selected (the nonzero rule)
        assert torch.nonzero(big > 0, as_tuple=True)[0].shape == (100_000,)
        ids = torch.zeros(100_000, dtype=torch.long, device="cuda") + big.argmax()
        u = torch.unique(ids)                       # no meta kernel: CPU kernel over stand-ins
        assert u.is_cuda and u.shape == (1,) and u.item() == 0   # large: the integer stand-in 0
        small = torch.tensor([3, 1, 3, 2], device="cuda")
        assert torch.unique(small).tolist() == [1, 2, 3]           # small: real values
        assert torch.bincount(small).tolist() == [0, 1, 1, 2]
        assert torch.repeat_interleave(small).shape == (9,)
    print("ok")
    """)
    assert res.exit_code == 0, res.output
    df = _df(out)
    names = set(df[df.kind == "kernel"].name.str.split(" ").str[0])
    assert {"aten::nonzero", "aten::_unique2", "aten::bincount"} <= names


def test_custom_op_without_meta_kernel(emu, tmp_path):
    """The generic data-dependent case (torchvision's nms is one): an op with only a CPU kernel."""
    res, out = _capture(tmp_path, """
    import torch

    @torch.library.custom_op("fastrack_test::keep_positive", mutates_args=())
    def keep_positive(x: torch.Tensor) -> torch.Tensor:
        return torch.nonzero(x > 0).flatten()

    x = torch.tensor([1.0, -1.0, 2.0], device="cuda")
    assert keep_positive(x).tolist() == [0, 2]
    boxes = torch.randn(5000, 4, device="cuda")
    k = keep_positive(boxes)                        # large: the float stand-in 1.0 > 0 keeps all
    assert k.is_cuda and k.shape == (5000 * 4 * 2,)
    print("ok")
    """)
    assert res.exit_code == 0, res.output
    kernels = _df(out).query("kind == 'kernel'")
    assert kernels.name.str.startswith("fastrack_test::keep_positive").sum() == 2


def test_float_standin_cannot_divide_by_zero_and_is_noted_once(emu, tmp_path):
    res, out = _capture(tmp_path, """
    import math, torch
    pred, target = torch.randn(64, 1, 64, 64, device="cuda"), torch.randn(64, 1, 64, 64, device="cuda")
    for epoch in range(3):
        mse = torch.nn.functional.mse_loss(pred, target)
        psnr = 10 * math.log10(1 / mse.item())       # pytorch/examples super_resolution
        if mse.item() < 1e-3:                        # an early stop that must not fire
            break
    assert epoch == 2 and mse.item() == 1.0 and psnr == 0.0
    print(f"mse {mse:.3f}")
    """)
    assert res.exit_code == 0, res.output
    assert res.stderr.count(STANDIN_NOTE) == 1
    assert STANDIN_NOTE in read_trace(out).metadata["capture_notes"]


def test_grad_scaler_still_steps(emu, tmp_path):
    """found_inf over large gradients reads 0.0 (nothing found): the optimizer steps."""
    res, out = _capture(tmp_path, """
    import torch
    model = torch.nn.Linear(4096, 4096).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for _ in range(3):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(torch.randn(8, 4096, device="cuda")).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    """)
    assert res.exit_code == 0, res.output
    assert set(_df(out).step) >= {0, 1, 2}  # three optimizer.step() boundaries


def test_torch_save_is_a_d2h_copy_per_storage(emu, tmp_path):
    res, out = _capture(tmp_path, """
    import io, torch
    w = torch.randn(100_000, device="cuda")
    m = torch.nn.Linear(256, 256).cuda()
    buf = io.BytesIO()
    torch.save({"w": w, "m": m.state_dict()}, buf)
    """)
    assert res.exit_code == 0, res.output
    df = _df(out)
    assert not df.name.str.contains("set_").any()
    d2h = df[(df.kind == "memcpy") & (df.copy_dir == "D2H")]
    assert sorted(d2h.bytes) == [1024, 262_144, 400_000]
    assert (df[df.kind == "kernel"].name.str.startswith("aten::randn")).sum() == 1


@pytest.mark.parametrize("args,warned", [
    (("-o", "x.parquet"), "-o"),
    (("--steps", "3", "--lr=0.1"), "--steps"),
    (("--output=x.parquet",), "--output"),
    (("--", "-o", "x.parquet"), None),
    (("--lr", "0.1"), None),
])
def test_capture_options_after_the_script_warn(emu, tmp_path, args, warned):
    res, out = _capture(tmp_path, """
    import sys, torch
    torch.ones(1, device="cuda")
    print("argv", sys.argv[1:])
    """, *args)
    assert res.exit_code == 0, res.output
    assert out.exists()
    script_args = [a for a in args if a != "--"] if args[0] == "--" else list(args)
    assert f"argv {script_args}" in res.output  # the script gets them either way
    lines = [ln for ln in res.stderr.splitlines() if "warning:" in ln]
    if warned:
        assert len(lines) == 1 and warned in lines[0] and "--" in lines[0]
    else:
        assert lines == []
