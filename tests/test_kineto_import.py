"""Kineto (PyTorch profiler) JSON importer: real traces with hand-checked facts, and small
hand-written fixtures for each quirk of the format."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fastrack_core.errors import TraceFormatError
from fastrack_core.schema import DepKind
from fastrack_core.traceio import read_trace, write_trace
from tracegen.importers import kineto
from tracegen.importers.kineto import import_kineto, read_kineto

DATA = Path(__file__).resolve().parent / "data"
TINY = DATA / "a100_cuda_event_sync_tiny.json.gz"
BERT = DATA / "h100_bert_small_uncased.json.gz"
QWEN = DATA / "h100_qwen1.5_0.5b_chat.json.gz"
DLRM = DATA / "v100_dlrm_8rank"


def frame(table) -> pd.DataFrame:
    df = table.to_pandas()
    for c in ("kind", "name", "copy_dir", "host_mem", "coll_type", "coll_group"):
        df[c] = df[c].astype(object).where(df[c].notna(), None)
    return df


def deps_of(df: pd.DataFrame, op: int, kind: DepKind | None = None) -> list[int]:
    row = df.loc[df.op_id == op].iloc[0]
    return [int(d) for d, k in zip(row.deps, row.dep_kinds) if kind is None or k == kind]


def one(df: pd.DataFrame, **eq) -> pd.Series:
    m = np.ones(len(df), bool)
    for k, v in eq.items():
        m &= (df[k] == v).to_numpy()
    assert m.sum() == 1, f"{eq}: {m.sum()} rows"
    return df[m].iloc[0]


# --------------------------------------------------------------------------- fixture writer

HOST_PID = 100
HOST_TID = 101


def X(cat, name, ts, dur, pid=HOST_PID, tid=HOST_TID, **args):
    ev = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    if args:
        ev["args"] = {k.replace("_", " ") if k in ("External_id",) else k: v for k, v in args.items()}
    return ev


def rt(name, ts, dur, corr, **kw):
    return X("cuda_runtime", name, ts, dur, correlation=corr, **kw)


def kern(name, ts, dur, corr, stream=7, device=0, cat="kernel", **kw):
    return X(cat, name, ts, dur, pid=device, tid=stream, correlation=corr, stream=stream, device=device, **kw)


def write(path: Path, events, gz=False, **top) -> Path:
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}], **top,
           "traceEvents": events}  # fmt: skip
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


# --------------------------------------------------------------------------- real traces


def test_tiny_event_sync_trace_exact():
    table, meta = import_kineto([TINY])
    df = frame(table)
    counts = df.kind.value_counts().to_dict()
    assert counts["kernel"] == 4
    assert counts["memcpy"] == 1
    # cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize + the wait half of the
    # D2H-into-pageable cudaMemcpyAsync
    assert counts["sync"] == 4
    # 4 launches, 2 event records, launch half of the memcpy, event query, elapsed time
    assert counts["runtime"] == 9
    assert meta["gpu_model"] == "NVIDIA A100-PG509-200"
    assert meta["ranks"] == [0]
    mc = one(df, kind="memcpy")
    assert (mc.copy_dir, mc.host_mem, mc.bytes) == ("D2H", "pageable", 1)
    spin = one(df, kind="kernel", correlation=1526)
    # sync deps, exactly
    half = one(df, kind="sync", name="cudaMemcpyAsync")
    assert deps_of(df, half.op_id, DepKind.SYNC) == [mc.op_id]
    launch_half = one(df, kind="runtime", name="cudaMemcpyAsync")
    assert launch_half.start_ns + launch_half.dur_ns == half.start_ns == mc.start_ns
    ss = one(df, name="cudaStreamSynchronize")
    assert deps_of(df, ss.op_id, DepKind.SYNC) == [mc.op_id]
    es = one(df, name="cudaEventSynchronize")
    assert deps_of(df, es.op_id, DepKind.SYNC) == [spin.op_id]
    ds = one(df, name="cudaDeviceSynchronize")
    assert deps_of(df, ds.op_id, DepKind.SYNC) == [spin.op_id]
    # every GPU op launched by its call; stream chain of 5 ops on stream 7
    gpu = df[df.kind.isin(["kernel", "memcpy"])]
    for _, g in gpu.iterrows():
        (call,) = deps_of(df, g.op_id, DepKind.LAUNCH)
        assert df.loc[df.op_id == call, "correlation"].item() == g.correlation
    assert sum(len(deps_of(df, o, DepKind.STREAM)) for o in gpu.op_id) == 4
    assert set(df.step) == {100}
    # host thread: contiguous sequence from first to last host op
    host = df[df.thread == 948300].sort_values("start_ns")
    assert (host.start_ns.to_numpy()[1:] == (host.start_ns + host.dur_ns).to_numpy()[:-1]).all()
    assert df.start_ns.min() == 0


def test_bert_trace():
    table, meta = import_kineto([BERT])
    df = frame(table)
    assert (df.kind == "kernel").sum() == 60
    mc = one(df, kind="memcpy")
    assert (mc.copy_dir, mc.host_mem) == ("D2H", "pinned")
    assert meta["gpu_model"] == "NVIDIA H100 80GB HBM3"  # from the keys after traceEvents
    assert meta["tool_versions"]["cuda_runtime"] == "12040"
    gpu = df[df.kind.isin(["kernel", "memcpy"])]
    assert all(DepKind.LAUNCH in list(k) for k in gpu.dep_kinds)
    assert set(df.step) <= {6, -1}


def test_qwen_trace():
    table, _ = import_kineto([QWEN])
    df = frame(table)
    assert (df.kind == "kernel").sum() == 1465
    assert (df.kind == "memset").sum() == 241
    assert (df.kind == "memcpy").sum() == 1


def test_dlrm_eight_ranks_collectives_matched():
    table, meta = import_kineto([DLRM])
    df = frame(table)
    assert meta["world_size"] == 8
    assert meta["ranks"] == list(range(8))
    assert meta["gpu_model"] == "Tesla V100-SXM2-32GB"
    coll = df[df.kind == "collective"]
    assert coll.groupby("rank").size().tolist() == [8] * 8
    assert sorted(coll[coll["rank"] == 0].coll_type) == ["all_reduce"] * 3 + ["all_to_all"] * 5
    for _, c in coll.iterrows():
        peers = deps_of(df, c.op_id, DepKind.COLLECTIVE)
        assert len(peers) == 7
        p = df.set_index("op_id").loc[peers]
        assert sorted(p["rank"]) == sorted(set(range(8)) - {c["rank"]})
        assert set(p.coll_seq) == {c.coll_seq} and set(p.coll_type) == {c.coll_type}
    for r in range(8):  # each rank re-based to its own origin
        assert df[df["rank"] == r].start_ns.min() == 0


# --------------------------------------------------------------------------- quirks


def test_legacy_categories_string_ids_and_zero_durations(tmp_path):
    ev = [
        {"ph": "X", "cat": "Operator", "name": "aten::add", "pid": HOST_PID, "tid": HOST_TID, "ts": 1000, "dur": 20,
         "args": {"external id": 5}},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": HOST_PID, "tid": HOST_TID, "ts": 1005,
         "dur": 5, "args": {"correlation": 9, "external id": 5}},
        {"ph": "X", "cat": "Runtime", "name": "cudaMemcpyAsync", "pid": HOST_PID, "tid": HOST_TID, "ts": 1012,
         "dur": 0, "args": {"correlation": 10}},
        {"ph": "X", "cat": "Kernel", "name": "add_kernel", "pid": "0", "tid": "stream 7 ", "ts": 1011, "dur": 0,
         "args": {"correlation": 9}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": "0", "tid": "stream 7 ",
         "ts": 1013, "dur": 2, "args": {"correlation": 10, "bytes": 64}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
        {"ph": "X", "cat": "overhead", "name": "CUPTI Overhead", "pid": -1, "tid": 0, "ts": 900, "dur": 1},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": 1000, "dur": 50},
    ]  # fmt: skip
    table, _ = import_kineto([write(tmp_path / "legacy.json", ev)])
    df = frame(table)
    k = one(df, kind="kernel")
    assert (k.device, k.stream, k.dur_ns) == (0, 7, 0)
    m = one(df, kind="memcpy")
    assert (m.copy_dir, m.host_mem, m.bytes) == ("H2D", "pinned", 64)
    assert deps_of(df, k.op_id, DepKind.LAUNCH) == [one(df, name="cudaLaunchKernel").op_id]
    gap = one(df, kind="cpu")  # between the two calls, inside aten::add
    assert (gap["name"], gap.start_ns, gap.dur_ns) == ("aten::add", 5_000, 2_000)  # origin: first call
    assert df.start_ns.min() == 0


def test_relative_ts_and_rounding(tmp_path):
    ev = [
        rt("cudaLaunchKernel", 10.0004, 1.2346, 1),
        kern("k", 11.5, 0.0015, 1),
    ]
    table, _ = import_kineto([write(tmp_path / "t.json", ev, baseTimeNanoseconds=1700000000000000000)])
    df = frame(table)
    r = one(df, kind="runtime")
    k = one(df, kind="kernel")
    assert r.dur_ns == 1235 and k.dur_ns == 2  # round(us*1000): 1234.6 -> 1235, 1.5 -> 2
    assert k.start_ns - r.start_ns == 1500 and r.start_ns == 0


@pytest.mark.parametrize(
    "name,cdir,mem",
    [
        ("Memcpy HtoD (Pinned -> Device)", "H2D", "pinned"),
        ("Memcpy HtoD (Pageable -> Device)", "H2D", "pageable"),
        ("Memcpy DtoH (Device -> Pageable)", "D2H", "pageable"),
        ("Memcpy DtoH (Device -> Pinned)", "D2H", "pinned"),
        ("Memcpy DtoD (Device -> Device)", "D2D", None),
        ("Memcpy PtoP (Device -> Device)", "P2P", None),
        ("Memcpy HtoD (Host -> Device)", "H2D", None),  # AMD spelling: memory kind unknown
    ],
)
def test_memcpy_names(tmp_path, name, cdir, mem):
    ev = [rt("cudaMemcpyAsync", 0, 10, 3), kern(name, 2, 4, 3, cat="gpu_memcpy", bytes=4096)]
    df = frame(import_kineto([write(tmp_path / "m.json", ev)])[0])
    m = one(df, kind="memcpy")
    assert (m.copy_dir, m.host_mem, m.bytes) == (cdir, mem, 4096)
    # only a D2H copy into pageable memory blocks the async call
    assert ((df.kind == "sync").sum() == 1) == (cdir == "D2H" and mem == "pageable")


def test_synchronous_memcpy_is_split(tmp_path):
    ev = [rt("cudaMemcpy", 0, 50, 3), kern("Memcpy HtoD (Pageable -> Device)", 10, 30, 3, cat="gpu_memcpy")]
    df = frame(import_kineto([write(tmp_path / "m.json", ev)])[0])
    r, s, m = one(df, kind="runtime"), one(df, kind="sync"), one(df, kind="memcpy")
    assert (r.start_ns, r.dur_ns, s.start_ns, s.dur_ns) == (0, 10_000, 10_000, 40_000)
    assert deps_of(df, s.op_id) == sorted([r.op_id, m.op_id])
    assert deps_of(df, m.op_id, DepKind.LAUNCH) == [r.op_id]


def test_cuda_graph_launch_and_orphan_gpu_ops(tmp_path):
    ev = [
        rt("cudaLaunchKernel", 0, 5, 1),
        rt("cudaGraphLaunch", 10, 8, 2),
        kern("g1", 20, 5, 2), kern("g2", 26, 5, 2), kern("g3", 32, 5, 2, stream=9),
        rt("cudaStreamIsCapturing", 40, 2, 3),
        kern("orphan", 50, 5, 999),  # no runtime call with correlation 999
        kern("first", 6, 3, 1),
    ]  # fmt: skip
    df = frame(import_kineto([write(tmp_path / "g.json", ev)])[0])
    graph = one(df, name="cudaGraphLaunch").op_id
    for n in ("g1", "g2", "g3"):
        assert deps_of(df, one(df, name=n).op_id, DepKind.LAUNCH) == [graph]
    # inferred launch: latest runtime call started before it on the main launching thread
    assert deps_of(df, one(df, name="orphan").op_id, DepKind.LAUNCH) == [one(df, name="cudaStreamIsCapturing").op_id]
    assert one(df, name="orphan").correlation == 999


def test_nested_driver_call_is_absorbed(tmp_path):
    ev = [
        rt("cudaLaunchKernel", 0, 20, 1),
        X("cuda_driver", "cuLaunchKernel", 5, 10, correlation=2),
        kern("k", 30, 5, 2),
    ]
    df = frame(import_kineto([write(tmp_path / "n.json", ev)])[0])
    assert "cuLaunchKernel" not in set(df.name)
    outer = one(df, name="cudaLaunchKernel")
    assert outer.dur_ns == 20_000
    assert deps_of(df, one(df, name="k").op_id, DepKind.LAUNCH) == [outer.op_id]


def test_cuda_sync_stream_wait_event_gives_event_edge(tmp_path):
    ev = [
        rt("cudaLaunchKernel", 0, 5, 1),  # producer on stream 7
        rt("cudaEventRecord", 6, 2, 2),
        rt("cudaStreamWaitEvent", 10, 2, 3),
        rt("cudaLaunchKernel", 14, 5, 4),  # consumer on stream 9
        kern("producer", 6, 30, 1, stream=7),
        kern("consumer", 36, 5, 4, stream=9),
        X("cuda_sync", "Stream Wait Event", 10, 1, pid=0, tid=9, cuda_sync_kind="Stream Wait Event", stream=9,
          wait_on_stream=7, wait_on_cuda_event_record_corr_id=2, correlation=3, device=0),
    ]  # fmt: skip
    df = frame(import_kineto([write(tmp_path / "e.json", ev)])[0])
    assert deps_of(df, one(df, name="consumer").op_id, DepKind.EVENT) == [one(df, name="producer").op_id]


def test_stream_sync_without_cuda_sync_rows_infers_stream(tmp_path):
    ev = [
        rt("cudaLaunchKernel", 0, 5, 1),
        rt("cudaLaunchKernel", 6, 5, 2),
        rt("cudaStreamSynchronize", 12, 40, 3),
        kern("a", 5, 10, 1, stream=7),
        kern("b", 6, 45, 2, stream=9),
    ]
    df = frame(import_kineto([write(tmp_path / "s.json", ev)])[0])
    ss = one(df, name="cudaStreamSynchronize")
    assert ss.kind == "sync"
    assert deps_of(df, ss.op_id, DepKind.SYNC) == [one(df, name="b").op_id]


def test_nccl_collective_sources(tmp_path):
    coll_args = {"Collective name": "allreduce", "In msg nelems": 1000, "Out msg nelems": 1000, "Group size": 2,
                 "dtype": "Float", "Process Group Name": "0", "Process Group Ranks": "[0, 1]"}  # fmt: skip
    ev = [
        # 1) args on the kernel itself
        rt("cudaLaunchKernel", 0, 5, 1),
        kern("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 10, 5, 1, stream=20,
             **coll_args),
        # 2) args only on record_param_comms with the same External id
        X("cpu_op", "record_param_comms", 20, 10, **{"External id": 77, **{**coll_args, "Collective name": "allgather",
                                                                         "dtype": "BFloat16", "In msg nelems": 8}}),
        rt("cudaLaunchKernel", 22, 5, 2),
        kern("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", 30, 5, 2, stream=20,
             **{"External id": 77}),
        # 3) no args at all: the enclosing nccl:<type> annotation of the launching call
        X("user_annotation", "nccl:broadcast", 40, 10),
        rt("cudaLaunchKernel", 42, 5, 3),
        kern("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", 50, 5, 3, stream=20),
        # 4) nothing but the kernel name
        rt("cudaLaunchKernel", 60, 5, 4),
        kern("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", 70, 5, 4,
             stream=20),
    ]  # fmt: skip
    df = frame(import_kineto([write(tmp_path / "c.json", ev)])[0])
    c = df[df.kind == "collective"].sort_values("start_ns")
    assert list(c.coll_type) == ["all_reduce", "all_gather", "broadcast", "send_recv"]
    assert list(c.coll_bytes) == [4000, 16, 0, 0]
    assert list(c.bytes) == [4000, 16, 0, 0]
    assert list(c.coll_group)[:2] == ["0", "0"]
    assert list(c.coll_seq) == [0, 1, 0, 1]  # numbered per (rank, group) in issue order


def test_profiler_steps(tmp_path):
    ev = [
        X("user_annotation", "ProfilerStep#3", 0, 100),
        X("user_annotation", "ProfilerStep#4", 100, 100),
        rt("cudaLaunchKernel", 10, 5, 1),
        rt("cudaLaunchKernel", 150, 5, 2),
        kern("a", 20, 5, 1),
        kern("b", 199, 5, 2),  # runs past the step's end: step of its launching call
    ]
    df = frame(import_kineto([write(tmp_path / "p.json", ev)])[0])
    assert one(df, name="a").step == 3 and one(df, name="b").step == 4
    assert one(df, kind="cpu").step == 3  # the gap [15, 150) starts in step 3
    assert one(df, name="cudaLaunchKernel", correlation=2).step == 4


def test_gzip_detected_by_magic_not_extension(tmp_path):
    ev = [rt("cudaLaunchKernel", 0, 5, 1), kern("k", 6, 5, 1)]
    gz_named_json = write(tmp_path / "a.json", ev, gz=True)
    plain_named_gz = write(tmp_path / "b.json.gz", ev)
    for p in (gz_named_json, plain_named_gz):
        assert (frame(import_kineto([p])[0]).kind == "kernel").sum() == 1


def test_metadata_whitelist_no_leak(tmp_path):
    ev = [rt("cudaLaunchKernel", 0, 5, 1), kern("k", 6, 5, 1)]
    src = write(tmp_path / "s.json", ev, metadata={"env": {"HF_TOKEN": "secret"}}, hostname="node-secret-42",
                distributedInfo={"rank": 0, "world_size": 1, "master_addr": "secret-host"},
                cuda_runtime_version=12040)  # fmt: skip
    table, meta = import_kineto([src])
    out = tmp_path / "o.parquet"
    write_trace(out, table, meta)
    assert b"secret" not in out.read_bytes()
    back = read_trace(out).metadata
    assert back["tool_versions"]["cuda_runtime"] == "12040" and back["world_size"] == 1
    assert "hostname" not in json.dumps(back)


def test_rank_from_distributed_info_then_file_name(tmp_path):
    ev = [rt("cudaLaunchKernel", 0, 5, 1), kern("k", 6, 5, 1)]
    a = write(tmp_path / "rank-3.trace.json", ev)
    b = write(tmp_path / "worker5_step_1.json", ev)
    c = write(tmp_path / "anything.json", ev, distributedInfo={"rank": 1, "world_size": 8})
    raw, meta = read_kineto([a, b, c])
    assert sorted(set(raw["rank"])) == [1, 3, 5]
    assert meta["ranks"] == [1, 3, 5] and meta["world_size"] == 8
    assert read_kineto([write(tmp_path / "x.json", ev)])[1]["ranks"] == [0]


def test_duplicate_ranks_and_mixed_world_sizes_are_errors(tmp_path):
    ev = [rt("cudaLaunchKernel", 0, 5, 1), kern("k", 6, 5, 1)]
    a = write(tmp_path / "one.json", ev, distributedInfo={"rank": 2, "world_size": 4})
    b = write(tmp_path / "two.json", ev, distributedInfo={"rank": 2, "world_size": 4})
    with pytest.raises(TraceFormatError, match=r"one\.json.*two\.json"):
        kineto.read([a, b])
    c = write(tmp_path / "three.json", ev, distributedInfo={"rank": 3, "world_size": 8})
    with pytest.raises(TraceFormatError, match=r"world size.*one\.json.*three\.json"):
        kineto.read([a, c])


def test_bare_event_array_is_accepted(tmp_path):
    p = tmp_path / "bare.json"
    p.write_text(json.dumps([rt("cudaLaunchKernel", 0, 5, 1), kern("k", 6, 5, 1)]))
    assert (frame(import_kineto([p])[0]).kind == "kernel").sum() == 1


@pytest.mark.parametrize(
    "content,msg",
    [
        (b"", "empty file"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel"', "truncated JSON"),
        (b'{"traceEvents": [}', "invalid JSON"),
        (b'{"foo": 1}', "no 'traceEvents'"),
        (b"[1, 2]", "not an object"),
        (b'{"traceEvents": []}', "empty trace"),
        (b'{"traceEvents": {"a": 1}}', "not an array"),
        (b'{"traceEvents": [{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":0,'
         b'"dur":-3,"args":{"correlation":1}}]}', "negative duration"),
        (b'{"traceEvents": [{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":0,'
         b'"dur":null,"args":{"correlation":1}}]}', "NaN"),
        (b'{"traceEvents": [{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":0,'
         b'"dur":NaN,"args":{"correlation":1}}]}', "NaN"),
    ],
)
def test_bad_inputs_raise_naming_the_file(tmp_path, content, msg):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(TraceFormatError) as err:
        kineto.read([p])
    assert "bad.json" in str(err.value) and msg in str(err.value)


def test_truncated_and_corrupt_gzip(tmp_path):
    data = gzip.compress(json.dumps({"traceEvents": [rt("cudaLaunchKernel", 0, 5, 1)] * 200}).encode())
    t = tmp_path / "trunc.json.gz"
    t.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="trunc.json.gz: truncated gzip"):
        kineto.read([t])
    c = tmp_path / "corrupt.json.gz"
    c.write_bytes(data[:20] + bytes(b ^ 0xFF for b in data[20:60]) + data[60:])
    with pytest.raises(TraceFormatError, match="corrupt.json.gz: "):
        kineto.read([c])
