"""``replay --timeline``: Kineto-shaped Chrome-trace JSON (docs/architecture.md, "Timelines").

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
    # flows: one start and one end per id, launch -> GPU op, correlation ids equal
    flows = defaultdict(dict)
    for e in ev:
        if e["ph"] in ("s", "f"):
            assert e["cat"] == "ac2g" and e["ph"] not in flows[e["id"]]
            flows[e["id"]][e["ph"]] = e
    for fid, pair in flows.items():
        assert set(pair) == {"s", "f"} and pair["f"]["bp"] == "e"
        s, f = pair["s"], pair["f"]
        launch = [e for e in by_track[(s["pid"], s["tid"])]  # a CUDA call, or a CPU op (a what-if's launcher)
                  if e["ts"] == s["ts"] and e["cat"] in ("cuda_runtime", "cpu_op")]
        gpu = [e for e in by_track[(f["pid"], f["tid"])] if e["ts"] == f["ts"] and "stream" in e["args"]]
        assert launch and gpu, fid
        assert {g["args"]["correlation"] for g in gpu} & {g["args"]["correlation"] for g in launch}
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

    def broken(layout):
        yield "{}"
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


def test_pftrace_without_the_package_is_one_line_exit_2(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_perfetto(name, *args, **kwargs):
        if name.startswith("perfetto"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_perfetto)
    trace = write(tmp_path / "t.parquet", steps_trace())
    res = _run(tmp_path, trace, "--timeline", tmp_path / "tl.pftrace")
    assert res.exit_code == 2 and "perfetto package" in res.output and len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "tl.pftrace").exists()


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
