"""The emulation cost model on shapes that can be checked by hand (no torch needed)."""

import math

import pytest

from fastrack_core.errors import ConfigError
from tracegen.emulation import costmodel as cm
from tracegen.emulation.costmodel import H100_PCIE, H100_SXM, TensorInfo

S = H100_SXM


def test_4096_cubed_bf16_matmul_roofline():
    # 2 * 4096^3 FLOPs at 989.4 TFLOP/s * 0.80 efficiency
    expected = 2 * 4096**3 / (989.4e12 * 0.80) * 1e9
    assert cm.gemm_ideal_ns(4096, 4096, 4096, "bfloat16", S) == pytest.approx(expected)
    assert expected == pytest.approx(173_600, rel=1e-3)
    # the priced kernel: 32*32 = 1024 tiles of 128x128 -> ceil(1024/132) = 8 waves, + floor
    tile_s = 2 * 128 * 128 * 4096 / (989.4e12 / 132 * 0.80)
    got = cm.gemm_ns(4096, 4096, 4096, "bfloat16", S)
    assert got == S.gemm_floor_ns + round(8 * tile_s * 1e9)
    assert got == pytest.approx(expected, rel=0.06)  # wave quantisation costs 1024/132 -> 8: +3%


def test_price_op_mm_matches_gemm_ns():
    a = TensorInfo((4096, 4096), "bfloat16")
    (k,) = cm.price_op("aten::mm", [a, a], [a], S)
    assert k.family == "gemm" and k.flops == 2 * 4096**3
    assert k.dur_ns == cm.gemm_ns(4096, 4096, 4096, "bfloat16", S)


def test_linear_with_batch_dims_and_fp32_without_tf32_is_slower():
    x = TensorInfo((8, 512, 1024), "bfloat16")
    w = TensorInfo((4096, 1024), "bfloat16")
    (k,) = cm.price_op("aten::linear", [x, w, None], [TensorInfo((8, 512, 4096), "bfloat16")], S)
    assert k.flops == 2 * 8 * 512 * 4096 * 1024
    x32, w32 = TensorInfo(x.shape, "float32"), TensorInfo(w.shape, "float32")
    (k32,) = cm.price_op("aten::linear", [x32, w32, None], [TensorInfo((8, 512, 4096), "float32")], S)
    assert k32.dur_ns > 10 * (k.dur_ns - S.gemm_floor_ns)  # 66.9 vs 989.4 TFLOP/s


def test_misaligned_gemm_is_penalised():
    a = TensorInfo((141, 512), "bfloat16")
    ok = cm.price_op("aten::mm", [a, TensorInfo((512, 30528), "bfloat16")], [], S)[0]
    bad = cm.price_op("aten::mm", [a, TensorInfo((512, 30522), "bfloat16")], [], S)[0]
    assert bad.dur_ns > 2 * ok.dur_ns


def test_elementwise_is_bytes_over_bandwidth_plus_floor():
    t = TensorInfo((1024, 1024), "bfloat16")
    (k,) = cm.price_op("aten::add", [t, t], [t], S)
    nbytes = 3 * 1024 * 1024 * 2
    assert k.family == "elementwise"
    assert k.dur_ns == S.elementwise_floor_ns + round(nbytes / (3350e9 * 0.85) * 1e9)
    strided = TensorInfo((1024, 1024), "bfloat16", contiguous=False)
    (ks,) = cm.price_op("aten::add", [strided, t], [t], S)
    assert ks.dur_ns == S.elementwise_floor_ns + round(nbytes / (3350e9 * 0.45) * 1e9)
    # PCIe card: 2.0 TB/s HBM2e
    (kp,) = cm.price_op("aten::add", [t, t], [t], H100_PCIE)
    assert kp.dur_ns == S.elementwise_floor_ns + round(nbytes / (2000e9 * 0.85) * 1e9)


def test_tiny_kernel_costs_its_floor():
    t = TensorInfo((), "float32")
    assert cm.price_op("aten::add", [t, t], [t], S)[0].dur_ns == S.elementwise_floor_ns + 1
    assert cm.price_op("aten::sum", [t], [t], S)[0].family == "reduction"


def test_copies():
    mib = 1 << 20
    # h100-sxm: pcie.latency_ns 1000, 50 GB/s pinned, host.staging_copy_gb_s 10 GB/s (docs/machine.md)
    assert cm.h2d_d2h_ns(mib, True, S) == 2000 + round(mib / 50e9 * 1e9)
    assert cm.h2d_d2h_ns(mib, False, S) == 2000 + round(mib / 10e9 * 1e9)
    assert cm.d2d_ns(mib, S) == S.d2d_floor_ns + round(2 * mib / (3350e9 * 0.85) * 1e9)


def test_flash_attention_forward_and_backward():
    q = TensorInfo((16, 16, 559, 64), "bfloat16")
    (fwd,) = cm.price_op("aten::_scaled_dot_product_flash_attention", [q, q, q], [q], S, args={"is_causal": True})
    flops = 2 * 16 * 16 * 559 * 559 * 128 * 0.5
    assert fwd.flops == pytest.approx(flops)
    eff = 0.33 * 559 / (559 + 1024)
    assert fwd.dur_ns == S.attention_floor_ns + round(flops / (989.4e12 * eff) * 1e9)
    bwd = cm.price_op("aten::_scaled_dot_product_flash_attention_backward", [q, q, q, q, q, q], [q, q, q], S,
                      args={"is_causal": True})
    assert len(bwd) == 3 and max(k.dur_ns for k in bwd) > 2 * fwd.dur_ns


def test_foreach_launches():
    ts = [TensorInfo((1024,), "float32")] * 250
    ks = cm.price_op("aten::_foreach_add_", [], [], S, args={"tensor_lists": [ts, ts]})
    assert len(ks) == math.ceil(250 / S.foreach_tensors_per_launch) == 3


def test_kernel_family_of_real_names():
    f = cm.kernel_family
    assert f("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "gemm"
    assert f("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>") == "attention"
    assert f("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>") == "elementwise"
    assert f("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>") == "reduction"
    assert f("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, MeanOps>>") == "reduction"
    assert f("void at::native::(anonymous namespace)::indexSelectLargeIndex<float>") == "other"
    assert f("Memcpy DtoH (Device -> Pinned)") == "memcpy"
    assert f("Memset (Device)") == "memset"
    assert f("aten::mm [8x8, 8x8] bfloat16") == "gemm"
    assert f("aten::native_layer_norm [8x8] float32") == "reduction"


def test_unknown_device_and_override():
    with pytest.raises(ConfigError, match="unknown preset name"):
        cm.get_spec("a100")
    assert cm.get_spec("h100-pcie").hbm_gb_s == 2000.0
    with pytest.raises(ConfigError, match="no_such"):
        S.with_overrides(no_such=1)
