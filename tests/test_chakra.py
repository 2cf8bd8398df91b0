"""Chakra execution traces: the wire codec (fastrack_core/chakra.py), ``replay export-chakra``
(replay/exporters/chakra.py), the Chakra ET importer and the PyTorch ET + Kineto importer
(tracegen/importers/chakra.py, pytorch_et.py), the round trip, and bad input for both readers."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fastrack_core import chakra as et
from fastrack_core.chakra import Attr, GlobalMetadata, Node, NodeType
from fastrack_core.schema import DepKind
from fastrack_core.traceio import read_trace
from replay.frontend import export as replay_export
from replay.exporters.chakra import CHAKRA, MANIFEST, et_file
from replay.graph import NO_LANE, LaneType
from replay.pipeline.run import replay_trace
from test_build import two_rank_collective
from tracefactory import op, write
from tracegen.cli import main as tracegen_main
from tracegen.importers import chakra, formats, pytorch_et

DATA = Path(__file__).resolve().parent / "data"
KINETO = DATA / "v100_dlrm_8rank"
ET_DIR = DATA / "v100_dlrm_2rank_et"
MB = 1 << 20


def copy_trace():
    """One H2D copy, a kernel, one D2H copy and a stream sync on one thread (a TEE protocol
    encrypts both copies through bounce buffers)."""
    return [
        op("runtime", "cudaMemcpyAsync", 0, 5_000, thread=1, correlation=1),
        op("memcpy", "Memcpy HtoD (Pinned -> Device)", 6_000, 200_000, stream=7, device=0, bytes=2 * MB,
           copy_dir="H2D", host_mem="pinned", deps=[(0, "launch")], correlation=1),
        op("runtime", "cudaLaunchKernel", 5_000, 3_000, thread=1, deps=[(0, "program")], correlation=2),
        op("kernel", "gemm", 206_000, 50_000, stream=7, device=0, deps=[(2, "launch"), (1, "stream")], correlation=2),
        op("runtime", "cudaMemcpyAsync", 8_000, 4_000, thread=1, deps=[(2, "program")], correlation=3),
        op("memcpy", "Memcpy DtoH (Device -> Pinned)", 256_000, 100_000, stream=7, device=0, bytes=MB, copy_dir="D2H",
           host_mem="pinned", deps=[(4, "launch"), (3, "stream")], correlation=3),
        op("sync", "cudaStreamSynchronize", 12_000, 344_500, thread=1, deps=[(4, "program"), (5, "sync")]),
    ]  # fmt: skip


def convert(*args):
    return CliRunner().invoke(tracegen_main, ["convert", *map(str, args)])


def exported(tmp_path, ops, protocol):
    """Replay a hand trace under ``protocol`` and export it; returns (replay, export dir, summary)."""
    trace = write(tmp_path / "t.parquet", ops)
    rep = replay_trace(trace, protocol=protocol)
    out = tmp_path / "chakra"
    summary = replay_export.write_export(CHAKRA, out, rep.graph, rep.schedule, rep.result, trace=str(trace),
                                         protocol=protocol, model_info=rep.result.model)
    return rep, out, summary


# --------------------------------------------------------------------------- the wire codec


def test_codec_round_trips_every_attribute_kind():
    values = {"double": -1.5, "float": 0.5, "int32": -7, "int64": -(1 << 40), "uint32": 7, "uint64": (1 << 63) + 5,
              "sint32": -3, "sint64": -(1 << 50), "fixed32": 9, "fixed64": 1 << 60, "sfixed32": -9,
              "sfixed64": -(1 << 60), "bool": True, "string": "naïve", "bytes": b"\x00\xff"}
    attrs = [Attr(k, k, v) for k, v in values.items()]
    attrs += [Attr(k + "_list", k + "_list", [v, v]) for k, v in values.items()]
    node = Node(id=12, name="n", type=NodeType.COMM_COLL_NODE, ctrl_deps=[1], data_deps=[3, 1 << 40],
                start_time_micros=5, duration_micros=6, inputs=et.IOInfo(values="[1]", shapes="[[]]"), attrs=attrs)
    buf = io.BytesIO()
    et.write_et(buf, GlobalMetadata(version="1.0.0", attrs=[Attr("a", "string", "b")]), [node])
    frames = list(et.messages(buf.getvalue(), "mem"))
    assert len(frames) == 2
    back = et.decode_node(frames[1][1], 0)
    assert (back.id, back.name, back.type, back.ctrl_deps, back.data_deps) == (12, "n", 7, [1], [3, 1 << 40])
    assert (back.start_time_micros, back.duration_micros, back.inputs.values, back.inputs.shapes) == (5, 6, "[1]", "[[]]")
    for a in attrs:
        assert back.attr(a.name) == a.value, a.name
    assert et.decode_metadata(frames[0][1]).attr("a") == "b"


def test_sniff_reads_the_head_only():
    buf = io.BytesIO()  # a GlobalMetadata much longer than any head the sniff reads
    et.write_et(buf, GlobalMetadata(version="1.0.0", attrs=[Attr("lanes", "string_list", ["x" * 50] * 5000)]),
                [Node(id=0, name="k", type=NodeType.COMP_NODE)])
    data = buf.getvalue()
    assert len(data) > 1 << 17 and all(et.looks_like_et(data[:k]) for k in (12, 100, 1 << 16, len(data)))
    for head in (b'{"traceEvents": []}', b"SQLite format 3\x00" + bytes(100), b"PAR1" + bytes(100), b"\x05hello"):
        assert not et.looks_like_et(head)


def test_codec_agrees_with_the_protobuf_package():
    pytest.importorskip("google.protobuf")
    from chakra_pb import messages

    M = messages()
    node = Node(id=3, name="k", type=NodeType.COMP_NODE, data_deps=[1, 2], duration_micros=4,
                attrs=[Attr("tid", "int64", -2), Attr("l", "sint64_list", [-1, 300]), Attr("s", "string_list", ["x"])])
    pb = M["Node"]()
    pb.ParseFromString(et.encode_node(node))
    assert (pb.id, pb.name, pb.type, list(pb.data_deps), pb.duration_micros) == (3, "k", 4, [1, 2], 4)
    assert pb.attr[0].int64_val == -2 and list(pb.attr[1].sint64_list.values) == [-1, 300]
    assert list(pb.attr[2].string_list.values) == ["x"]
    # the other way: what protobuf writes (packed repeated fields, fixed-width values) decodes here
    pb2 = M["Node"](id=9, type=7, data_deps=[5, 6], duration_micros=2)
    pb2.attr.add(name="comm_type").int64_val = 6
    pb2.attr.add(name="f").double_list.values.extend([1.25, -2.0])
    pb2.attr.add(name="u").fixed32_val = 77
    back = et.decode_node(pb2.SerializeToString(), 0)
    assert (back.id, back.type, back.data_deps, back.duration_micros) == (9, 7, [5, 6], 2)
    assert back.attr("comm_type") == 6 and back.attr("f") == [1.25, -2.0] and back.attr("u") == 77


# --------------------------------------------------------------------------- export


def test_export_maps_tee_nodes_to_chakra_types(tmp_path):
    rep, out, summary = exported(tmp_path, copy_trace(), "baseline")
    g = rep.graph
    assert sorted(p.name for p in out.iterdir()) == [et_file(0), MANIFEST]
    meta, nodes = et.read_et(str(out / et_file(0)))
    assert meta.version == "1.0.0" and meta.attr("fastrack_protocol") == "baseline"
    assert [n.id for n in nodes] == list(range(g.n))
    labels = {g.kind_label(int(k)) for k in g.kind}
    assert {"cpu_encrypt", "cpu_decrypt", "pcie"} <= labels  # the TEE operations are there
    for n in nodes:
        i = n.id
        lane = int(g.lane[i])
        ltype = LaneType(int(g.lanes.type[lane])) if lane != NO_LANE else None
        label = g.kind_label(int(g.kind[i]))
        # durations: whole microseconds in the Chakra field, the exact ns in the attribute
        assert n.duration_micros == round(int(g.dur[i]) / 1000) and n.attr("fastrack_dur_ns") == int(g.dur[i])
        assert n.data_deps == [int(s) for s in g.deps_of(i)]
        if ltype == LaneType.PCIE_H2D:
            assert n.type == NodeType.MEM_LOAD_NODE and n.attr("tensor_size") == int(g.bytes[i])
        elif ltype == LaneType.PCIE_D2H:
            assert n.type == NodeType.MEM_STORE_NODE
        elif label in ("cpu_encrypt", "cpu_decrypt", "cpu", "runtime", "sync"):
            assert n.type == NodeType.COMP_NODE and n.attr("is_cpu_op") is True, label
        elif label == "kernel":
            assert n.type == NodeType.COMP_NODE and n.attr("is_cpu_op") is False
    types = summary["node_types"]
    assert sum(types.values()) == g.n and types["MEM_LOAD_NODE"] >= 1 and types["MEM_STORE_NODE"] >= 1
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["nodes"] == g.n and manifest["protocol"] == "baseline"
    assert manifest["approximate_or_lost"]["pool_holds"] == int((g.hold_lane != NO_LANE).sum()) > 0
    assert CHAKRA.done_message(out, summary).startswith(f"wrote {out}: {g.n} nodes in 1 Chakra ET file(s)")


def test_export_collectives_one_file_per_rank(tmp_path):
    rep, out, summary = exported(tmp_path, two_rank_collective(), "captured")
    assert summary["files"] == [et_file(0), et_file(1)]
    colls = []
    for r in (0, 1):
        meta, nodes = et.read_et(str(out / et_file(r)))
        lanes = meta.attr("fastrack_lane_names")
        assert {lanes[n.attr("fastrack_lane")].split("/")[0] for n in nodes} == {f"rank{r}"}
        colls += [n for n in nodes if n.type == NodeType.COMM_COLL_NODE]
    assert len(colls) == 2
    for n in colls:  # type, size and group come from the trace's coll_* columns
        assert n.attr("comm_type") == et.CollectiveCommType.ALL_REDUCE and n.attr("comm_size") == MB
        assert n.attr("pg_name") == "0,1" and n.attr("fastrack_group") == colls[0].attr("fastrack_group")


def test_exporter_refuses_a_directory_with_foreign_files(tmp_path):
    (tmp_path / "chakra").mkdir()
    (tmp_path / "chakra" / "notes.txt").write_text("mine")
    with pytest.raises(Exception, match="does not write"):
        exported(tmp_path, copy_trace(), "captured")
    assert (tmp_path / "chakra" / "notes.txt").read_text() == "mine"
    assert "fastrack.3.et" in CHAKRA.files and MANIFEST in CHAKRA.files and "graph.bin" not in CHAKRA.files


# --------------------------------------------------------------------------- round trip


def _graph_edges(g, i):
    lo, hi = int(g.dep_ptr[i]), int(g.dep_ptr[i + 1])
    return {(int(g.dep_src[e]), int(g.dep_kind[e])) for e in range(lo, hi)}


@pytest.mark.parametrize("ops,protocol", [(copy_trace, "baseline"), (copy_trace, "fastrack"),
                                          (two_rank_collective, "captured")])
def test_round_trip_export_then_import(tmp_path, ops, protocol):
    rep, out, _ = exported(tmp_path, ops(), protocol)
    g = rep.graph
    imp, node_ids = chakra.read_with_ids([out])
    t = imp.table
    assert t.num_rows == g.n and sorted(node_ids) == list(range(g.n))
    node_of = np.asarray(node_ids)
    dur, deps, kinds = t.column("dur_ns").to_numpy(), t.column("deps").to_pylist(), t.column("dep_kinds").to_pylist()
    ranks = t.column("rank").to_numpy()
    for k in range(t.num_rows):
        i = int(node_of[k])
        assert dur[k] == g.dur[i] and ranks[k] == g.rank[i]
        got = {(int(node_of[d]), kd) for d, kd in zip(deps[k], kinds[k]) if kd != DepKind.COLLECTIVE}
        assert got == _graph_edges(g, i), g.node_label(i)
        peers = {int(node_of[d]) for d, kd in zip(deps[k], kinds[k]) if kd == DepKind.COLLECTIVE}
        want = set(np.flatnonzero((g.group == g.group[i]) & (g.rank != g.rank[i])).tolist()) if g.group[i] >= 0 else set()
        assert peers == want
    # what comes back replays (as a captured trace) without error, every node kept
    trace = tmp_path / "back.parquet"
    res = convert(out, "-o", trace)
    assert res.exit_code == 0, res.output
    assert read_trace(trace).metadata["source_format"] == "chakra-et"
    assert replay_trace(trace).result.to_dict()["nodes"] == g.n


def test_foreign_chakra_file_times_and_dependency_kinds(tmp_path):
    # as Chakra's PyTorch converter writes: no start times, ctrl_deps = parent, a metadata node
    nodes = [
        Node(id=1, name="process_group:init", type=NodeType.METADATA_NODE),
        Node(id=2, name="aten::mm", type=NodeType.COMP_NODE, data_deps=[1], duration_micros=10,
             attrs=[Attr("is_cpu_op", "bool", True), Attr("tid", "int64", 1)]),
        Node(id=3, name="gemm", type=NodeType.COMP_NODE, ctrl_deps=[2], data_deps=[2], duration_micros=30,
             attrs=[Attr("is_cpu_op", "bool", False), Attr("stream", "int64", 7)]),
        Node(id=4, name="ncclAllReduce", type=NodeType.COMM_COLL_NODE, data_deps=[3], duration_micros=5,
             attrs=[Attr("is_cpu_op", "bool", False), Attr("stream", "int64", 9), Attr("comm_type", "int64", 0),
                    Attr("comm_size", "int64", 4096)]),
        Node(id=5, name="aten::add", type=NodeType.COMP_NODE, data_deps=[2, 4], duration_micros=2,
             attrs=[Attr("is_cpu_op", "bool", True), Attr("tid", "int64", 1)]),
        # launched by aten::mm too, but its stream is busy with gemm until 40 us (stream from tid)
        Node(id=6, name="gemm2", type=NodeType.COMP_NODE, data_deps=[2], duration_micros=1,
             attrs=[Attr("is_cpu_op", "bool", False), Attr("tid", "int64", 7)]),
    ]
    path = tmp_path / "job.0.et"
    with open(path, "wb") as f:
        et.write_et(f, GlobalMetadata(), nodes)
    assert formats()["chakra"].sniff(path) and not formats()["chakra"].sniff(KINETO)
    imp, ids = chakra.read_with_ids([path])
    t = imp.table
    row = {n: k for k, n in enumerate(ids)}
    start = t.column("start_ns").to_numpy()
    # as soon as possible, one node at a time per thread and per stream
    assert [int(start[row[n]]) for n in (2, 3, 4, 5, 6)] == [0, 10_000, 40_000, 45_000, 40_000]
    kinds = t.column("dep_kinds").to_pylist()
    assert kinds[row[2]] == []  # the metadata node is dropped, the edge through it too
    assert kinds[row[3]] == [DepKind.LAUNCH] and kinds[row[4]] == [DepKind.EVENT]
    assert sorted(kinds[row[5]]) == [DepKind.PROGRAM, DepKind.SYNC]
    deps = t.column("deps").to_pylist()
    assert sorted(zip((ids[d] for d in deps[row[6]]), kinds[row[6]])) == [(2, DepKind.LAUNCH), (3, DepKind.STREAM)]
    assert t.column("stream").to_pylist()[row[6]] == 7
    k4 = row[4]
    assert t.column("kind").to_pylist()[k4] == "collective" and t.column("coll_type").to_pylist()[k4] == "all_reduce"
    assert t.column("coll_bytes").to_pylist()[k4] == 4096


# --------------------------------------------------------------------------- PyTorch ET + Kineto


def test_pytorch_et_detected_and_linked_with_kineto(tmp_path):
    kin = sorted(KINETO.iterdir())[:2]  # ranks 0 and 1
    assert formats()["pytorch-et"].sniff(ET_DIR) and formats()["pytorch-et"].sniff(ET_DIR / "dlrm_eg_0.json.gz")
    assert not formats()["pytorch-et"].sniff(KINETO)
    imp = pytorch_et.read([ET_DIR, *kin])
    for linked, total, colls in imp.link_counts:
        assert total == 1672 and linked == total and colls == 8  # every operator, every collective
    raw = imp.raw[imp.raw["kind"] == 6]
    r0 = raw[raw["rank"] == 0].sort_values("coll_seq")
    # sizes from record_param_comms: all-to-all of 6144 float32, all-reduce of 394241 float32
    assert r0["coll_bytes"].astype(int).tolist()[:5] == [6144 * 4, 24 * 8, 384 * 4, 3392 * 4, 394241 * 4]
    assert r0["coll_seq"].astype(int).tolist() == list(range(147, 155))
    assert r0["coll_type"].tolist()[:5] == ["all_to_all"] * 4 + ["all_reduce"]
    out = tmp_path / "et.parquet"
    res = convert(ET_DIR, *kin, "-o", out)
    assert res.exit_code == 0, res.output
    tr = read_trace(out)
    assert tr.metadata["source_format"] == "pytorch-et" and tr.metadata["ranks"] == [0, 1]
    assert tr.metadata["tool_versions"]["pytorch_et_schema"] == "1.0.1"
    kinds = tr.column("kind")
    assert (tr.column("coll_bytes")[kinds == "collective"] > 0).all()
    # the same ops as the Kineto import alone (the ET adds collective attributes, not ops)
    plain = tmp_path / "k.parquet"
    assert convert(*kin, "-o", plain).exit_code == 0
    assert read_trace(plain).num_ops == tr.num_ops


# --------------------------------------------------------------------------- bad input


def _chakra_bad(tmp: Path) -> dict[str, tuple[Path, str]]:
    good = io.BytesIO()
    et.write_et(good, GlobalMetadata(version="1.0.0"), [Node(id=0, name="k", type=NodeType.COMP_NODE,
                                                             duration_micros=3)] * 1 + [
        Node(id=1, name="k2", type=NodeType.COMP_NODE, data_deps=[0], duration_micros=4)])
    data = good.getvalue()
    wrong_type = io.BytesIO()  # node id sent as a string (wire type 2) instead of a varint
    meta = et.encode_metadata(GlobalMetadata(version="1.0.0"))
    bad_node = b"\x0a\x01x"
    wrong_type.write(bytes([len(meta)]) + meta + bytes([len(bad_node)]) + bad_node)
    version = io.BytesIO()
    et.write_et(version, GlobalMetadata(version="7.1.0"), [Node(id=0, name="k", type=NodeType.COMP_NODE)])
    cases = {
        "truncated": (data[:-3], "truncated Chakra ET"),
        "truncated_gz": (gzip.compress(data)[:-6], "truncated gzip"),
        "wrong_type": (wrong_type.getvalue(), "field 'node 0.id'"),
        "wrong_version": (version.getvalue(), "field 'GlobalMetadata.version'"),
        "json": (b'{"traceEvents": []}', "not a Chakra ET"),
    }
    out = {}
    for name, (blob, msg) in cases.items():
        p = tmp / f"{name}.0.et"
        p.write_bytes(blob)
        out[name] = (p, msg)
    return out


@pytest.mark.parametrize("case", ["truncated", "truncated_gz", "wrong_type", "wrong_version", "json"])
def test_chakra_bad_input_one_line_exit_2_nothing_written(tmp_path, case):
    path, msg = _chakra_bad(tmp_path)[case]
    out = tmp_path / "out.parquet"
    res = convert(path, "-o", out, "--format", "chakra")
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert "\n" not in line and str(path) in line and msg in line, line
    assert not out.exists()


def _et_bad(tmp: Path) -> dict[str, tuple[Path, str]]:
    src = gzip.decompress((ET_DIR / "dlrm_eg_0.json.gz").read_bytes())
    doc = json.loads(src)
    wrong_nodes = dict(doc, nodes={"a": 1})
    wrong_name = dict(doc, nodes=[dict(doc["nodes"][1], name=5)])
    wrong_version = dict(doc, schema="2.0.0")
    cases = {
        "truncated": (gzip.compress(src[: len(src) // 2]), "truncated JSON"),
        "truncated_gz": (gzip.compress(src)[:-100], "truncated gzip"),
        "wrong_type": (json.dumps(wrong_nodes).encode(), "field 'nodes'"),
        "wrong_field_type": (json.dumps(wrong_name).encode(), "field 'name'"),
        "wrong_version": (json.dumps(wrong_version).encode(), "field 'schema'"),
    }
    out = {}
    for name, (blob, msg) in cases.items():
        p = tmp / f"{name}.json.gz" if blob[:2] == b"\x1f\x8b" else tmp / f"{name}.json"
        p.write_bytes(blob)
        out[name] = (p, msg)
    return out


@pytest.mark.parametrize("case", ["truncated", "truncated_gz", "wrong_type", "wrong_field_type", "wrong_version"])
def test_pytorch_et_bad_input_one_line_exit_2_nothing_written(tmp_path, case):
    path, msg = _et_bad(tmp_path)[case]
    out = tmp_path / "out.parquet"
    res = convert(path, sorted(KINETO.iterdir())[0], "-o", out)
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert "\n" not in line and str(path) in line and msg in line, line
    assert not out.exists()


def test_pytorch_et_newer_schema_attrs_and_collectives(tmp_path):
    # the shape of schemas >= 1.0.2: ids and tids in "attrs", inputs as {"values", "shapes", "types"}
    tensor = [10, 11, 0, 1000, 2, "cuda:0"]
    doc = {"schema": "1.1.1-chakra.0.0.4", "pid": 7, "time": "t", "start_ts": 0, "finish_ts": 1, "nodes": [
        {"id": 1, "name": "[pytorch|profiler|execution_trace|thread]", "ctrl_deps": 0,
         "attrs": [{"name": "rf_id", "type": "uint64", "value": 0}, {"name": "tid", "type": "uint64", "value": 1}]},
        {"id": 2, "name": "record_param_comms", "ctrl_deps": 1,
         "inputs": {"values": [[tensor, tensor], 41, ["0", "default_pg"], 0, "allreduce", [], []]},
         "attrs": [{"name": "rf_id", "type": "uint64", "value": 5}, {"name": "tid", "type": "uint64", "value": 1}]}]}
    p = tmp_path / "et.json"
    p.write_text(json.dumps(doc))
    assert pytorch_et.sniff(p)
    got = pytorch_et.read_et(str(p))
    assert [(o.id, o.rf_id, o.tid) for o in got.ops] == [(2, 5, 1)]  # the thread root is not an operator
    assert pytorch_et.collective_info(got.ops[0]) == ("all_reduce", 2 * 1000 * 2, 41)


def test_pytorch_et_format_given_for_a_kineto_file(tmp_path):
    res = convert(sorted(KINETO.iterdir())[0], "-o", tmp_path / "o.parquet", "--format", "pytorch-et")
    assert res.exit_code == 2 and "field 'schema'" in res.output and str(sorted(KINETO.iterdir())[0]) in res.output


def test_pytorch_et_without_kineto_is_refused(tmp_path):
    out = tmp_path / "out.parquet"
    res = convert(ET_DIR / "dlrm_eg_0.json.gz", "-o", out)
    assert res.exit_code == 2 and "no operator timings" in res.output and "Kineto" in res.output
    res = convert(ET_DIR / "dlrm_eg_0.json.gz", sorted(KINETO.iterdir())[1], "-o", out)  # rank 1's Kineto
    assert res.exit_code == 2 and "field 'pid'" in res.output
    assert not out.exists()


def test_export_command_and_entry_point(tmp_path):
    import importlib
    import tomllib

    eps = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    target = eps["project"]["entry-points"]["fastrack.exporters"]["chakra"]
    mod, attr = target.split(":")
    assert getattr(importlib.import_module(mod), attr) is CHAKRA
    trace = write(tmp_path / "t.parquet", copy_trace())
    cmd = replay_export.command_for(CHAKRA)
    assert cmd.name == "export-chakra"
    res = CliRunner().invoke(cmd, [str(trace), "--protocol", "fastrack", "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"wrote {tmp_path / 'out'}: ") and (tmp_path / "out" / et_file(0)).is_file()
    (tmp_path / "file").write_text("x")
    res = CliRunner().invoke(cmd, [str(trace), "-o", str(tmp_path / "file")])
    assert res.exit_code == 2 and "is a file" in res.output
