"""tracegen info: exact numbers on a hand-made trace, and clean errors."""

from __future__ import annotations

import json
import os
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from fastrack_core.schema import DepKind
from fastrack_core.traceio import make_table, write_trace
from tracegen.cli import main
from tracegen.info import format_bytes, format_ns

P, L, S = int(DepKind.PROGRAM), int(DepKind.LAUNCH), int(DepKind.SYNC)

META = {
    "source_format": "kineto-json",
    "source_files": ["/home/someone/run/trace.json"],
    "capture_tool": "PyTorch Profiler",
    "tool_versions": {"pytorch": "2.13.0", "cuda_runtime": "12.8"},
    "gpu_model": "NVIDIA H100 80GB HBM3",
    "world_size": 4,
    "emulated": False,
    "trace_name": "five ops",
}


@pytest.fixture
def five(tmp_path):
    """rank 0: cpu -> cudaMemcpyAsync -> H2D pinned copy (4 KiB); rank 1: a D2H pageable copy of
    1000 bytes and the cudaStreamSynchronize that waits for it."""
    table = make_table({
        "op_id": [0, 1, 2, 3, 4],
        "rank": [0, 0, 0, 1, 1],
        "device": [-1, 0, 0, 1, 1],
        "thread": [11, 11, -1, -1, 22],
        "stream": [-1, -1, 7, 7, -1],
        "kind": ["cpu", "runtime", "memcpy", "memcpy", "sync"],
        "name": ["cpu", "cudaMemcpyAsync", "Memcpy HtoD", "Memcpy DtoH", "cudaStreamSynchronize"],
        "start_ns": [0, 100, 200, 0, 500],
        "dur_ns": [100, 50, 300, 1000, 700],
        "bytes": [0, 0, 4096, 1000, 0],
        "copy_dir": [None, None, "H2D", "D2H", None],
        "host_mem": [None, None, "pinned", "pageable", None],
        "correlation": [-1, 9, 9, -1, -1],
        "step": [1, 1, 1, -1, -1],
        "deps": [[], [0], [1], [], [3]],
        "dep_kinds": [[], [P], [L], [], [S]],
    })
    path = tmp_path / "five.parquet"
    write_trace(path, table, META)
    return path


def _info(*args):
    return CliRunner().invoke(main, ["info", *map(str, args)])


def test_info_json_exact(five):
    res = _info(five, "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["ops"] == 5
    assert d["ops_by_kind"] == {"cpu": 1, "runtime": 1, "sync": 1, "kernel": 0, "memcpy": 2, "memset": 0,
                                "collective": 0}
    assert d["copies"] == {
        "D2H": {"count": 1, "bytes": 1000, "by_host_mem": {"pageable": {"count": 1, "bytes": 1000}}},
        "H2D": {"count": 1, "bytes": 4096, "by_host_mem": {"pinned": {"count": 1, "bytes": 4096}}},
    }
    assert d["ranks"] == [0, 1]
    assert d["world_size"] == 4
    assert d["span_by_rank"] == {
        "0": {"ops": 3, "start_ns": 0, "end_ns": 500, "span_ns": 500, "span": "500 ns"},
        "1": {"ops": 2, "start_ns": 0, "end_ns": 1200, "span_ns": 1200, "span": "1.200 us"},
    }
    assert d["deps"] == 3
    assert d["deps_by_kind"] == {"program": 1, "launch": 1, "stream": 0, "event": 0, "sync": 1, "collective": 0,
                                 "data": 0, "resource": 0}
    assert d["steps"] == {"count": 1, "first": 1, "last": 1, "ops_in_steps": 3}
    m = d["metadata"]
    assert m["source_format"] == "kineto-json"
    assert m["source_files"] == ["trace.json"]  # base names only
    assert m["capture_tool"] == "PyTorch Profiler"
    assert m["tool_versions"] == {"pytorch": "2.13.0", "cuda_runtime": "12.8"}
    assert m["gpu_model"] == "NVIDIA H100 80GB HBM3"
    assert m["emulated"] is False
    assert m["trace_name"] == "five ops"
    assert m["schema_version"] == 1
    assert m["ranks"] == [0, 1]


def test_info_table(five):
    res = _info(five)
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "ops: 5" in out
    assert "kineto-json" in out and "PyTorch Profiler" in out and "NVIDIA H100 80GB HBM3" in out
    assert "no (real hardware)" in out
    assert "ranks: 2 present of world size 4" in out
    assert "1.200 us" in out and "dependencies: 3" in out
    assert "steps: 1 (#1 .. #1), 3 op(s) inside a step" in out
    lines = out.splitlines()
    assert any(ln.split()[:4] == ["H2D", "all", "1", "4096"] for ln in lines)
    assert any(ln.split()[:4] == ["pageable", "1", "1000", "1000"] for ln in lines)


def test_info_on_synthetic_trace_is_consistent(tmp_path):
    path = tmp_path / "r.parquet"
    res = CliRunner().invoke(main, ["synth", "random", "--ops", "2000", "--seed", "2", "--ranks", "2", "-o", str(path)])
    assert res.exit_code == 0, res.output
    d = json.loads(_info(path, "--json").stdout)
    assert d["ops"] == 2000 and sum(d["ops_by_kind"].values()) == 2000
    assert sum(c["count"] for c in d["copies"].values()) == d["ops_by_kind"]["memcpy"]
    assert sum(s["ops"] for s in d["span_by_rank"].values()) == 2000
    assert d["metadata"]["source_format"] == "synthetic" and d["metadata"]["emulated"] is True
    t = pq.read_table(path, columns=["deps"])
    assert d["deps"] == sum(len(x) for x in t.column("deps").to_pylist())


def _one_line_error(res, path):
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith("error: ") and str(path) in res.stderr


def test_info_missing_file(tmp_path):
    path = tmp_path / "nope.parquet"
    res = _info(path)
    _one_line_error(res, path)
    assert "no such file" in res.stderr


def test_info_not_parquet(tmp_path):
    path = tmp_path / "junk.parquet"
    path.write_text("this is not parquet\n" * 10)
    res = _info(path, "--json")
    _one_line_error(res, path)
    assert "not a Parquet file" in res.stderr


def test_info_fifo_or_directory_is_refused_not_read(tmp_path):
    fifo = tmp_path / "pipe.parquet"
    os.mkfifo(fifo)  # the Parquet reader would block on it until a writer came
    writer = threading.Thread(target=lambda: os.close(os.open(fifo, os.O_WRONLY)), daemon=True)
    writer.start()  # so that a wrong open fails the test instead of hanging it
    try:
        res = _info(fifo)
        _one_line_error(res, fifo)
        assert "FIFO" in res.stderr
    finally:
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        writer.join(5)
    res = _info(tmp_path)
    _one_line_error(res, tmp_path)
    assert "directory" in res.stderr


def test_info_parquet_without_fastrack_metadata(tmp_path):
    path = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), path)
    res = _info(path)
    _one_line_error(res, path)
    assert "fastrack" in res.stderr


@pytest.mark.parametrize("ns,text", [(0, "0 ns"), (999, "999 ns"), (1200, "1.200 us"), (12_345_678, "12.346 ms"),
                                     (2_500_000_000, "2.500 s")])
def test_format_ns(ns, text):
    assert format_ns(ns) == text


@pytest.mark.parametrize("n,text", [(812, "812 B"), (4096, "4.00 KiB"), (3 << 29, "1.50 GiB")])
def test_format_bytes(n, text):
    assert format_bytes(n) == text
