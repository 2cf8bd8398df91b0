"""The two readers of a Kineto file give the same result: the whole-file one (one json parse,
tracegen.importers.jsonwhole) and the streaming one (ijson), which the limit switched to 0 forces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastrack_core.errors import TraceFormatError
from tracegen.cli import main
from tracegen.deps.raw import as_frame
from tracegen.importers import jsonwhole, kineto

DATA = Path(__file__).parent / "data"


@pytest.fixture
def streaming(monkeypatch):
    """Force the streaming reader (the whole-file limit switched to 0)."""
    monkeypatch.setattr(kineto, "WHOLE_FILE_MAX_BYTES", 0)


def _no_streaming(monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("the streaming reader was used")

    monkeypatch.setattr(kineto, "_parse_events", refuse)


def _read_both(monkeypatch, paths):
    with monkeypatch.context() as m:
        _no_streaming(m)
        whole = kineto.read(paths)
    with monkeypatch.context() as m:
        m.setattr(kineto, "WHOLE_FILE_MAX_BYTES", 0)
        stream = kineto.read(paths)
    return whole, stream


def _assert_same(whole, stream):
    pd.testing.assert_frame_equal(as_frame(whole.raw), as_frame(stream.raw), check_exact=True)
    assert whole.metadata == stream.metadata and whole.num_events == stream.num_events


@pytest.mark.parametrize("name", ["a100_cuda_event_sync_tiny.json.gz", "h100_bert_small_uncased.json.gz"])
def test_real_traces_read_the_same_both_ways(monkeypatch, name):
    _assert_same(*_read_both(monkeypatch, [DATA / name]))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["h100_qwen1.5_0.5b_chat.json.gz", "v100_dlrm_8rank"])
def test_larger_real_traces_read_the_same_both_ways(monkeypatch, name):
    _assert_same(*_read_both(monkeypatch, [DATA / name]))


def test_convert_writes_the_same_file_both_ways(monkeypatch, tmp_path):
    src = DATA / "a100_cuda_event_sync_tiny.json.gz"
    outs = []
    for limit in (jsonwhole.WHOLE_FILE_MAX_BYTES, 0):
        monkeypatch.setattr(kineto, "WHOLE_FILE_MAX_BYTES", limit)
        out = tmp_path / f"out-{limit}" / "out.parquet"  # (one name: the trace is named after its output)
        out.parent.mkdir()
        r = CliRunner().invoke(main, ["convert", str(src), "-o", str(out)])
        assert r.exit_code == 0, r.output
        outs.append(out)
    a, b = (pq.read_table(p) for p in outs)
    assert a.equals(b, check_metadata=True)


def test_a_document_over_the_limit_is_streamed(monkeypatch, tmp_path):
    src = DATA / "a100_cuda_event_sync_tiny.json.gz"
    size = len(gzip.decompress(src.read_bytes()))
    assert jsonwhole.read_bytes(str(src), size) is not None
    assert jsonwhole.read_bytes(str(src), size - 1) is None
    monkeypatch.setattr(kineto, "WHOLE_FILE_MAX_BYTES", size - 1)
    used = []
    real = kineto._parse_events
    monkeypatch.setattr(kineto, "_parse_events", lambda *a: used.append(1) or real(*a))
    kineto.read([src])
    assert used == [1]


# ---------------------------------------------------------------- generated documents

_CATS = ["kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cuda_sync", "cpu_op",
         "user_annotation", "ac2g", "python_function", None]
_NAMES = ["k", "nccl:all_reduce", "ncclKernel_AllReduce", "record_param_comms", "cudaLaunchKernel",
          "cudaStreamSynchronize", "Memcpy HtoD (Pageable -> Device)", "ProfilerStep#3", "request:arrive:7",
          r'a], \"distributedInfo\": {\"rank\": 5}, \"x\": [', "\u00e9\u4e2d", "\\ud800", "\\ud83d\\ude00"]
_plain_numbers = st.one_of(st.integers(-5, 10**6), st.floats(-1e17, 1e17).map(lambda x: round(x, 3)),
                           st.sampled_from(["-0", "0.0", "1E2", "1.5e-40", "1751410836000000000"]))
_odd_numbers = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False),
                         st.sampled_from(["1e400", "-1e400", "1.5e-400", "12345678901234567890", "NaN"]))
_numbers = st.integers(0, 99).flatmap(lambda k: _odd_numbers if k == 0 else _plain_numbers)  # odd: 1 in 100


def _num(v) -> str:
    return v if isinstance(v, str) else json.dumps(v)


@st.composite
def _event(draw) -> str:
    parts = []
    cat = draw(st.sampled_from(_CATS))
    if cat is not None:
        parts.append(f'"cat": "{cat}"')
    if draw(st.booleans()):
        parts.append(f'"ph": "{draw(st.sampled_from(["X", "X", "i", "f"]))}"')
    name = draw(st.sampled_from(_NAMES if draw(st.integers(0, 9)) == 0 else _NAMES[:-2]))  # surrogates: rare
    parts.append(f'"name": "{name}"' if not name.startswith("\\") else f'"name": "n{name}"')
    for key in ("pid", "tid", "ts", "dur"):
        if draw(st.integers(0, 5)):
            parts.append(f'"{key}": {_num(draw(_numbers))}')
    if draw(st.booleans()):
        args = [f'"correlation": {_num(draw(_numbers))}']
        if draw(st.booleans()):
            args.append('"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 4')
        if draw(st.booleans()):
            args.append(f'"stream": {_num(draw(_numbers))}, "device": 0')
        parts.append('"args": {' + ", ".join(args) + "}")
    return "{" + ", ".join(draw(st.permutations(parts))) + "}"


_TOP_LEVEL = [  # optional top-level members: one list of values per key
    ['"schemaVersion": 1', '"schemaVersion": 1.5'],
    ['"distributedInfo": {"rank": 3, "world_size": 4}', '"distributedInfo": {"rank": 2.0}'],
    ['"deviceProperties": [{"id": 0, "name": "H100"}]'],
    ['"cuda_runtime_version": 12.1'],
    ['"traceName": "t]"', '"traceName": "a], \\"distributedInfo\\": {\\"rank\\": 9}, \\"x\\": ["'],
    ['"INFO": ["a", "b]"]'],
]


@st.composite
def _document(draw) -> bytes:
    events = "[" + ",\n ".join(draw(st.lists(_event(), max_size=8))) + "]"
    if draw(st.integers(0, 5)) == 0:
        text = events  # a bare Chrome-trace array
    else:
        members = [f'"traceEvents": {events}']
        extra = []
        for options in _TOP_LEVEL:
            if draw(st.booleans()):
                extra.append(draw(st.sampled_from(options)))
        extra = draw(st.permutations(extra))
        if draw(st.integers(0, 9)) == 0:
            extra.append('"traceEvents": []')  # a second traceEvents key
        cut = draw(st.integers(0, len(extra)))
        members = extra[:cut] + members + extra[cut:]
        text = "{" + ",\n".join(members) + "}"
    data = text.encode("utf-8")
    if draw(st.integers(0, 4)) == 0:  # damage: cut the document or replace one byte
        pos = draw(st.integers(0, len(data)))
        data = data[:pos] if draw(st.booleans()) else data[:pos] + draw(st.sampled_from([b"\xff", b"[", b"\\", b"\xed\xa0\x80", b" "])) + data[pos + 1:]
    return data


def _outcome(path: str):
    try:
        fd = kineto._read_file(path)
    except TraceFormatError as exc:
        return ("error", str(exc))
    return repr((fd.gpu, fd.rt, fd.sync, fd.ann, fd.rpc, fd.head, fd.num_events, fd.rank, fd.world_size))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_document(), st.sampled_from([5, 64, 1 << 18]), st.booleans())
def test_generated_documents_read_the_same_both_ways(monkeypatch, tmp_path, doc, chunk, gz):
    """Every outcome the same, rows, head keys (before and after the events), rank, or the error
    message, on valid and damaged documents; small chunks move the streaming reader's tail window."""
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(doc) if gz else doc)
    monkeypatch.setattr(kineto, "CHUNK", chunk)
    whole = _outcome(str(path))
    monkeypatch.setattr(kineto, "WHOLE_FILE_MAX_BYTES", 0)
    stream = _outcome(str(path))
    monkeypatch.undo()
    assert whole == stream


def test_the_fast_path_declines_what_the_parsers_read_differently():
    ok = b'{"traceEvents": [{"name": "a"}]}'
    assert jsonwhole.parse_whole(ok, 64) is not None
    for bad in (b'{"traceEvents": [{"name": "a\\ud800"}]}',  # lone surrogate: yajl gives "?"
                b'{"traceEvents": [{"ts": 12345678901234567890}]}',  # beyond int64: yajl refuses
                b'{"traceEvents": [{"ts": 1e400}]}',  # overflows: yajl refuses, json gives inf
                b'{"traceEvents": [{"ts": NaN}]}',
                b'{"traceEvents": [], "traceEvents": [{"name": "a"}]}',  # a key twice
                b'{"traceEvents": {}}', b'{"other": []}', b"3", b"",
                b'\xef\xbb\xbf{"traceEvents": []}',  # a byte-order mark
                b'{"traceEvents": []} x', b'{"traceEvents": [{"name": "\xff"}]}'):
        assert jsonwhole.parse_whole(bad, 64) is None, bad


def test_a_document_of_many_small_values_is_streamed(monkeypatch):
    """64 MiB of "{}," would take some 1.5 GB as Python objects (a gzip of 64 KB): the estimate
    (tokens x BYTES_PER_TOKEN + bytes) sends such a document to the streaming reader."""
    doc = b'{"traceEvents": [' + b"{}," * 1000 + b"{}]}"
    assert jsonwhole.parse_whole(doc, 64) is not None
    tokens = 2 + 2 * 1000 + 1  # { [, then {} and a comma 1,000 times, then the last {}
    monkeypatch.setattr(jsonwhole, "WHOLE_FILE_MAX_OBJECT_BYTES", jsonwhole.BYTES_PER_TOKEN * tokens + len(doc) - 1)
    assert jsonwhole.parse_whole(doc, 64) is None
    monkeypatch.setattr(jsonwhole, "WHOLE_FILE_MAX_OBJECT_BYTES", jsonwhole.BYTES_PER_TOKEN * tokens + len(doc))
    assert jsonwhole.parse_whole(doc, 64) is not None
