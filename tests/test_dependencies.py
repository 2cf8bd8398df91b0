"""derive_dependencies: the raw-op contract shared by the Kineto and Nsight importers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fastrack_core.errors import TraceFormatError
from fastrack_core.schema import DepKind, OpKind
from fastrack_core.traceio import validate_table
from tracegen.deps import derive_dependencies
from tracegen.importers.kineto import import_kineto

DATA = Path(__file__).resolve().parent / "data"
C, R, S, K, M = OpKind.CPU, OpKind.RUNTIME, OpKind.SYNC, OpKind.KERNEL, OpKind.MEMCPY


def host(kind, name, start, dur, corr=-1, thread=1, rank=0, **hints):
    return dict(kind=int(kind), name=name, start_ns=start, dur_ns=dur, correlation=corr, thread=thread, rank=rank,
                stream=-1, device=-1, **hints)  # fmt: skip


def gpu(name, start, dur, corr=-1, stream=7, rank=0, kind=K, device=0, **kw):
    return dict(kind=int(kind), name=name, start_ns=start, dur_ns=dur, correlation=corr, stream=stream, rank=rank,
                device=device, thread=-1, **kw)  # fmt: skip


def derive(rows) -> pd.DataFrame:
    table = derive_dependencies(pd.DataFrame(rows))
    validate_table(table)
    df = table.to_pandas()
    df["kind"] = df["kind"].astype(str)
    df["name"] = df["name"].astype(str)
    return df


def op(df, name, nth=0) -> pd.Series:
    return df[df.name == name].sort_values("start_ns").iloc[nth]


def deps(df, row, kind=None):
    return sorted(int(d) for d, k in zip(row.deps, row.dep_kinds) if kind is None or k == kind)


def test_flattening_gaps_and_names():
    df = derive([
        host(C, "outer_op", 0, 100),
        host(C, "inner_op", 10, 30),
        host(R, "cudaLaunchKernel", 12, 5, corr=1),
        host(R, "cuLaunchKernel", 13, 2, corr=2),  # nested driver call: absorbed
        host(R, "cudaMemsetAsync", 20, 4, corr=3),
        host(R, "cudaEventQuery", 60, 10),
        host(R, "cudaEventQuery", 65, 10),  # partly overlaps the previous call: clipped
        gpu("k", 30, 5, corr=2),
        host(C, "other_thread_op", 0, 500, thread=99),  # thread without CUDA calls: dropped
    ])  # fmt: skip
    assert "cuLaunchKernel" not in set(df.name) and 99 not in set(df.thread)
    host_ops = df[df.thread == 1].sort_values("start_ns")
    assert list(host_ops.name) == ["cudaLaunchKernel", "inner_op", "cudaMemsetAsync", "outer_op", "cudaEventQuery",
                                   "cudaEventQuery"]  # fmt: skip
    assert list(host_ops.kind) == ["runtime", "cpu", "runtime", "cpu", "runtime", "runtime"]
    # the gaps fill the thread exactly; times re-based to the first kept op (12)
    assert list(host_ops.start_ns) == [0, 5, 8, 12, 48, 58]
    assert list(host_ops.dur_ns) == [5, 3, 4, 36, 10, 5]
    ids = list(host_ops.op_id)
    for a, b in zip(ids, ids[1:]):
        assert deps(df, df.loc[df.op_id == b].iloc[0], DepKind.PROGRAM) == [a]
    assert deps(df, op(df, "k"), DepKind.LAUNCH) == [int(op(df, "cudaLaunchKernel").op_id)]


def test_blocking_split_and_sync_scopes():
    df = derive([
        host(R, "cudaLaunchKernel", 0, 5, corr=1),
        host(R, "cudaLaunchKernel", 6, 5, corr=2),
        host(R, "cudaMemcpy", 20, 100, corr=3, blocking=True),
        host(S, "cudaStreamSynchronize", 130, 10, corr=4, sync_scope="stream", sync_stream=9),
        host(S, "cudaDeviceSynchronize", 150, 10, corr=5, sync_scope="device"),
        host(S, "cudaStreamSynchronize", 170, 10, corr=6, sync_scope="stream"),  # stream unknown: inferred
        gpu("a", 10, 50, corr=1, stream=7),
        gpu("b", 12, 20, corr=2, stream=9),
        gpu("copy", 60, 30, corr=3, stream=7, kind=M, copy_dir="H2D", host_mem="pageable", bytes=10),
    ])  # fmt: skip
    r = op(df, "cudaMemcpy", 0)
    s = op(df, "cudaMemcpy", 1)
    copy = op(df, "copy")
    assert (r.kind, r.start_ns, r.dur_ns) == ("runtime", 20, 40)
    assert (s.kind, s.start_ns, s.dur_ns) == ("sync", 60, 60)
    assert deps(df, s) == sorted([int(r.op_id), int(copy.op_id)])
    assert deps(df, copy, DepKind.LAUNCH) == [int(r.op_id)]
    assert deps(df, copy, DepKind.STREAM) == [int(op(df, "a").op_id)]
    assert (copy.copy_dir, copy.host_mem, copy.bytes) == ("H2D", "pageable", 10)
    assert deps(df, op(df, "cudaStreamSynchronize", 0), DepKind.SYNC) == [int(op(df, "b").op_id)]
    assert deps(df, op(df, "cudaDeviceSynchronize"), DepKind.SYNC) == sorted([int(copy.op_id), int(op(df, "b").op_id)])
    # inferred: the stream of the last GPU op this thread launched (the copy, stream 7)
    assert deps(df, op(df, "cudaStreamSynchronize", 1), DepKind.SYNC) == [int(copy.op_id)]


def test_event_edges_and_event_sync_from_hints():
    df = derive([
        host(R, "cudaLaunchKernel", 0, 5, corr=1),
        host(R, "cudaEventRecord", 6, 2, corr=2),  # record stream unknown: inferred from the last launch
        host(R, "cudaLaunchKernel", 9, 2, corr=3),
        host(R, "cudaStreamWaitEvent", 12, 2, corr=4, event_corr=2, wait_stream=9),
        host(R, "cudaLaunchKernel", 15, 2, corr=5),
        host(S, "cudaEventSynchronize", 20, 50, corr=6, sync_scope="event", event_corr=2),
        gpu("producer", 5, 40, corr=1, stream=7),
        gpu("later_on_7", 45, 10, corr=3, stream=7),
        gpu("consumer", 46, 10, corr=5, stream=9),
    ])  # fmt: skip
    prod = int(op(df, "producer").op_id)
    assert deps(df, op(df, "consumer"), DepKind.EVENT) == [prod]
    assert deps(df, op(df, "cudaEventSynchronize"), DepKind.SYNC) == [prod]


def test_inferred_launch_uses_main_thread():
    df = derive([
        host(R, "cudaLaunchKernel", 0, 5, corr=1, thread=1),
        host(R, "cudaLaunchKernel", 10, 5, corr=2, thread=1),
        host(R, "cudaLaunchKernel", 12, 5, corr=3, thread=2),
        host(R, "cudaEventQuery", 20, 2, thread=1),
        gpu("a", 6, 2, corr=1), gpu("b", 16, 2, corr=2), gpu("c", 18, 2, corr=3, stream=8),
        gpu("orphan", 30, 2, corr=77),
    ])  # fmt: skip
    assert deps(df, op(df, "orphan"), DepKind.LAUNCH) == [int(op(df, "cudaEventQuery").op_id)]


def test_collectives_matched_across_ranks_and_sequenced():
    rows = []
    for rank in range(3):
        t = rank * 1000  # each rank has its own clock
        rows += [
            host(R, "cudaLaunchKernel", t, 5, corr=1, rank=rank),
            host(R, "cudaLaunchKernel", t + 10, 5, corr=2, rank=rank),
            gpu("nccl_ar", t + 20, 50, corr=1, rank=rank, kind=OpKind.COLLECTIVE, coll_type="all_reduce",
                coll_group="0", coll_bytes=64),
            gpu("nccl_ar", t + 80, 50, corr=2, rank=rank, kind=OpKind.COLLECTIVE, coll_type="all_reduce",
                coll_group="0", coll_bytes=64),
        ]  # fmt: skip
    df = derive(rows)
    coll = df[df.kind == "collective"]
    assert sorted(coll.coll_seq) == [0, 0, 0, 1, 1, 1]
    for _, c in coll.iterrows():
        peers = df.set_index("op_id").loc[deps(df, c, DepKind.COLLECTIVE)]
        assert sorted(peers["rank"]) == sorted({0, 1, 2} - {c["rank"]})
        assert set(peers.coll_seq) == {c.coll_seq}
    assert [df[df["rank"] == r].start_ns.min() for r in range(3)] == [0, 0, 0]


def test_steps_from_annotations():
    df = derive([
        host(C, "ProfilerStep#7", 0, 100, thread=5),  # any thread of the rank
        host(R, "cudaLaunchKernel", 10, 5, corr=1),
        host(R, "cudaLaunchKernel", 120, 5, corr=2),
        gpu("a", 95, 30, corr=1), gpu("b", 130, 5, corr=2),
    ])  # fmt: skip
    assert op(df, "a").step == 7 and op(df, "b").step == -1
    assert op(df, "cudaLaunchKernel", 0).step == 7


@pytest.mark.parametrize("dur,msg", [(-5, "negative duration"), (float("nan"), "not a finite number")])
def test_bad_durations(dur, msg):
    with pytest.raises(TraceFormatError, match=msg):
        derive_dependencies(pd.DataFrame([host(R, "x", 0, 5), host(R, "cudaLaunchKernel", 10, dur)]))


def test_empty_raw_is_an_error():
    with pytest.raises(TraceFormatError, match="empty trace"):
        derive_dependencies(pd.DataFrame(columns=["kind", "name", "start_ns", "dur_ns"]))
    with pytest.raises(TraceFormatError, match="empty trace"):
        derive_dependencies(pd.DataFrame([host(C, "only_annotation", 0, 5)]))


def _acyclic_without_collectives(df: pd.DataFrame) -> bool:
    n = len(df)
    indeg = np.zeros(n, np.int64)
    out: list[list[int]] = [[] for _ in range(n)]
    for i, (d, k) in enumerate(zip(df.deps, df.dep_kinds)):
        for s, kk in zip(d, k):
            if kk != DepKind.COLLECTIVE:
                out[s].append(i)
                indeg[i] += 1
    stack = list(np.flatnonzero(indeg == 0))
    seen = 0
    while stack:
        v = stack.pop()
        seen += 1
        for w in out[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                stack.append(w)
    return seen == n


@pytest.mark.parametrize("name", ["a100_cuda_event_sync_tiny.json.gz", "h100_qwen1.5_0.5b_chat.json.gz"])
def test_real_traces_are_acyclic_and_sorted(name):
    table, _ = import_kineto([DATA / name])
    df = table.to_pandas()
    assert (df.op_id.to_numpy() == np.arange(len(df))).all()
    assert (np.diff(df.start_ns.to_numpy()) >= 0).all()
    assert _acyclic_without_collectives(df)


def _synthetic(n_launch: int, ranks: int = 2) -> pd.DataFrame:
    per = n_launch // ranks
    parts = []
    for r in range(ranks):
        i = np.arange(per)
        t = i * 1000
        parts.append(pd.DataFrame({"kind": int(R), "name": "cudaLaunchKernel", "start_ns": t, "dur_ns": 300,
                                   "correlation": i, "thread": 1, "rank": r}))  # fmt: skip
        parts.append(pd.DataFrame({"kind": int(C), "name": "aten::op", "start_ns": t - 100, "dur_ns": 700,
                                   "thread": 1, "rank": r}))  # fmt: skip
        parts.append(pd.DataFrame({"kind": int(K), "name": "kernel", "start_ns": t + 500, "dur_ns": 400,
                                   "correlation": i, "stream": 7 + (i % 2), "device": 0, "rank": r}))  # fmt: skip
    return pd.concat(parts, ignore_index=True)


def test_vectorized_derivation_at_scale():
    """60,000 launches: every call, kernel and gap is derived (speed is measured by
    benchmarks/, never asserted here)."""
    raw = _synthetic(60_000)
    table = derive_dependencies(raw)
    assert table.num_rows == 60_000 * 2 + 60_000 - 2  # calls + kernels + gaps


@pytest.mark.slow
def test_one_million_ops():
    raw = _synthetic(350_000)  # 1.05M raw rows -> ~1M ops
    table = derive_dependencies(raw)
    assert table.num_rows == 350_000 * 2 + 350_000 - 2
