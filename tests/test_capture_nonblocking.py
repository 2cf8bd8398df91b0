"""tracegen capture (emulation): host-to-device uploads as CUDA PyTorch issues them, with and
without ``torch.inference_mode()``. ``t.to("cuda", non_blocking=True)`` (ATen's to -> _to_copy ->
copy_) and ``dst.copy_(t, non_blocking=True)`` from pinned memory are one cudaMemcpyAsync: no
stream synchronisation and no kernel. A blocking upload synchronises the stream after its copy
(``memcpy_and_sync``); a non-blocking one from pageable memory waits on the host for the staging
copy. Under inference_mode ``aten::to`` reaches the emulator whole instead of as ``_to_copy``,
which must not change any of this."""

import textwrap

import pytest
from click.testing import CliRunner

from fastrack_core.traceio import read_trace
from tracegen.cli import main as tracegen_main

GPU = ("kernel", "memcpy", "memset")
NBYTES = 64 * 32 * 4

SCRIPT = """
import torch
pinned = torch.randn(64, 32).pin_memory()
pageable = torch.randn(64, 32)
torch.cuda.synchronize()

def region(name, inference, fn):
    with torch.inference_mode(inference):
        with torch.cuda.nvtx.range(name):
            fn()
    torch.cuda.synchronize()

def copy_into(src, non_blocking):
    dst = torch.empty(64, 32, device="cuda")
    dst.copy_(src, non_blocking=non_blocking)

for inf in (False, True):
    tag = "inf" if inf else "grad"
    region(f"to_pinned_nb_{tag}", inf, lambda: pinned.to("cuda", non_blocking=True))
    region(f"cuda_pinned_nb_{tag}", inf, lambda: pinned.cuda(non_blocking=True))
    region(f"copy_pinned_nb_{tag}", inf, lambda: copy_into(pinned, True))
    region(f"to_pinned_block_{tag}", inf, lambda: pinned.to("cuda"))
    region(f"to_pageable_nb_{tag}", inf, lambda: pageable.to("cuda", non_blocking=True))
    region(f"copy_pinned_block_{tag}", inf, lambda: copy_into(pinned, False))
"""


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    from tracegen import emulation

    emulation.preload()
    d = tmp_path_factory.mktemp("nonblocking")
    script = d / "work.py"
    script.write_text(textwrap.dedent(SCRIPT))
    out = d / "work.parquet"
    res = CliRunner().invoke(tracegen_main, ["capture", "-o", str(out), str(script)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return read_trace(out).table.to_pandas()


def _region(df, name):
    """(host ops inside the NVTX range, GPU ops launched from it)."""
    push = df.index[df.name == f"range_push:{name}"]
    pop = df.index[df.name == f"range_pop:{name}"]
    assert len(push) == 1 and len(pop) == 1, name
    host = df.loc[push[0] + 1:pop[0] - 1]
    host = host[~host.kind.isin(GPU)]
    corr = set(host.correlation[host.correlation >= 0])
    gpu = df[df.kind.isin(GPU) & df.correlation.isin(corr)]
    return host, gpu


@pytest.mark.parametrize("tag", ["grad", "inf"])
@pytest.mark.parametrize("how", ["to", "cuda", "copy"])
def test_pinned_nonblocking_upload_is_one_async_copy(trace, how, tag):
    host, gpu = _region(trace, f"{how}_pinned_nb_{tag}")
    assert list(host.name[host.kind == "runtime"]) == ["cudaMemcpyAsync"]
    assert not (host.kind == "sync").any(), list(host.name[host.kind == "sync"])
    assert list(gpu.kind) == ["memcpy"]  # and no kernel
    m = gpu.iloc[0]
    assert (m.copy_dir, m.host_mem, int(m.bytes)) == ("H2D", "pinned", NBYTES)


@pytest.mark.parametrize("tag", ["grad", "inf"])
@pytest.mark.parametrize("how", ["to", "copy"])
def test_blocking_upload_synchronises_the_stream(trace, how, tag):
    host, gpu = _region(trace, f"{how}_pinned_block_{tag}")
    assert list(host.name[host.kind == "runtime"]) == ["cudaMemcpyAsync"]
    assert list(host.name[host.kind == "sync"]) == ["cudaStreamSynchronize"]
    assert list(gpu.kind) == ["memcpy"]
    assert (gpu.iloc[0].copy_dir, gpu.iloc[0].host_mem) == ("H2D", "pinned")


@pytest.mark.parametrize("tag", ["grad", "inf"])
def test_pageable_nonblocking_upload_waits_for_staging(trace, tag):
    host, gpu = _region(trace, f"to_pageable_nb_{tag}")
    assert list(host.name[host.kind == "runtime"]) == ["cudaMemcpyAsync"]
    assert list(host.name[host.kind == "sync"]) == ["cudaMemcpyAsync"]  # the host waits, not the stream
    assert list(gpu.kind) == ["memcpy"]
    assert (gpu.iloc[0].copy_dir, gpu.iloc[0].host_mem, int(gpu.iloc[0].bytes)) == ("H2D", "pageable", NBYTES)


def test_inference_mode_records_what_grad_mode_records(trace):
    for name in ("to_pinned_nb", "cuda_pinned_nb", "copy_pinned_nb", "to_pinned_block", "to_pageable_nb",
                 "copy_pinned_block"):
        a_host, a_gpu = _region(trace, f"{name}_grad")
        b_host, b_gpu = _region(trace, f"{name}_inf")
        a_host, b_host = a_host[a_host.name != "cpu"], b_host[b_host.name != "cpu"]  # the script's own time
        assert list(zip(a_host.kind, a_host.name)) == list(zip(b_host.kind, b_host.name)), name
        assert list(a_gpu.name) == list(b_gpu.name), name
