"""Decode pricing that follows the data : indexed writes priced by the rows they
touch, varlen attention by each sequence's own context, and examples/serving.py's decode step
growing with the requests' real context, not with --max-len."""

import math

import pytest
from click.testing import CliRunner

from fastrack_core.traceio import read_trace
from tracegen.cli import main as tracegen_main
from tracegen.emulation import costmodel
from tracegen.emulation.costmodel import H100_SXM as SPEC
from tracegen.emulation.costmodel import TensorInfo

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
ROW = (8, 128)  # KV heads x head dim of one cache row (bf16: 2 KiB)


def _index_copy_ns(cache_rows: int, k: int) -> int:
    cache = TensorInfo((cache_rows, *ROW), "bfloat16")
    idx, src = TensorInfo((k,), "int64"), TensorInfo((k, *ROW), "bfloat16")
    (kern,) = costmodel.price_op("aten::index_copy_", [cache, idx, src], [cache], SPEC)
    return kern.dur_ns


def test_index_copy_is_priced_by_the_rows_it_writes():
    """Hand check: k rows of 8 x 128 bf16 (2048 B) through an int64 index = k x (8 + 2048 read +
    2048 written) B at other_efficiency x HBM, plus other_floor_ns; the cache size does not enter."""
    bw = SPEC.hbm_gb_s * 1e9 * SPEC.other_efficiency
    for k in (1, 32, 512):
        assert _index_copy_ns(4096, k) == SPEC.other_floor_ns + max(1, round(k * 4104 / bw * 1e9))
    assert _index_copy_ns(4096, 32) == _index_copy_ns(1 << 20, 32)  # a 16x larger cache: same price
    work = {k: _index_copy_ns(65536, k) - SPEC.other_floor_ns for k in (64, 512)}
    assert work[512] / work[64] == pytest.approx(8.0, rel=0.01)  # 8x the rows, 8x the bytes


def test_other_indexed_writes_follow_the_source():
    dst = TensorInfo((65536, 1024), "float32")
    idx, src = TensorInfo((16,), "int64"), TensorInfo((16, 1024), "float32")
    add = costmodel.indexed_write_bytes("index_add_", [dst, idx, src])
    put = costmodel.indexed_write_bytes("index_put_", [dst, idx, src])
    assert put == 16 * 8 + 2 * 16 * 4096  # index, source read, rows written
    assert add == 16 * 8 + 3 * 16 * 4096  # ... and the rows read before they are added to
    assert costmodel.indexed_write_bytes("index_put_", [dst, idx, src], accumulate=True) == add
    scatter_idx = TensorInfo((16, 1024), "int64")
    assert costmodel.indexed_write_bytes("scatter_", [dst, scatter_idx, src]) == 16 * 1024 * (8 + 4 + 4)
    mask = TensorInfo((65536,), "bool")  # a boolean mask: the count is in the data, every operand priced
    assert costmodel.indexed_write_bytes("index_put_", [dst, mask, src]) is None
    # out-of-place forms write a whole new tensor: still priced by every operand
    (oop,) = costmodel.price_op("aten::index_copy", [dst, idx, src], [dst], SPEC)
    assert oop.bytes == 2 * dst.nbytes + idx.nbytes + src.nbytes


def test_varlen_attention_reads_each_sequence_context_only():
    """Decode rows of 32 query heads over a 65 536-row pool of 8 x 128 K/V: the bytes are Q, O and
    each sequence's own keys and values (sum of contexts), not the pool."""
    q = TensorInfo((4, 32, 128), "bfloat16")
    kv = TensorInfo((65536, 8, 128), "bfloat16")

    def cost(lens, **kw):
        args = {"is_causal": True, "max_k": 2048, "seq_lens_q": [1] * len(lens), "seq_lens_k": lens, **kw}
        return costmodel.varlen_attention_cost(q, kv, kv, args, SPEC)

    c = cost([100, 200, 300, 400])
    qo = 2 * 4 * 32 * 128 * 2
    assert c.bytes == qo + 1000 * 8 * 256 * 2
    assert c.dur_ns == SPEC.attention_floor_ns + round(c.bytes / (SPEC.hbm_gb_s * 1e9 * SPEC.attention_memory_efficiency) * 1e9)
    assert cost([1000, 2000, 3000, 4000]).bytes - qo == pytest.approx(10 * (c.bytes - qo))
    # without the lengths' values: every query row bounded by max_k keys
    bound = costmodel.varlen_attention_cost(q, kv, kv, {"max_k": 2048}, SPEC)
    assert bound.bytes == qo + 4 * 2048 * 8 * 256 * 2
    assert math.isclose(c.flops, 2 * 32 * 1000 * 256)


def _decode_step_gpu_ns(tmp_path, *args) -> float:
    """Median GPU time (sum of kernel/copy durations) of the decode-only steps of a capture."""
    out = tmp_path / f"s{abs(hash(args))}.parquet"
    r = CliRunner().invoke(tracegen_main, ["capture", "--host-time", "modelled", "-o", str(out),
                                           str(ROOT / "examples" / "serving.py"), "--", "--model", "llama3-8b",
                                           "--layers", "2", "--requests", "4", "--concurrency", "4",
                                           "--output-len", "4", "--range-ratio", "1", "--max-batched-tokens", "16384",
                                           *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    df = read_trace(out).table.to_pandas()
    gpu = df[df.kind.isin(["kernel", "memcpy", "memset"]) & (df.step >= 0)]
    busy = []
    for _, g in gpu.groupby("step"):
        h2d = g[g.copy_dir == "H2D"].sort_values("start_ns")
        if len(h2d) and h2d.bytes.iloc[0] <= 8 * 4:  # token ids of at most 4 rows: a decode-only step
            busy.append(g.dur_ns.sum())
    assert len(busy) >= 2
    return sorted(busy)[len(busy) // 2]


@pytest.mark.parametrize("graphs", [[], ["--cuda-graphs"]], ids=["eager", "cuda-graphs"])
def test_serving_decode_step_follows_context_not_max_len(tmp_path, graphs):
    short = _decode_step_gpu_ns(tmp_path, "--input-len", "256", "--max-len", "512", *graphs)
    roomy = _decode_step_gpu_ns(tmp_path, "--input-len", "256", "--max-len", "8192", *graphs)
    assert roomy == pytest.approx(short, rel=0.005)  # 16x the cache positions per slot: same step
    long = _decode_step_gpu_ns(tmp_path, "--input-len", "4096", "--max-len", "8192", *graphs)
    # 16x the context: the attention reads 16x the K/V (2 layers x 4 x ~4 100 positions x 4 KiB);
    # the weights (the rest of the step) are the same
    kv_extra = 2 * 4 * (4096 - 256) * 8 * 256 * 2 / (SPEC.hbm_gb_s * 1e9 * SPEC.attention_memory_efficiency) * 1e9
    assert long - short == pytest.approx(kv_extra, rel=0.1)
