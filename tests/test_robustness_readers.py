"""Every reader bounded: structural bombs of a few KB to MB (the reported reproducers, scaled or
built from repeated gzip members so they stay small on disk) end in one line naming the limit,
or are read in bounded work, never in a traceback. Each runs ``tracegen convert`` in a child
process under an address-space limit (``resource.setrlimit``) and a time limit; limits the
tests lower to stay fast are lowered in the child only (docs/robustness.md "Reader limits")."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from fastrack_core.chakra import GlobalMetadata, Node, NodeType, write_et
from fastrack_core.schema import MAX_DEPS_PER_NODE, MAX_EVENT_BYTES, MAX_NAME_CHARS

MEM_LIMIT = 2 << 30  # address space of the child (imports take ~1 GiB of it)
SECRET = "tok_SECRET_4567"

_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({mem}, {mem}))
{patch}
from tracegen.cli import main
sys.argv = ["tracegen"] + {args!r}
main()
"""


def convert(inputs, out, *, patch: str = "", env: dict | None = None, timeout: int = 120):
    args = ["convert", *map(str, inputs), "-o", str(out)]
    code = _CHILD.format(mem=MEM_LIMIT, patch=patch, args=args)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **(env or {})})
    return res.returncode, res.stdout, res.stderr


def refused(inputs, out, *words, **kw):
    code, _, err = convert(inputs, out, **kw)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err[-2000:])
    assert not Path(out).exists() and SECRET not in err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def members(*parts: tuple[bytes, int]) -> bytes:
    """A multi-member gzip stream: each (block, times) compressed once and repeated, so a few MB
    on disk decompress to GiB."""
    out = []
    for block, times in parts:
        member = gzip.compress(block, compresslevel=9, mtime=0)
        out.append(member * times)
    return b"".join(out)


# --------------------------------------------------------------------------- Chakra ET


def _et(path: Path, nodes: list[Node]) -> Path:
    with open(path, "wb") as f:
        write_et(f, GlobalMetadata(version="0.0.4"), nodes)
    return path


def _comp(i: int, deps=(), dur=5) -> Node:
    return Node(id=i, name=f"k{i} {SECRET}", type=NodeType.COMP_NODE, data_deps=list(deps), duration_micros=dur)


def test_chakra_layers_of_no_work_nodes_bridge_to_their_distinct_ends(tmp_path):
    """48 layers of two metadata nodes, each depending on both of the layer before: 2^48 paths,
    one distinct end (reported: a 1,184-byte file took 3.1 GB and died in MemoryError)."""
    nodes = [_comp(0)]
    prev = [0]
    nid = 1
    for _ in range(48):
        layer = [nid, nid + 1]
        nodes += [Node(id=i, type=NodeType.METADATA_NODE, data_deps=list(prev)) for i in layer]
        prev, nid = layer, nid + 2
    nodes.append(_comp(nid, prev))
    p = _et(tmp_path / "layers.0.et", nodes)
    assert p.stat().st_size < 2000
    code, _, err = convert([p], tmp_path / "t.parquet", timeout=60)
    assert code == 0, err[-2000:]
    from fastrack_core.traceio import read_trace

    t = read_trace(tmp_path / "t.parquet").table.to_pydict()
    assert t["deps"][1] == [0] or t["deps"][0] == [1]  # the last node depends on the first, once
    assert sum(map(len, t["deps"])) == 1


def test_chakra_a_long_chain_of_no_work_nodes_needs_no_recursion(tmp_path):
    nodes = [_comp(0)] + [Node(id=i, type=NodeType.METADATA_NODE, data_deps=[i - 1]) for i in range(1, 20_001)]
    nodes.append(_comp(20_001, [20_000]))
    code, _, err = convert([_et(tmp_path / "chain.0.et", nodes)], tmp_path / "t.parquet", timeout=60)
    assert code == 0, err[-2000:]


def test_chakra_fan_in_beyond_the_limit_is_refused(tmp_path):
    n = MAX_DEPS_PER_NODE + 1
    nodes = [_comp(i) for i in range(n)] + [_comp(n, range(n))]
    refused([_et(tmp_path / "fan.0.et", nodes)], tmp_path / "t.parquet", "MAX_DEPS_PER_NODE")


def test_chakra_fan_in_through_no_work_nodes_is_refused(tmp_path):
    """Each no-work node is within the fan-in limit; what it bridges to is not."""
    half = MAX_DEPS_PER_NODE // 2 + 1
    nodes = [_comp(i) for i in range(2 * half)]
    nodes += [Node(id=10**6, type=NodeType.METADATA_NODE, data_deps=list(range(half))),
              Node(id=10**6 + 1, type=NodeType.METADATA_NODE, data_deps=list(range(half, 2 * half))),
              _comp(10**6 + 2, [10**6, 10**6 + 1])]
    refused([_et(tmp_path / "fan2.0.et", nodes)], tmp_path / "t.parquet", "bridges to more than", "MAX_DEPS_PER_NODE")


def test_chakra_gzip_bomb_is_refused_at_the_decompressed_limit(tmp_path):
    body = tmp_path / "b.et"
    _et(body, [_comp(0)])
    p = tmp_path / "bomb.0.et.gz"
    p.write_bytes(gzip.compress(body.read_bytes()) + members((b"\0" * (1 << 20), 8)))
    patch = "import fastrack_core.chakra as c; c.read_bytes.__defaults__ = (4 << 20,)"
    refused([p], tmp_path / "t.parquet", "decompresses to more than 4,194,304 bytes", "MAX_DECOMPRESSED_BYTES",
            patch=patch)


def test_chakra_a_name_beyond_the_limit_is_refused(tmp_path):
    node = _comp(0)
    node.name = "n" * (MAX_NAME_CHARS + 1)
    refused([_et(tmp_path / "name.0.et", [node])], tmp_path / "t.parquet", "MAX_NAME_CHARS")


def test_chakra_without_durations_is_refused(tmp_path):
    """What Chakra's PyTorch converter may write: no node carries a duration. Replayed, it would
    take 0 ns; refused with one line instead."""
    nodes = [_comp(0, dur=0), _comp(1, [0], dur=0)]
    refused([_et(tmp_path / "nodur.0.et", nodes)], tmp_path / "t.parquet", "no node carries a duration", "0 ns")


def test_pytorch_et_gzip_bomb_is_refused_at_its_limit(tmp_path):
    head = json.dumps({"schema": "1.0.1", "pid": 1, "nodes": []}).encode()[:-2]
    p = tmp_path / "et.json.gz"
    p.write_bytes(members((head, 1), (b" " * (1 << 20), 8), (b"]}", 1)))
    k = tmp_path / "k.json"
    k.write_text(json.dumps({"traceEvents": []}))
    patch = "import tracegen.importers.pytorch_et as m; m.MAX_ET_JSON_BYTES = 4 << 20"
    refused([p, k], tmp_path / "t.parquet", "more than 4,194,304 bytes", patch=patch)


# --------------------------------------------------------------------------- Kineto JSON

_EV = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2, "args": {"correlation": 1}}
_RT = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 0, "tid": 1, "ts": 0, "dur": 1,
       "args": {"correlation": 1}}


@pytest.mark.parametrize("native", ["0", "1"])
def test_kineto_whitespace_bomb_inside_trace_events_is_refused(tmp_path, native):
    """4 GiB of whitespace between two events, 4 MB gzipped (before the limit: 247 s, 3.1 GB, MemoryError):
    refused once no event has ended within MAX_EVENT_BYTES, on both streaming readers alike."""
    p = tmp_path / "ws.json.gz"
    head = b'{"traceEvents":[' + json.dumps(_RT).encode() + b","
    p.write_bytes(members((head, 1), (b" " * (1 << 20), 4096), (json.dumps(_EV).encode() + b"]}", 1)))
    assert p.stat().st_size < 8 << 20
    line = refused([p], tmp_path / "t.parquet", f"longer than {MAX_EVENT_BYTES:,} bytes", "MAX_EVENT_BYTES",
                   env={"FASTRACK_NO_NATIVE_JSON": native}, timeout=60)
    assert "after byte 0 " in line


@pytest.mark.parametrize("native", ["0", "1"])
def test_kineto_one_event_with_a_huge_name_is_refused(tmp_path, native):
    """A 1.5 GiB name, 1.5 MB gzipped (before the limit: 2.6 GB, MemoryError)."""
    p = tmp_path / "name.json.gz"
    head = b'{"traceEvents":[' + json.dumps(_RT).encode() + b',{"name":"'
    tail = b'","ph":"X","cat":"kernel","pid":0,"tid":7,"ts":1,"dur":2,"args":{"correlation":1}}]}'
    p.write_bytes(members((head, 1), (b"a" * (1 << 20), 1536), (tail, 1)))
    refused([p], tmp_path / "t.parquet", "MAX_EVENT_BYTES", env={"FASTRACK_NO_NATIVE_JSON": native}, timeout=60)


@pytest.mark.parametrize("native", ["0", "1"])
def test_kineto_a_name_beyond_the_name_limit_is_refused(tmp_path, native):
    p = tmp_path / "n.json"
    p.write_text(json.dumps({"traceEvents": [_RT, dict(_EV, name="a" * (MAX_NAME_CHARS + 1))]}))
    refused([p], tmp_path / "t.parquet", "'name' is longer than", "MAX_NAME_CHARS",
            env={"FASTRACK_NO_NATIVE_JSON": native})


@pytest.mark.parametrize("native", ["0", "1"])
@pytest.mark.parametrize("where", ["args", "tail"])
def test_kineto_an_integer_beyond_int64_anywhere_is_read(tmp_path, native, where):
    """rocprof writes a 'hive_id' above 2^64: valid JSON, kept out of every field that needs it."""
    big = 18446744073709551616000
    doc = {"traceEvents": [_RT, dict(_EV, args={"correlation": 1, "hive_id": 1})]}
    text = json.dumps(doc)
    text = text.replace('"hive_id": 1', f'"hive_id": {big}') if where == "args" else text[:-1] + f', "x": {big}}}'
    p = tmp_path / "big.json"
    p.write_text(text)
    code, out, err = convert([p], tmp_path / "t.parquet")
    assert code == 0, err
    assert "2 ops" in out


@pytest.mark.parametrize("rank", ["1000000000000000000000000000000", "1e300", "1048576"])
def test_kineto_a_rank_beyond_the_largest_is_refused(tmp_path, rank):
    """A ``distributedInfo.rank`` beyond ``MAX_RANK`` (found by the fuzzer: 10^30 was an
    OverflowError traceback) is one line naming the field, never the value."""
    text = json.dumps({"distributedInfo": {"rank": 7, "world_size": {"k": SECRET}}, "traceEvents": [_RT, _EV]})
    p = tmp_path / "r.json"
    p.write_text(text.replace('"rank": 7', f'"rank": {rank}'))
    line = refused([p], tmp_path / "t.parquet", "'distributedInfo.rank'", "MAX_RANK")
    assert rank not in line


@pytest.mark.parametrize("value", ["9223372036854775807", "9223372036854775500"])
def test_kineto_an_integer_field_past_64_bits_as_a_double_is_refused(tmp_path, value):
    """A kernel's ``args.device`` of 2^63 - 1 (found by the fuzzer) is read with the column's
    missing values as doubles, where it rounds to 2^63: that was a numpy cast warning and a
    trace with a made-up device. It is one line naming the column, never the value."""
    ev = dict(_EV, args={"correlation": 1, "device": 7})
    text = json.dumps({"traceEvents": [_RT, ev, dict(_EV, ts=_EV["ts"] + 50, args={"correlation": 2})]})
    p = tmp_path / "d.json"
    p.write_text(text.replace('"device": 7', f'"device": {value}'))
    line = refused([p], tmp_path / "t.parquet", "'device'", "64-bit")
    assert value not in line


def test_kineto_a_rank_in_the_file_name_beyond_the_largest_is_refused(tmp_path):
    p = tmp_path / "trace_rank_99999999999999999999.json"
    p.write_text(json.dumps({"traceEvents": [_RT, _EV]}))
    refused([p], tmp_path / "t.parquet", "rank in the file name", "MAX_RANK")


# --------------------------------------------------------------------------- Nsight


def _nsys(tmp_path: Path) -> Path:
    from test_nsys_import import build_scenario

    return build_scenario(tmp_path / "s.sqlite")


def test_nsys_2022_export_without_the_memcpy_enum_reads_the_same_directions(tmp_path):
    from tracegen.importers.nsys import read_nsys

    p = _nsys(tmp_path)
    want = read_nsys(p)[0]
    conn = sqlite3.connect(p)
    conn.execute("DROP TABLE ENUM_CUDA_MEMCPY_OPER")
    conn.commit()
    conn.close()
    got = read_nsys(p)[0]
    assert got["copy_dir"].tolist() == want["copy_dir"].tolist()
    assert {"H2D", "D2H"} <= set(got["copy_dir"].dropna())


def test_nsys_rows_beyond_the_limit_are_refused_before_they_are_fetched(tmp_path):
    p = _nsys(tmp_path)
    refused([p], tmp_path / "t.parquet", "rows, more than 3", "MAX_NODES_PER_FILE",
            patch="import tracegen.importers.nsys as m; m.MAX_NODES_PER_FILE = 3")


def test_nsys_a_kernel_name_beyond_the_limit_is_refused(tmp_path):
    p = _nsys(tmp_path)
    conn = sqlite3.connect(p)
    conn.execute("UPDATE StringIds SET value = ? WHERE value LIKE 'gemm%'", ("g" * (MAX_NAME_CHARS + 1),))
    conn.commit()
    conn.close()
    refused([p], tmp_path / "t.parquet", "longer than", "MAX_NAME_CHARS")


def test_out_of_memory_during_an_import_is_one_line(tmp_path):
    """Any reader (numpy's _ArrayMemoryError included) that runs out of memory: one line naming
    the input, exit 2 (before: a 3M-row Nsight export ended in a numpy traceback)."""
    p = _nsys(tmp_path)
    patch = ("import numpy, tracegen.importers.nsys as m\n"
             "m._read_kernels = lambda *a, **k: numpy.empty((1 << 50,), numpy.int64)")
    refused([p], tmp_path / "t.parquet", "out of memory while importing", str(p), patch=patch)



@pytest.mark.slow
def test_a_short_fuzz_of_structural_bombs_and_self_contradicting_traces():
    """The fuzzer's bomb and contradiction generators (benchmarks/tools/fuzz.py), alone: every
    bomb refused with one line or read in bounded memory, every contradiction refused or warned."""
    fuzz = Path(__file__).resolve().parent.parent / "benchmarks" / "tools" / "fuzz.py"
    r = subprocess.run([sys.executable, str(fuzz), "--cases", "80", "--seed", "2", "--generators",
                        "bomb,contradiction", "--json"], capture_output=True, text=True, timeout=1800)
    summary = json.loads(r.stdout[r.stdout.index("{"):])
    assert r.returncode == 0 and summary["failing"] == 0, r.stdout[-3000:]
    assert {"0", "2"} <= set(summary["exit_codes"])
