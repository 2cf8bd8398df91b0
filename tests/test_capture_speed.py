"""tracegen capture --gpu-speed / --copy-speed / --host-speed: emulated what-if ground truth.
Each factor divides exactly the durations it names and nothing else; bad factors fail in one
line with exit status 2; a real GPU refuses them."""

import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

import torch  # noqa: F401  (the emulator needs it; imported once here)

from fastrack_core.traceio import read_trace
from tracegen.cli import main as tracegen_main

SCRIPT = """
import torch
m = torch.nn.Linear(512, 512).cuda()
opt = torch.optim.SGD(m.parameters(), lr=0.1)
x = torch.randn(128, 512).pin_memory().to("cuda", non_blocking=True)
for _ in range(2):
    m(x).square().mean().backward()
    opt.step()
    opt.zero_grad()
print(m.weight.sum().item())
"""


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    from tracegen import emulation

    emulation.preload()
    p = tmp_path_factory.mktemp("speed") / "tiny.py"
    p.write_text(textwrap.dedent(SCRIPT))
    return p


HOST = ["cpu", "runtime"]


def _capture(script, *opts):
    out = script.parent / f"tiny{'_'.join(o.strip('-') for o in opts)}.parquet"
    # exact durations: the deterministic modelled host time (script time is measured)
    res = CliRunner().invoke(tracegen_main, ["capture", "--overwrite", "--host-time", "modelled", "-o", str(out),
                                             *opts, str(script)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return read_trace(out)


@pytest.fixture(scope="module")
def clean(script):
    return _capture(script)


def _col(t, name, kinds):
    """Column ``name`` of the ops of ``kinds``: host ops in program order, GPU ops in launch
    order (rows are sorted by start, which the speed factors change)."""
    sel = np.isin(t.column("kind"), kinds)
    key = np.where(np.isin(t.column("kind"), HOST + ["sync"]), t.column("start_ns"), t.column("correlation"))
    order = np.argsort(key[sel], kind="stable")
    vals = t.column(name)[sel][order]
    return vals.astype(np.int64) if vals.dtype.kind in "iuf" else vals


def _same_ops(a, b):
    for kinds in (HOST + ["sync"], ["kernel", "memcpy", "memset"]):
        assert list(_col(a, "name", kinds)) == list(_col(b, "name", kinds))



def test_gpu_speed_halves_kernels_and_memsets_only(script, clean):
    fast = _capture(script, "--gpu-speed", "2")
    _same_ops(clean, fast)
    for kinds in (["kernel"], ["memset"]):
        c, f = _col(clean, "dur_ns", kinds), _col(fast, "dur_ns", kinds)
        assert len(c) > 0 or kinds == ["memset"]
        assert (f == np.maximum(1, np.round(c / 2))).all()
    assert (_col(fast, "dur_ns", ["memcpy"]) == _col(clean, "dur_ns", ["memcpy"])).all()
    assert (_col(fast, "dur_ns", HOST) == _col(clean, "dur_ns", HOST)).all()
    assert _col(clean, "dur_ns", ["kernel"]).sum() > 1.9 * _col(fast, "dur_ns", ["kernel"]).sum()
    assert "--gpu-speed 2" in fast.metadata["capture_tool"]
    assert "speed" not in clean.metadata["capture_tool"]


def test_gpu_speed_slower(script, clean):
    slow = _capture(script, "--gpu-speed", "0.5")
    assert (_col(slow, "dur_ns", ["kernel"]) == 2 * _col(clean, "dur_ns", ["kernel"])).all()
    assert (_col(slow, "dur_ns", HOST) == _col(clean, "dur_ns", HOST)).all()


def test_copy_speed_scales_copies_only(script, clean):
    fast = _capture(script, "--copy-speed", "2")
    _same_ops(clean, fast)
    c = _col(clean, "dur_ns", ["memcpy"])
    assert len(c) >= 2 and (_col(fast, "dur_ns", ["memcpy"]) == np.maximum(1, np.round(c / 2))).all()
    assert (_col(fast, "dur_ns", ["kernel"]) == _col(clean, "dur_ns", ["kernel"])).all()
    assert (_col(fast, "dur_ns", HOST) == _col(clean, "dur_ns", HOST)).all()


@pytest.mark.parametrize("factor", [2.0, 0.5])
def test_host_speed_scales_host_durations_only(script, clean, factor):
    changed = _capture(script, "--host-speed", f"{factor:g}")
    _same_ops(clean, changed)
    # the modelled costs are even numbers of ns: dividing by 2 or 0.5 is exact
    assert (_col(changed, "dur_ns", HOST) * factor == _col(clean, "dur_ns", HOST)).all()
    for kinds in (["kernel"], ["memcpy"]):
        assert (_col(changed, "dur_ns", kinds) == _col(clean, "dur_ns", kinds)).all()
    span = lambda t: int((t.column("start_ns") + t.column("dur_ns")).max())  # noqa: E731
    assert (span(changed) < span(clean)) == (factor > 1)


@pytest.mark.parametrize("opt", ["--gpu-speed", "--copy-speed", "--host-speed"])
@pytest.mark.parametrize("value", ["0", "0.001", "101", "-2", "nan", "inf", "fast"])
def test_bad_speed_is_one_line_exit_2(script, tmp_path, opt, value):
    out = tmp_path / "never.parquet"
    res = CliRunner().invoke(tracegen_main, ["capture", "-o", str(out), opt, value, str(script)])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: " + opt)
    assert not out.exists()


def test_real_gpu_refuses_speed(script, tmp_path, monkeypatch):
    import tracegen.capture as cap

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cap, "capture_profiler", lambda *a, **k: pytest.fail("the profiler must not run"))
    out = tmp_path / "never.parquet"
    res = CliRunner().invoke(tracegen_main, ["capture", "--no-emulate", "--host-speed", "2", "-o", str(out),
                                             str(script)])
    assert res.exit_code == 2 and "--host-speed" in res.output and "emulated" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not out.exists()
