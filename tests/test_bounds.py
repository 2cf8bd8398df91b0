"""What a valid value may cost: graph size and time range are bounded before anything is
allocated or scheduled (docs/model.md "Parameter ranges")."""

from __future__ import annotations

import pytest

from fastrack_core.errors import GraphError
from replay.pipeline.run import replay_trace
from tracefactory import op, write


def _copy_trace(path, nbytes):
    return write(path, [
        op("runtime", "cudaMemcpyAsync", 0, 1000, thread=1),
        op("memcpy", "Memcpy HtoD (Pinned -> Device)", 1000, 5000, stream=7, device=0, bytes=nbytes,
           copy_dir="H2D", host_mem="pinned", deps=[(0, "launch")], correlation=1),
        op("sync", "cudaStreamSynchronize", 1000, 6000, thread=1, deps=[(0, "program"), (1, "sync")]),
    ])


def test_a_transform_that_would_explode_the_graph_is_refused_before_allocating(tmp_path):
    t = _copy_trace(tmp_path / "big.parquet", 2**40)  # 1 TiB in 4 KiB slots: 2^28 chunks
    with pytest.raises(GraphError, match="graph nodes, more than the"):
        replay_trace(t, protocol="baseline", overrides=["bounce.slot_bytes=4096"])


def test_the_same_copy_in_default_slots_replays(tmp_path):
    t = _copy_trace(tmp_path / "ok.parquet", 2**30)
    assert replay_trace(t, protocol="baseline").result.makespan_ns > 2**30 // 50  # at least 1 GiB at 50 GB/s


def test_durations_that_could_overflow_int64_are_refused(tmp_path):
    huge = 2**50 - 10
    ops = [op("cpu", "step", 0, huge, thread=1)]
    ops += [op("cpu", "step", 0, huge, thread=1, rank=r) for r in range(1, 4200)]
    t = write(tmp_path / "long.parquet", ops)
    with pytest.raises(GraphError, match="beyond the"):
        replay_trace(t)
