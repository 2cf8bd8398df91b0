"""benchmarks/validation/capture_accuracy.py: the held-out parameter handling (fast) and that the accuracy
block of docs/capture-accuracy.md is what the script writes today (slow: ten emulated captures)."""

from pathlib import Path

import pytest

from tracegen.emulation.costmodel import H100_SXM
from scriptload import load_script

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


def _bench():
    return load_script("benchmarks/validation/capture_accuracy.py")


def test_values_read_off_the_held_out_trace_are_neutral():
    b = _bench()
    bert_out = b.held_out_base("BERT")  # fitted on Qwen, predicts BERT
    assert bert_out.gemm_misaligned_factor == 1.0
    assert bert_out.strided_efficiency == H100_SXM.strided_efficiency  # read off Qwen: the fit trace
    qwen_out = b.held_out_base("Qwen")
    assert qwen_out.strided_efficiency == qwen_out.elementwise_efficiency
    assert qwen_out.gemm_misaligned_factor == H100_SXM.gemm_misaligned_factor
    # every parameter named as read off a trace is one the neutral base changes
    for key, derived in b.TRACE_DERIVED.items():
        base = b.held_out_base(key)
        assert all(getattr(base, p) != getattr(H100_SXM, p) for p in derived)


def test_fitted_classes_scale_their_parameters_capped_at_the_peak():
    b = _bench()
    s = b.scaled(H100_SXM, {"elementwise": 0.5, "gemm": 10.0})
    assert s.elementwise_efficiency == pytest.approx(H100_SXM.elementwise_efficiency * 0.5)
    assert s.strided_efficiency == pytest.approx(H100_SXM.strided_efficiency * 0.5)
    assert s.gemm_efficiency == 1.0
    assert s.reduction_efficiency == H100_SXM.reduction_efficiency
    assert set(b.FITTED) < set(b.CLASSES) and "copies" not in b.FITTED


def test_kernel_classes_of_real_kernel_names():
    b = _bench()
    assert b.family("Memset (Device)") == "copies"
    assert b.family("Memcpy DtoH (Device -> Pinned)") == "copies"
    assert b.family("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "gemm"
    assert b.family("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>") == "attention"
    assert b.family("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>") \
        == "elementwise"


@pytest.mark.slow
def test_docs_accuracy_block_is_current():
    b = _bench()
    text = (ROOT / "docs" / "capture-accuracy.md").read_text()
    a, e = text.index(b.BEGIN), text.index(b.END) + len(b.END)
    assert text[a:e] == b.build(DATA), "regenerate with: python benchmarks/validation/capture_accuracy.py"
