"""``replay --timeline``: Kineto-shaped Chrome-trace JSON (docs/timelines.md).

The structure is checked without any third-party reader: every track is named, slices on a track
nest, flows pair up launch -> GPU op with matching correlation ids, steps are drawn, and under a
TEE protocol each resource track that is drawn has work on it (cpu_crypto included, where the
crypto runs inline in the calling thread). tests/test_timeline_hta.py loads the same output with
Holistic Trace Analysis where it is installed.
"""

from __future__ import annotations

import gzip
import json
import os
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from replay.frontend.cli import main
from tracefactory import op, write

MIB8 = 8 << 20
TEE_TRACKS = {"pcie_h2d", "pcie_d2h", "ce_secure_h2d", "ce_secure_d2h", "cpu_crypto"}


def step_ops(step: int, base: int, t0: int) -> list[dict]:
    """One training-like step on thread 1 / stream 7: a kernel, an 8 MiB H2D and D2H copy, a sync.
    ``base``: op id of the first op; ``t0``: its start (ns)."""
    b = base
    return [
        op("runtime", "cudaLaunchKernel", t0, 5_000, thread=1, step=step, deps=[(b - 1, "program")] if b else []),
        op("kernel", "gemm", t0 + 6_000, 100_000, stream=7, device=0, step=step, deps=[(b, "launch")]),
        op("runtime", "cudaMemcpyAsync", t0 + 5_000, 5_000, thread=1, step=step, deps=[(b, "program")]),
        op("memcpy", "Memcpy HtoD (Pinned -> Device)", t0 + 106_000, 170_000, stream=7, device=0, bytes=MIB8,
           copy_dir="H2D", host_mem="pinned", step=step, deps=[(b + 2, "launch"), (b + 1, "stream")]),
        op("runtime", "cudaMemcpyAsync", t0 + 10_000, 5_000, thread=1, step=step, deps=[(b + 2, "program")]),
        op("memcpy", "Memcpy DtoH (Device -> Pinned)", t0 + 276_000, 170_000, stream=7, device=0, bytes=MIB8,
           copy_dir="D2H", host_mem="pinned", step=step, deps=[(b + 4, "launch"), (b + 3, "stream")]),
        op("sync", "cudaStreamSynchronize", t0 + 15_000, 432_000, thread=1, step=step,
           deps=[(b + 4, "program"), (b + 5, "sync")]),
    ]


def steps_trace(thread: int = 1) -> list[dict]:
    ops = step_ops(0, 0, 0) + step_ops(1, 7, 500_000)
    for o in ops:
        if o["thread"] == 1:
            o["thread"] = thread
    return ops


def replay_timeline(tmp_path: Path, protocol: str, ops=None, name="tl.json", *extra: str) -> dict:
    trace = write(tmp_path / "t.parquet", ops if ops is not None else steps_trace())
    tl = tmp_path / name
    res = CliRunner().invoke(main, ["--protocol", protocol, str(trace), "--timeline", str(tl), *extra])
    assert res.exit_code == 0, res.output
    raw = tl.read_bytes()
    return json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)


def check_structure(doc: dict) -> dict:
    """Assert what every reader needs; return the parts for further checks."""
    ev = doc["traceEvents"]
    assert doc["schemaVersion"] == 1 and isinstance(doc["distributedInfo"]["rank"], int)
    procs = {e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    for name in threads.values():
        assert name and "-" not in name.split()[-1], name  # no negative thread ids as names
    xs = [e for e in ev if e["ph"] == "X"]
    by_track = defaultdict(list)
    for e in xs:
        assert (e["pid"], e["tid"]) in threads, f"slice {e['name']} on an unnamed track"
        assert e["pid"] in procs and e["dur"] >= 0
        by_track[(e["pid"], e["tid"])].append(e)
    for c in (e for e in ev if e["ph"] == "C"):
        assert c["pid"] in procs
    # slices of one track nest or follow each other (ns precision: compare in integer ns)
    for track, evs in by_track.items():
        stack: list[int] = []
        for e in sorted(evs, key=lambda e: (round(e["ts"] * 1000), -round(e["dur"] * 1000))):
            s, f = round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)
            while stack and stack[-1] <= s:
                stack.pop()
            assert not stack or stack[-1] >= f, f"{e['name']} overlaps without nesting on {threads[track]}"
            stack.append(f)
    assert not [t for t in threads if t not in by_track and threads[t] != "steps"], "empty tracks are named"
    # flows: launch -> GPU op, the id being the correlation id of both (as Kineto writes them, and
    # as TraceLens reads them: the GPU op of a flow is found by (pid, tid, correlation = id)); a
    # call that launched several ops has a pair per op, all with its id
    flows = defaultdict(lambda: {"s": [], "f": []})
    for e in ev:
        if e["ph"] in ("s", "f"):
            assert e["cat"] == "ac2g"
            flows[e["id"]][e["ph"]].append(e)
    for fid, pair in flows.items():
        assert len(pair["s"]) == len(pair["f"]) >= 1 and all(f["bp"] == "e" for f in pair["f"])
        for s, f in zip(pair["s"], pair["f"]):
            launch = [e for e in by_track[(s["pid"], s["tid"])]  # a CUDA call, or a CPU op (a what-if's launcher)
                      if e["ts"] == s["ts"] and e["cat"] in ("cuda_runtime", "cpu_op")]
            gpu = [e for e in by_track[(f["pid"], f["tid"])] if e["ts"] == f["ts"] and "stream" in e["args"]]
            assert launch and gpu, fid
            assert fid in {g["args"]["correlation"] for g in gpu} & {g["args"]["correlation"] for g in launch}
    gpu_ops = [e for e in xs if "stream" in e["args"]]
    for g in gpu_ops:
        assert g["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")
        assert {"device", "stream", "correlation"} <= set(g["args"])
    return {"threads": threads, "by_track": by_track, "flows": flows, "xs": xs, "events": ev}


def test_captured_timeline_is_kineto_shaped(tmp_path):
    parts = check_structure(replay_timeline(tmp_path, "captured"))
    assert len(parts["flows"]) == 6  # every launch: 1 kernel + 2 copies per step
    steps = sorted(e["name"] for e in parts["xs"] if e["name"].startswith("ProfilerStep#"))
    assert steps == ["ProfilerStep#0", "ProfilerStep#1"]
    step = [e for e in parts["xs"] if e["name"] == "ProfilerStep#0"][0]
    assert step["cat"] == "user_annotation" and step["ts"] == 0 and step["dur"] == 447.0  # host work of step 0
    cats = {e["name"]: e["cat"] for e in parts["xs"]}
    assert cats["gemm"] == "kernel" and cats["Memcpy HtoD (Pinned -> Device)"] == "gpu_memcpy"
    assert cats["cudaLaunchKernel"] == "cuda_runtime"
    cp = [e for e in parts["xs"] if e["name"] == "Memcpy HtoD (Pinned -> Device)"][0]
    assert cp["args"]["bytes"] == MIB8 and cp["args"]["memory bandwidth (GB/s)"] == pytest.approx(MIB8 / 170_000)
    assert {"thread 1", "stream 7", "steps"} == set(parts["threads"].values())  # no TEE tracks without a TEE


def test_baseline_timeline_draws_every_tee_resource(tmp_path):
    parts = check_structure(replay_timeline(tmp_path, "baseline"))
    names = parts["threads"]
    tee = {n for (pid, tid), n in names.items() if n in TEE_TRACKS}
    assert tee == TEE_TRACKS
    for track, n in names.items():
        if n in TEE_TRACKS:
            assert parts["by_track"][track], f"{n} is empty"
    host = [k for k, n in names.items() if n == "thread 1"][0]
    crypto = [k for k, n in names.items() if n == "cpu_crypto"][0]
    host_enc = sorted(e["ts"] for e in parts["by_track"][host] if e["name"] == "cpu_encrypt")
    crypto_enc = [e for e in parts["by_track"][crypto] if e["name"] == "cpu_encrypt"]
    # inline crypto: on the thread that ran it, and the same slices on the cpu_crypto track, marked
    assert host_enc and sorted(e["ts"] for e in crypto_enc) == host_enc
    assert all(e["args"]["mirror_of"] == "thread 1" for e in crypto_enc)
    assert {e["name"] for e in parts["by_track"][crypto]} == {"cpu_encrypt", "cpu_decrypt", "cpu_recrypt"}
    # the bounce-slot counter: in the TEE process, starts at 1, never negative, back to 0
    counter = [e for e in parts["events"] if e["ph"] == "C"]
    assert counter and {e["name"] for e in counter} == {"bounce slots in use"}
    values = [e["args"]["slots"] for e in sorted(counter, key=lambda e: e["ts"])]
    assert values[0] == 1 and min(values) >= 0 and values[-1] == 0
    assert {e["pid"] for e in counter} == {crypto[0]}
    # a staged copy is drawn over the time its stream was held, and the flow lands on it
    h2d = [e for e in parts["xs"] if e["name"] == "Memcpy HtoD (Pinned -> Device)"]
    assert h2d and all(e["dur"] > 0 and e["args"]["staged"] for e in h2d)
    assert len(parts["flows"]) == 6


def test_crypto_pool_overlaps_go_on_sub_tracks(tmp_path):
    parts = check_structure(replay_timeline(tmp_path, "baseline", None, "tl.json", "--set", "cpu_crypto.threads=4"))
    crypto = sorted(n for n in parts["threads"].values() if n.startswith("cpu_crypto"))
    assert crypto[0] == "cpu_crypto" and len(crypto) >= 2 and crypto[1] == "cpu_crypto #1"


def test_gzip_when_the_name_ends_in_gz(tmp_path):
    plain = replay_timeline(tmp_path, "baseline", None, "tl.json")
    (tmp_path / "t.parquet").unlink()
    packed = replay_timeline(tmp_path, "baseline", None, "tl.json.gz")
    assert (tmp_path / "tl.json.gz").read_bytes()[:2] == b"\x1f\x8b"
    assert packed == plain


def test_thread_without_id_is_named_not_negative(tmp_path):
    parts = check_structure(replay_timeline(tmp_path, "baseline", steps_trace(thread=-1)))
    names = set(parts["threads"].values())
    assert "host thread (no id in the trace)" in names and not any("thread -" in n for n in names)


def _run(tmp_path, *args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_timeline_output_path_rules(tmp_path):
    trace = write(tmp_path / "t.parquet", steps_trace())
    before = trace.read_bytes()
    for over in ([], ["--overwrite"]):  # the trace itself: refused even with --overwrite
        res = _run(tmp_path, trace, "--timeline", trace, *over)
        assert res.exit_code == 2 and "same file as the input" in res.output
        assert len(res.output.strip().splitlines()) == 1 and trace.read_bytes() == before
    tl = tmp_path / "tl.json"
    tl.write_text("old")
    res = _run(tmp_path, trace, "--timeline", tl)
    assert res.exit_code == 2 and "--overwrite" in res.output and tl.read_text() == "old"
    res = _run(tmp_path, trace, "--timeline", tl, "--overwrite")
    assert res.exit_code == 0 and json.loads(tl.read_text())["traceEvents"]
    link = tmp_path / "link.json"
    os.symlink(tl, link)
    res = _run(tmp_path, trace, "--timeline", link, "--overwrite")
    assert res.exit_code == 2 and "symbolic link" in res.output
    folder = tmp_path / "dir.json"
    folder.mkdir()
    res = _run(tmp_path, trace, "--timeline", folder, "--overwrite")
    assert res.exit_code == 2 and "directory" in res.output
    fifo = tmp_path / "fifo.json"  # a non-regular file of our own (never a system path such as /dev/null)
    os.mkfifo(fifo)
    res = _run(tmp_path, trace, "--timeline", fifo, "--overwrite")
    assert res.exit_code == 2 and "FIFO" in res.output


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch):
    import replay.exporters.timeline.chrome as chrome

    def broken(layout, pids):
        yield ["{}"]
        raise RuntimeError("disk full")

    monkeypatch.setattr(chrome, "_counters", broken)
    trace = write(tmp_path / "t.parquet", steps_trace())
    res = _run(tmp_path, "--protocol", "baseline", trace, "--timeline", tmp_path / "tl.json.gz")
    assert res.exit_code != 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


def _pftrace_packets(tmp_path, protocol="baseline"):
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2",
                             reason="the perfetto package is not installed (pip install '.[perfetto]')")
    trace = write(tmp_path / "t.parquet", steps_trace())
    out = tmp_path / "tl.pftrace"
    res = CliRunner().invoke(main, ["--protocol", protocol, str(trace), "--timeline", str(out)])
    assert res.exit_code == 0, res.output
    return pb, pb.Trace.FromString(out.read_bytes()).packet


def test_pftrace_is_a_well_formed_perfetto_trace(tmp_path):
    pb, packets = _pftrace_packets(tmp_path)
    TE = pb.TrackEvent
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in packets if p.HasField("track_descriptor")}
    names = {p.track_descriptor.thread.thread_name for p in packets if p.track_descriptor.HasField("thread")}
    assert TEE_TRACKS | {"thread 1", "stream 7", "steps"} <= names
    interned = [p for p in packets if p.HasField("interned_data")]
    assert len(interned) == 1
    event_names = {e.iid: e.name for e in interned[0].interned_data.event_names}
    open_slices: dict[int, list[int]] = defaultdict(list)
    flows_out, flows_in, seen_names, last_ts = [], [], set(), -1
    counters = []
    for p in packets:
        if not p.HasField("track_event"):
            continue
        ev = p.track_event
        assert p.timestamp >= last_ts, "events out of time order"
        last_ts = p.timestamp
        assert ev.track_uuid in tracks
        if ev.type == TE.TYPE_SLICE_BEGIN:
            open_slices[ev.track_uuid].append(p.timestamp)
        elif ev.type == TE.TYPE_SLICE_END:
            assert open_slices[ev.track_uuid], "an end without a begin"
            open_slices[ev.track_uuid].pop()
        elif ev.type == TE.TYPE_COUNTER:
            counters.append(ev.counter_value)
            continue
        if ev.type != TE.TYPE_SLICE_END:
            seen_names.add(event_names[ev.name_iid])
            flows_out += list(ev.flow_ids)
            flows_in += list(ev.terminating_flow_ids)
    assert not any(open_slices.values()), "a begin without an end"
    assert sorted(flows_out) == sorted(flows_in) and len(flows_out) == 6
    assert {"ProfilerStep#0", "ProfilerStep#1", "cpu_encrypt", "pcie", "gemm"} <= seen_names
    assert counters and counters[-1] == 0 and max(counters) >= 1


def test_pftrace_needs_no_package(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_perfetto(name, *args, **kwargs):
        if name.startswith("perfetto"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_perfetto)
    trace = write(tmp_path / "t.parquet", steps_trace())
    res = _run(tmp_path, trace, "--timeline", tmp_path / "tl.pftrace")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "tl.pftrace").read_bytes()[:1] == b"\x0a"  # Trace.packet, field 1, length-delimited


def test_protobuf_varints_by_hand():
    import numpy as np

    from replay.exporters.timeline.pftrace import _concat, _const, _tagged, _varint, _varints

    # the examples of the protobuf encoding guide: 1 -> 01, 150 -> 96 01; int64 -1 -> ten bytes
    assert _varint(1) == b"\x01" and _varint(150) == b"\x96\x01" and _varint(-1) == b"\xff" * 9 + b"\x01"
    values = (1, 150, 0, -1, 1 << 35)
    mat, lens = _varints(np.array(values, np.int64))
    assert lens.tolist() == [1, 2, 1, 10, 6]
    assert _concat([(mat, lens)]).tobytes() == b"".join(_varint(v) for v in values)
    # rows: a constant on rows 0 and 2 only, then each row's field 1 (tag 08) where present
    out = _concat([_const(b"\xaa", np.array([True, False, True])),
                   _tagged(b"\x08", np.array([3, 300, 5]), np.array([True, True, False]))])
    assert out.tobytes() == b"\xaa\x08\x03" + b"\x08\xac\x02" + b"\xaa"


def test_data_parallel_timeline_has_a_process_set_per_rank(tmp_path):
    ops = steps_trace() + [  # gradient-ready markers (docs/conventions.md) after each step's backward
        op("cpu", "AccumulateGrad", 447_000, 1_000, thread=1, bytes=4 << 20, step=0, deps=[(6, "program")]),
        op("cpu", "AccumulateGrad", 947_000, 1_000, thread=1, bytes=4 << 20, step=1, deps=[(13, "program")]),
    ]
    doc = replay_timeline(tmp_path, "baseline", ops, "tl.json", "--data-parallel", "2")
    parts = check_structure(doc)
    assert doc["distributedInfo"] == {"rank": 0, "world_size": 2}
    procs = {e["args"]["name"] for e in parts["events"] if e["ph"] == "M" and e["name"] == "process_name"}
    for r in (0, 1):
        assert {f"rank {r} host (replayed: baseline)", f"rank {r} GPU 0", f"rank {r} TEE resources (baseline)"} <= procs
    assert len(parts["flows"]) == 16  # per rank: 6 launches + one all-reduce per step (launched by the marker)


def test_real_profile_replays_to_a_valid_timeline(tmp_path):
    from tracegen.convert import convert

    data = Path(__file__).resolve().parent / "data" / "h100_bert_small_uncased.json.gz"
    trace = tmp_path / "bert.parquet"
    convert([data], trace)
    tl = tmp_path / "tl.json.gz"
    res = CliRunner().invoke(main, ["--protocol", "baseline", str(trace), "--timeline", str(tl)])
    assert res.exit_code == 0, res.output
    parts = check_structure(json.loads(gzip.decompress(tl.read_bytes())))
    assert any(e["name"].startswith("ProfilerStep#") for e in parts["xs"])
    assert parts["flows"] and "cpu_crypto" in parts["threads"].values()


def dp_ops() -> list[dict]:
    return steps_trace() + [  # gradient-ready markers (docs/conventions.md) after each step's backward
        op("cpu", "AccumulateGrad", 447_000, 1_000, thread=1, bytes=4 << 20, step=0, deps=[(6, "program")]),
        op("cpu", "AccumulateGrad", 947_000, 1_000, thread=1, bytes=4 << 20, step=1, deps=[(13, "program")]),
    ]


def test_collectives_are_named_and_described_as_nccl_kernels(tmp_path):
    import re

    parts = check_structure(replay_timeline(tmp_path, "baseline", dp_ops(), "tl.json", "--data-parallel", "2"))
    coll = [e for e in parts["xs"] if e["name"].startswith("nccl")]
    assert len(coll) == 4  # one all-reduce per step on each of the 2 ranks
    for e in coll:
        assert re.match(r"^nccl.*Kernel", e["name"])  # what HTA counts as communication
        assert e["name"] == "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
        a = e["args"]
        assert e["cat"] == "kernel" and a["Collective name"] == "allreduce"
        assert a["Process Group Ranks"] == [0, 1] and a["Group size"] == 2 and a["dtype"] == "Float"
        assert a["In msg nelems"] == a["Out msg nelems"] == a["bytes"] // 4  # fp32 elements of the bucket
    assert not [e for e in parts["xs"] if e["name"] == "nccl:all_reduce"]


def test_nccl_names_keep_a_trace_s_own():
    from replay.exporters.timeline.layout import nccl_name

    real = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
    assert nccl_name(real) == real
    assert nccl_name("nccl:all_gather").startswith("ncclDevKernel_AllGather_RING_LL(")
    assert nccl_name("reduce_scatter").startswith("ncclDevKernel_ReduceScatter_Sum_f32_")
    assert nccl_name("nccl:send") == nccl_name("recv") == "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"


def test_host_thread_crypto_is_cpu_work_its_mirror_is_tee(tmp_path):
    parts = check_structure(replay_timeline(tmp_path, "baseline"))
    names = parts["threads"]
    host = [k for k, n in names.items() if n == "thread 1"][0]
    crypto = [k for k, n in names.items() if n == "cpu_crypto"][0]
    assert {e["cat"] for e in parts["by_track"][host] if e["name"].startswith("cpu_")} == {"cpu_op"}
    assert {e["cat"] for e in parts["by_track"][crypto]} == {"tee"}


def test_rank_pattern_writes_one_file_per_rank(tmp_path):
    trace = write(tmp_path / "t.parquet", dp_ops())
    res = _run(tmp_path, "--protocol", "baseline", trace, "--data-parallel", "2",
               "--timeline", tmp_path / "tl.{rank}.json.gz")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet", "tl.0.json.gz", "tl.1.json.gz"]
    (tmp_path / "whole").mkdir()
    whole = replay_timeline(tmp_path / "whole", "baseline", dp_ops(), "tl.json", "--data-parallel", "2")
    total = 0
    for r in (0, 1):
        doc = json.loads(gzip.decompress((tmp_path / f"tl.{r}.json.gz").read_bytes()))
        parts = check_structure(doc)
        assert doc["distributedInfo"] == {"rank": r, "world_size": 2}
        procs = {e["args"]["name"] for e in parts["events"] if e["ph"] == "M" and e["name"] == "process_name"}
        assert procs == {f"rank {r} host (replayed: baseline)", f"rank {r} GPU 0", f"rank {r} TEE resources (baseline)"}
        assert len(parts["flows"]) == 8
        total += len(doc["traceEvents"])
    assert total == len(whole["traceEvents"])  # the files split the one-file timeline, nothing lost or added


def test_rank_pattern_on_one_rank_writes_one_file_and_says_so(tmp_path):
    trace = write(tmp_path / "t.parquet", steps_trace())
    res = CliRunner().invoke(main, [str(trace), "--timeline", str(tmp_path / "tl.{rank}.json")])
    assert res.exit_code == 0, res.output
    assert "one rank" in res.output and "tl.0.json" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet", "tl.0.json"]


def test_rank_pattern_refuses_an_existing_rank_file_before_work(tmp_path):
    trace = write(tmp_path / "t.parquet", dp_ops())
    (tmp_path / "tl.1.json").write_text("old")
    res = _run(tmp_path, "--protocol", "baseline", trace, "--data-parallel", "2", "--timeline", tmp_path / "tl.{rank}.json")
    assert res.exit_code == 2 and "--overwrite" in res.output and len(res.output.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet", "tl.1.json"]
    assert (tmp_path / "tl.1.json").read_text() == "old"


def test_rank_files_are_all_or_nothing(tmp_path, monkeypatch):
    import replay.exporters.timeline.chrome as chrome

    real = chrome.write_chrome

    def second_fails(f, graph, sched, layout, protocol, extra, rank=None):
        if rank == 1:
            raise RuntimeError("disk full")
        return real(f, graph, sched, layout, protocol, extra, rank)

    monkeypatch.setattr(chrome, "write_chrome", second_fails)
    trace = write(tmp_path / "t.parquet", dp_ops())
    res = _run(tmp_path, "--protocol", "baseline", trace, "--data-parallel", "2", "--timeline", tmp_path / "tl.{rank}.json")
    assert res.exit_code != 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


def test_what_tracelens_reads(tmp_path):
    """TraceLens (AMD-AGI/TraceLens, not on the package index) as its source reads a trace:
    TraceToTree takes ``correlation`` as the linking key when the first launch call has one,
    maps ``ac2g`` starts and ends by id, and finds a launch's GPU op at (the end's pid, tid, id)
    among events keyed by (pid, tid, correlation); NcclAnalyser keeps ``kernel`` events whose
    name holds "nccl" and that carry a correlation, and reads their collective members."""
    import re

    doc = replay_timeline(tmp_path, "baseline", dp_ops(), "tl.json", "--data-parallel", "2")
    ev = doc["traceEvents"]
    first_launch = next(e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
                        and "launch" in e.get("name", "").lower())
    assert "correlation" in first_launch["args"]
    starts = {e["id"]: e for e in ev if e.get("cat") == "ac2g" and e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e.get("cat") == "ac2g" and e["ph"] == "f"}
    keyed = {(e["pid"], e["tid"], e["args"]["correlation"]): e for e in ev
             if e["ph"] == "X" and "correlation" in e.get("args", {})}
    runtime = [e for e in ev if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") in starts]
    linked = [keyed.get((ends[c]["pid"], ends[c]["tid"], c)) for c in (e["args"]["correlation"] for e in runtime)]
    assert runtime and all(g is not None and g["cat"] in ("kernel", "gpu_memcpy", "gpu_memset") for g in linked)
    assert len(linked) == 12  # per rank: a kernel launch and two copies per step, two steps
    nccl = [e for e in ev if e.get("cat") == "kernel" and re.search("nccl", e["name"], re.I)
            and e["args"].get("correlation") is not None]
    assert len(nccl) == 4
    members = {"Process Group Name", "Process Group Ranks", "Collective name", "Group size", "dtype",
               "In msg nelems", "Out msg nelems", "In split size", "Out split size", "stream"}
    assert all(members <= set(e["args"]) for e in nccl)


def test_sub_tracks_match_the_plain_greedy_pass():
    """The sub-track pass skips the lone slices of a track (docs/timelines.md, "Speed"); it must
    assign what the greedy pass over every slice assigns."""
    import numpy as np

    from replay.exporters.timeline.layout import _split_overlaps

    def greedy(track, start, finish, nodes):
        sub = np.zeros(nodes.size, np.int32)
        order = np.lexsort((nodes, -finish[nodes], start[nodes], track))
        stacks_of: dict[int, list[list[int]]] = {}
        for p in order.tolist():
            stacks = stacks_of.setdefault(int(track[p]), [])
            s, f = int(start[nodes[p]]), int(finish[nodes[p]])
            for k, stack in enumerate(stacks):
                while stack and stack[-1] <= s:
                    stack.pop()
                if not stack or stack[-1] >= f:
                    stack.append(f)
                    sub[p] = k
                    break
            else:
                stacks.append([f])
                sub[p] = len(stacks) - 1
        return sub

    rng = np.random.default_rng(7)
    for _ in range(30):
        n = int(rng.integers(2, 60))
        start = rng.integers(0, 100, n)
        finish = start + rng.integers(0, 30, n)
        track = rng.integers(0, 3, n)
        nodes = np.arange(n)
        assert _split_overlaps(track, start, finish, nodes).tolist() == greedy(track, start, finish, nodes).tolist()
