"""Emulated capture launches the kernels a CUDA GPU launches: free views,
fused dropout, nn.MultiheadAttention / nn.Transformer* under autocast and the SDPA choice,
grouped-query attention on the flash kernel, cuDNN RNNs."""

import collections
import warnings

import pytest

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from fastrack_core.schema import OpKind  # noqa: E402
from tracegen.emulation import Recorder, emulated_gpu  # noqa: E402
from tracegen.emulation.costmodel import (  # noqa: E402
    H100_SXM, RNN_PERSISTENT, RNN_STANDARD, gemm_ns, memory_ns, rnn_algo, rnn_kernels)


def _kernels(fn):
    """(ATen operator, dtype) of every kernel the emulated GPU ran for ``fn``, in order."""
    rec = Recorder(H100_SXM)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with emulated_gpu(rec):
            fn()
    out = []
    for op in rec.ops:
        if op.kind == OpKind.KERNEL:
            parts = op.name.split(" ")
            out.append((parts[0], parts[-1]))
    return out


def _ops(fn):
    return [k for k, _ in _kernels(fn)]


def _count(fn):
    return collections.Counter(_ops(fn))


# ----------------------------------------------------------------------------- free views

def test_unsafe_view_is_free():
    def work():
        a = torch.randn(4, 8, 64, device="cuda", requires_grad=True)
        b = torch.randn(64, 32, device="cuda")
        (a @ b).sum().backward()  # matmul folds to mm + _unsafe_view (forward) and mm (backward)

    ops = _ops(work)
    assert "aten::_unsafe_view" not in ops
    assert ops == ["aten::randn", "aten::randn", "aten::mm", "aten::sum", "aten::ones_like", "aten::mm"]


def test_unsafe_split_is_free_but_a_copying_reshape_is_not():
    def work():
        x = torch.randn(6, 8, device="cuda")
        a, b = torch.ops.aten.unsafe_split(x, 3)
        x.t().reshape(-1)  # a transposed tensor cannot be viewed flat: one copy kernel

    assert _ops(work) == ["aten::randn", "aten::clone"]


# ----------------------------------------------------------------------------- dropout

def test_dropout_is_one_fused_kernel_forward_and_backward():
    def work():
        x = torch.randn(256, 256, device="cuda", requires_grad=True)
        F.dropout(x, 0.1, training=True).sum().backward()

    ops = _ops(work)
    assert ops.count("aten::native_dropout") == 1
    assert ops.count("aten::native_dropout_backward") == 1
    assert not {"aten::bernoulli_", "aten::div_", "aten::mul"} & set(ops)


def test_dropout_module_and_torch_dropout_fused_eval_and_inplace_not():
    def train():
        x = torch.randn(64, 64, device="cuda")
        nn.Dropout(0.2)(x)
        torch.dropout(x, 0.3, True)

    def evaluate():
        x = torch.randn(64, 64, device="cuda")
        nn.Dropout(0.2).eval()(x)

    def inplace():  # ATen's dropout_ is unfused on CUDA too: bernoulli_, div_, mul_
        x = torch.randn(64, 64, device="cuda")
        F.dropout(x, 0.2, training=True, inplace=True)

    assert _ops(train) == ["aten::randn", "aten::native_dropout", "aten::native_dropout"]
    assert _ops(evaluate) == ["aten::randn"]
    assert _ops(inplace) == ["aten::randn", "aten::bernoulli_", "aten::div_", "aten::mul_"]


# ----------------------------------------------------------------------------- attention modules

def test_multihead_attention_follows_autocast_and_flash():
    def work():
        m = nn.MultiheadAttention(64, 4, batch_first=True).cuda()
        x = torch.randn(2, 16, 64, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            m(x, x, x, need_weights=False)

    ks = _kernels(work)
    gemm = [(op, dt) for op, dt in ks if op in ("aten::mm", "aten::addmm")]
    assert gemm == [("aten::mm", "bfloat16"), ("aten::addmm", "bfloat16")]  # in and out projections
    assert [op for op, _ in ks].count("aten::_scaled_dot_product_flash_attention") == 1
    assert not {"aten::bmm", "aten::_safe_softmax", "aten::baddbmm"} & {op for op, _ in ks}


def test_multihead_attention_eval_fp32_takes_memory_efficient_attention():
    def work():
        m = nn.MultiheadAttention(64, 4, batch_first=True).cuda().eval()
        x = torch.randn(2, 16, 64, device="cuda")
        with torch.no_grad():
            m(x, x, x, need_weights=False)

    ops = _ops(work)
    assert ops.count("aten::_scaled_dot_product_efficient_attention") == 1
    assert "aten::bmm" not in ops


def test_transformer_encoder_under_autocast():
    def work():
        layer = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, batch_first=True)
        enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).cuda()
        x = torch.randn(2, 16, 64, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            enc(x).float().sum().backward()

    ks = _kernels(work)
    ops = [op for op, _ in ks]
    assert ops.count("aten::_scaled_dot_product_flash_attention") == 2
    assert ops.count("aten::_scaled_dot_product_flash_attention_backward") == 2 * 3  # 3 kernels each
    assert ops.count("aten::native_dropout") == 2 * 3  # attention output, FFN, FFN output dropouts
    gemm_dtypes = {dt for op, dt in ks if op in ("aten::mm", "aten::addmm")}
    assert gemm_dtypes == {"bfloat16"}
    assert "aten::bmm" not in ops


def test_grouped_query_attention_runs_on_flash():
    def work():
        q = torch.randn(2, 8, 128, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(2, 2, 128, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(2, 2, 128, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).sum().backward()

    ks = _kernels(work)
    ops = [op for op, _ in ks]
    assert ops.count("aten::_scaled_dot_product_flash_attention") == 1
    assert ops.count("aten::_scaled_dot_product_flash_attention_backward") == 3  # pre, main, dQ convert
    assert "aten::bmm" not in ops and "float32" not in {dt for op, dt in ks if "attention" in op}


def test_grouped_query_attention_without_flash_is_math():
    def work():
        q = torch.randn(1, 4, 32, 64, device="cuda", dtype=torch.float32)
        k = torch.randn(1, 2, 32, 64, device="cuda", dtype=torch.float32)
        F.scaled_dot_product_attention(q, k, k, enable_gqa=True)  # fp32: no flash kernel

    ops = _ops(work)
    assert "aten::bmm" in ops and not any("attention" in op for op in ops)


# ----------------------------------------------------------------------------- cuDNN RNNs

def test_lstm_forward_backward_are_cudnn_kernels():
    """hidden 256 in fp32: cuDNN's standard algorithm (per-step GEMM + cell kernels)."""
    t, b, layers, dirs, h = 5, 3, 2, 2, 256

    def work():
        m = nn.LSTM(32, h, num_layers=layers, bidirectional=True, batch_first=True).cuda()
        x = torch.randn(b, t, 32, device="cuda", requires_grad=True)
        y, (hn, cn) = m(x)
        assert tuple(y.shape) == (b, t, 2 * h) and tuple(hn.shape) == (4, b, h) and tuple(cn.shape) == (4, b, h)
        y.sum().backward()
        assert tuple(x.grad.shape) == (b, t, 32) and m.weight_hh_l1_reverse.grad.shape == (4 * h, h)

    n = _count(work)
    # forward per layer and direction: input GEMM + (recurrent GEMM + cell) per step
    assert n["aten::_cudnn_rnn"] == layers * dirs * (1 + 2 * t)
    # backward: (cell + recurrent dgrad) per step, input dgrad, two wgrad GEMMs, bias reduction
    assert n["aten::_cudnn_rnn_backward"] == layers * dirs * (2 * t + 4)
    assert not {"aten::sigmoid_", "aten::tanh", "aten::addmm", "aten::unsafe_split"} & set(n)


def test_small_hidden_lstm_is_persistent():
    """hidden <= 192 forward / <= 128 backward: PERSIST_STATIC_SMALL_H, one kernel for all steps."""
    def work():
        m = nn.LSTM(32, 64, num_layers=2).cuda()
        y, _ = m(torch.randn(7, 3, 32, device="cuda", requires_grad=True))
        y.sum().backward()

    n = _count(work)
    assert n["aten::_cudnn_rnn"] == 2 * 2  # per layer: input GEMM + the persistent recurrent kernel
    assert n["aten::_cudnn_rnn_backward"] == 2 * (1 + 4)


def test_gru_and_projected_lstm():
    def gru():
        nn.GRU(16, 256).cuda()(torch.randn(4, 2, 16, device="cuda"))

    def proj():  # a projection always takes the standard algorithm
        y, (h, c) = nn.LSTM(16, 32, proj_size=8).cuda()(torch.randn(4, 2, 16, device="cuda"))
        assert tuple(y.shape) == (4, 2, 8) and tuple(c.shape) == (1, 2, 32)

    assert _count(gru)["aten::_cudnn_rnn"] == 1 + 2 * 4
    assert _count(proj)["aten::_cudnn_rnn"] == 1 + 3 * 4  # + the projection GEMM per step


def test_bf16_lstm_is_not_cudnn():
    """at::cudnn_is_acceptable admits float32/float16/float64 only: bf16 keeps ATen's own path."""
    def work():
        nn.LSTM(16, 16).cuda().to(torch.bfloat16)(torch.randn(3, 2, 16, device="cuda", dtype=torch.bfloat16))

    assert "aten::_cudnn_rnn" not in _count(work)


def test_rnn_algorithm_choice():
    a = lambda *x, **kw: rnn_algo(*x, spec=H100_SXM, **kw)  # noqa: E731
    # mode, batch, input, hidden, proj, layers, dirs, dtype
    assert a(2, 4, 8, 192, 0, 3, 2, "float32") == RNN_PERSISTENT
    assert a(2, 4, 8, 192, 0, 3, 2, "float32", forward=False) == RNN_STANDARD
    assert a(2, 4, 8, 64, 8, 1, 1, "float32") == RNN_STANDARD  # projection
    assert a(2, 4, 8, 64, 0, 1, 1, "float64") == RNN_STANDARD
    assert a(2, 64, 256, 512, 0, 1, 1, "float16") == RNN_PERSISTENT
    assert a(3, 64, 256, 512, 0, 1, 1, "float16") == RNN_STANDARD  # GRU: never PERSIST_STATIC
    assert a(2, 60, 256, 512, 0, 1, 1, "float16") == RNN_STANDARD  # batch not a multiple of 8
    assert a(2, 64, 256, 512, 0, 2, 1, "float16") == RNN_STANDARD  # two layers


def test_rnn_kernel_model_by_hand():
    k = rnn_kernels(2, seq=3, batch=4, input_size=8, hidden=256, proj=0, layers=1, dirs=1, dtype="float32",
                    spec=H100_SXM)
    assert [c.family for c in k] == ["gemm"] + ["gemm", "elementwise"] * 3
    assert k[0].flops == 2.0 * (3 * 4) * 1024 * 8  # M = seq x batch, N = 4 gates x hidden, K = input
    assert k[1].flops == 2.0 * 4 * 1024 * 256
    # cell: 2 x gate pre-activations + c read/write + h write, per batch row; + both biases
    assert k[2].bytes == (2 * 1024 + 2 * 256 + 256) * 4 * 4 + 2 * 1024 * 4
    bwd = rnn_kernels(3, seq=2, batch=1, input_size=8, hidden=256, proj=0, layers=1, dirs=1, dtype="float32",
                      spec=H100_SXM, backward=True, weight_grad=False)
    assert [c.family for c in bwd] == ["elementwise", "gemm"] * 2 + ["gemm"]
    # persistent: the steps' rooflines without their floors, in one kernel with one GEMM floor
    small = dict(seq=3, batch=4, input_size=8, hidden=64, proj=0, layers=1, dirs=1, dtype="float32", spec=H100_SXM)
    per = rnn_kernels(2, **small)
    assert len(per) == 2
    gemm_step = gemm_ns(4, 256, 64, "float32", H100_SXM, tf32=True) - H100_SXM.gemm_floor_ns
    cell_step = memory_ns((2 * 256 + 2 * 64 + 64) * 4 * 4 + 2 * 256 * 4, H100_SXM.elementwise_efficiency, 0, H100_SXM)
    assert per[1].dur_ns == H100_SXM.gemm_floor_ns + 3 * (gemm_step + cell_step)


@pytest.mark.parametrize("bad", [0.0, 1.0])
def test_dropout_edge_probabilities_are_not_fused(bad):
    def work():
        F.dropout(torch.randn(8, 8, device="cuda"), bad, training=True)

    assert "aten::native_dropout" not in _ops(work)
