"""The compiled Kineto scanner (tracegen.importers._kineto, kinetoscan.py) gives exactly what the
Python whole-file path gives (``json`` via ``jsonwhole.parse_whole``, then ``kineto._collect``),
value by value and type by type, or declines (None) and lets that path run: on the real traces
of tests/data, on generated documents with odd field types, escapes, duplicate keys and odd
numbers, on damaged documents, and down to the Parquet that ``tracegen convert`` writes. Both
paths run through tests/twins.py (pair ``kineto``, switched by ``FASTRACK_NO_NATIVE_JSON``), which
compares type by type (1, 1.0 and True differ; dict order kept)."""

from __future__ import annotations

import gzip
import json
import math
import random
import struct
import tempfile
from pathlib import Path
from unittest import mock

import pyarrow.parquet as pq
import pytest
import twins
from click.testing import CliRunner
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from fastrack_core.errors import TraceFormatError
from tracegen.cli import main
from tracegen.importers import jsonwhole, kineto, kinetoscan

DATA = Path(__file__).parent / "data"
DEPTH = kineto.MAX_JSON_DEPTH
built = twins.needs_native("kineto")
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _outcome(data: bytes) -> tuple:
    """(path taken, what the whole-file reader gives for ``data``): rows, event count, members
    before the events, bare, last event end; or the error from ``_collect``; or None (the file
    would be streamed)."""
    doc = jsonwhole.parse_whole(data, DEPTH, kineto._CATS)
    if doc is None:
        return "none", None
    fd = kineto._FileData(path="t.json", rank=0, world_size=None, head={}, num_events=0)
    if doc.rows is not None:
        assert kinetoscan.enabled() and doc.events is None
        path = "native"
        n, fd.gpu, fd.rt, fd.sync, fd.ann, fd.rpc = doc.rows
    else:
        path = "python"
        try:
            n = kineto._collect("t.json", doc.events, fd)
        except TraceFormatError as exc:
            return path, twins.Raised.of(exc)
    return path, (doc.before, doc.bare, doc.last_event_end, n, fd.gpu, fd.rt, fd.sync, fd.ann, fd.rpc)


def _same(data: bytes) -> str:
    """Both ways give the same; the path the native side took."""
    got = twins.run("kineto", lambda: _outcome(data), errors=())  # (_outcome keeps the error of _collect)
    twins.compare(got, view=lambda out: out[1])
    assert got["python"][0] in ("python", "none")
    return got["native"][0]


def test_category_codes_are_the_scanners():
    """src/kinetoscan.cpp branches on the codes 0..6 of kineto._CATS."""
    assert (kineto._K, kineto._MC, kineto._MS, kineto._RT, kineto._SY, kineto._OP, kineto._UA) == tuple(range(7))


def test_the_switch_forces_the_python_path(monkeypatch):
    data = (DATA / "a100_cuda_event_sync_tiny.json.gz").read_bytes()
    data = gzip.decompress(data)
    monkeypatch.setenv(kinetoscan.ENV_SWITCH, "1")
    assert not kinetoscan.enabled() and kinetoscan.scan(data, kineto._CATS) is None
    doc = jsonwhole.parse_whole(data, DEPTH, kineto._CATS)
    assert doc.rows is None and doc.events is not None


# ---------------------------------------------------------------- real traces

KINETO_FILES = ["a100_cuda_event_sync_tiny.json.gz", "h100_bert_small_uncased.json.gz",
                "h100_qwen1.5_0.5b_chat.json.gz",
                *(f"v100_dlrm_8rank/{p.name}" for p in sorted((DATA / "v100_dlrm_8rank").iterdir()))]


def _file_data(path: Path) -> tuple:
    fd = kineto._read_file(str(path))
    return fd.gpu, fd.rt, fd.sync, fd.ann, fd.rpc, fd.head, fd.num_events, fd.rank, fd.world_size


@built
@pytest.mark.parametrize("name", KINETO_FILES)
def test_real_traces_identical(name):
    data = gzip.decompress((DATA / name).read_bytes())
    assert _same(data) == "native"  # read by the scanner, not declined
    twins.agree("kineto", lambda: _file_data(DATA / name))


@built
@pytest.mark.parametrize("name", KINETO_FILES[:2])
def test_real_traces_damaged(name):
    """A cut, a replaced byte, garbage after the end: declined, or the same result."""
    data = gzip.decompress((DATA / name).read_bytes())
    rng = random.Random(16)
    cases = [data + b" x", data + b"]", data + b"\x00", data[:-1], b" " + data + b"\n\t "]
    for _ in range(40):
        pos = rng.randrange(len(data))
        cases.append(data[:pos])
        cases.append(data[:pos] + bytes([rng.choice(b'{}[]",:0-.eE \\\x01\x80\xff')]) + data[pos + 1:])
    paths = {_same(d) for d in cases}
    assert "native" in paths  # whitespace around the document, and byte flips inside a string


# ---------------------------------------------------------------- generated documents
# Documents are written by plain `random` from a seed hypothesis draws (one draw per document:
# hypothesis' per-draw cost would make a document of some 100 choices take ~50 ms); a failing
# example is reported with its seed and the document (`note`).

EVENT_KEYS = ["cat", "ph", "name", "pid", "tid", "ts", "dur", "args"]
ARG_KEYS = ["correlation", "stream", "device", "bytes", "External id", "external id", "Collective name",
            "cuda_sync_kind", "wait_on_stream", "wait_on_cuda_event_record_corr_id", "dtype", "In msg nelems",
            "Process Group Name"]
CATS = [*kineto._CATS, "python_function", "ac2g", "Trace", "", "KERNEL"]
NAMES = ["k", "record_param_comms", "nccl:all_reduce", "ncclKernel_AllReduce", "NCCLdevKernel", "nCcL", "ncc",
         "cudaLaunchKernel", "cudaStreamSynchronize", "ProfilerStep#3", "Memcpy DtoH (Device -> Pageable)",
         "\u212acl", "nccl\u00e9", "\u00e9\u4e2d\U0001f600", 'quote " back \\ slash / tab \t nl \n', "\x00\x1f\x7f",
         "Stream Sync"]
ALPHABET = "aZ09 _:#\"\\/\b\f\n\r\t\x00\x1f\x7f\u00e9\u212a\u4e2d\uffff\U0001f600"
SPECIAL_NUMBERS = ["0.0", "-0.0", "-0", "0e0", "0E+00", "1E2", "1.5e-40", "2.5E+20", "123e-2", "9e99", "1e-99",
                   "0.000000000000000000000000000001", "4.35", "8999999999999999999", "-8999999999999999999",
                   "1751410836000000000"]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(6)))


def _lit(rng: random.Random, s: str) -> str:
    """A JSON string literal of ``s``, each character written plainly or as an escape."""
    out = []
    for c in s:
        o, k = ord(c), rng.randrange(6)
        if k == 0 and o < 0x10000:
            out.append(f"\\u{o:04x}" if rng.random() < 0.5 else f"\\u{o:04X}")
        elif c == "/" and k == 1:
            out.append("\\/")
        else:  # (beyond the BMP written plainly: a surrogate-pair escape makes the guard scan decline)
            out.append(json.dumps(c, ensure_ascii=o < 0x10000 and rng.random() < 0.5)[1:-1])
    return '"' + "".join(out) + '"'


def _number(rng: random.Random) -> str:
    kind = rng.randrange(10)
    if kind <= 3:
        return str(rng.choice([0, -1, 1, 7, 255, 256, -5, 10**6, rng.randrange(-10**6, 10**17)]))
    if kind == 4:
        # huge but int64; 19 digits starting with 9 and more make the guard scan decline the document
        return rng.choice(SPECIAL_NUMBERS) if rng.randrange(50) else str(rng.choice([2**63 - 1, -2**63]))
    if rng.randrange(50):
        x = rng.uniform(-1e15, 1e15) * rng.choice([1.0, 1e-20, 1e40, 0.0])
    else:  # any double: a 3-digit exponent makes the guard scan decline the document
        x = struct.unpack("<d", rng.randbytes(8))[0]
        x = 0.5 if math.isnan(x) or math.isinf(x) else x
    form = rng.randrange(3)
    if form == 0:
        return repr(x)  # shortest round trip (1e+16, -0.0)
    if form == 1:
        return f"{x:.{rng.randrange(18)}e}".replace("e", rng.choice("eE"))
    return f"{rng.randrange(-999, 1000)}.{rng.randrange(10**9):0{rng.randrange(1, 13)}d}"


def _value(rng: random.Random, depth: int = 1) -> str:
    k = rng.randrange(10 if depth < 3 else 7)
    if k <= 2:
        return _number(rng)
    if k <= 4:
        return _lit(rng, _text(rng) if k == 3 else rng.choice(NAMES))
    if k <= 6:
        return rng.choice(["true", "false", "null"])
    if k <= 7:
        return "[" + ", ".join(_value(rng, depth + 1) for _ in range(rng.randrange(4))) + "]"
    return _obj([(_lit(rng, _text(rng)), _value(rng, depth + 1)) for _ in range(rng.randrange(4))])


def _obj(members, sep: str = ", ") -> str:
    return "{" + sep.join(f"{k}: {v}" for k, v in members) + "}"


def _args(rng: random.Random) -> str:
    if rng.randrange(10) == 0:  # false-like values, and truthy values that are not objects
        return rng.choice(["null", "false", "0", "0.0", "-0", '""', "[]", "{}", "1", '"x"', "[1]", "true", "[{}]"])
    members = [(_lit(rng, rng.choice(ARG_KEYS)), _value(rng, 2)) for _ in range(rng.randrange(7))]  # keys twice too
    members += [(_lit(rng, _text(rng)), _value(rng, 2)) for _ in range(rng.randrange(3))]
    rng.shuffle(members)
    return _obj(members)


def _event(rng: random.Random) -> str:
    members = []
    for key in EVENT_KEYS:
        if rng.randrange(7) == 0:
            continue  # absent
        odd = rng.randrange(8) == 0  # a value of any type
        if key == "args":
            v = _args(rng)
        elif odd:
            v = _value(rng)
        elif key == "cat":
            v = _lit(rng, rng.choice(CATS))
        elif key == "ph":
            v = _lit(rng, rng.choice(["X", "X", "X", "i", "f", "x"]))
        elif key == "name":
            v = _lit(rng, rng.choice(NAMES))
        else:
            v = _number(rng)
        members.append((_lit(rng, key), v))
    for _ in range(rng.randrange(3)):  # other keys, or a key of the event twice
        members.append((_lit(rng, rng.choice(EVENT_KEYS + ["id", "s", "bp"])), _value(rng)))
    rng.shuffle(members)
    return _obj(members, rng.choice([", ", ",", " ,\n\t", ",\r\n  "]))


def _realistic_event(rng: random.Random) -> str:
    """An event as Kineto writes it (the fields of each kind with their usual types)."""
    cat = rng.choice(CATS)
    ev = {"ph": rng.choice(["X", "X", "i", "f", "s"]), "cat": cat, "name": rng.choice(NAMES),
          "pid": rng.randrange(-1, 10**6), "tid": rng.randrange(10**7),
          "ts": rng.choice([rng.randrange(2**53), round(rng.uniform(0, 1e17), 3)]), "dur": rng.randrange(10**6)}
    args = {}
    if cat in ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"):
        args = {"queued": 0, "device": rng.randrange(8), "context": 1, "stream": rng.randrange(7, 30),
                "correlation": rng.randrange(10**6), "grid": [1, 2, 3], "registers per thread": 32,
                "est. achieved occupancy %": 12.5}
    elif cat in ("cuda_runtime", "cuda_driver", "Runtime"):
        args = {"cbid": 211, "correlation": rng.randrange(10**6)}
    elif cat == "cuda_sync":
        args = {"cuda_sync_kind": "Event Sync", "device": 0, "wait_on_cuda_event_record_corr_id": 3}
    elif ev["name"] == "record_param_comms":
        args = {"External id": 5, "Collective name": "allreduce", "dtype": "Float", "In msg nelems": 1024,
                "Process Group Ranks": "[0, 1]"}
    elif rng.random() < 0.5:
        args = {"External id": rng.randrange(10**5), "Input Dims": [[2, 3], []], "Input type": ["float", ""]}
    if args or rng.random() < 0.5:
        ev["args"] = args
    return json.dumps(ev, ensure_ascii=False)  # (ensure_ascii would write a surrogate pair the guard declines)


def _document(seed: int, event=_event) -> bytes:
    rng = random.Random(seed)
    if event is _event and rng.randrange(10) == 0:  # items that are not all objects
        events = [_event(rng) if rng.random() < 0.7 else _value(rng) for _ in range(rng.randrange(7))]
    else:
        events = [event(rng) for _ in range(rng.randrange(11))]
    arr = "[" + rng.choice([",", ", ", ",\n  "]).join(events) + rng.choice(["", " ", "\n"]) + "]"
    if rng.randrange(6) == 0:
        text = arr  # a bare array
    else:
        members = [(_lit(rng, "traceEvents"), arr)]
        for key in rng.sample(["schemaVersion", "distributedInfo", "deviceProperties", "INFO", "traceName"],
                              rng.randrange(4)):
            value = _value(rng) if event is _event else rng.choice(['1', '"x"', '{"rank": 1, "world_size": 2}', "[{}]"])
            if rng.random() < 0.2:  # a string that looks like the end of the events and more keys
                value = rng.choice(['"t]"', '"a], \\"distributedInfo\\": {\\"rank\\": 9}, \\"x\\": ["', '["b]"]'])
            members.insert(rng.randrange(len(members) + 1), (_lit(rng, key), value))
        text = _obj(members, ",\n")
    pad = rng.choice(["", " ", "\n", "\r\n\t "])
    return (pad + text + pad).encode("utf-8")


SEEDS = st.integers(0, 2**64)


@built
@settings(max_examples=400, **SETTINGS)
@given(SEEDS)
def test_generated_documents_identical(seed):
    """Odd fields, escapes, keys twice, odd numbers: declined or the same, type by type."""
    doc = _document(seed)
    note(repr(doc))
    _same(doc)


@built
def test_generated_documents_are_mostly_read_natively():
    """The property above is not vacuous: most generated documents take the compiled path."""
    paths = [_same(_document(seed)) for seed in range(200)]
    assert paths.count("native") > len(paths) // 2, paths.count("native")


@built
@settings(max_examples=200, **SETTINGS)
@given(SEEDS)
def test_realistic_events_are_never_declined(seed):
    doc = _document(seed, _realistic_event)
    note(repr(doc))
    assert _same(doc) == "native"


@built
@settings(max_examples=300, **SETTINGS)
@given(SEEDS, st.integers(0, 2**32), st.integers(0, 2),
       st.sampled_from([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x01", b"[", b"}", b",",
                        b'"', b"\\", b"N", b"x", b"]", b"{}", b"\x00", b"NaN"]))
def test_damaged_documents(seed, pos, how, junk):
    """A cut, a replaced byte, garbage after the end: declined, or the same result; never a crash."""
    doc = _document(seed)
    pos %= len(doc) + 1
    doc = doc[:pos] if how == 0 else doc[:pos] + junk + doc[pos + 1:] if how == 1 else doc + junk
    note(repr(doc))
    _same(doc)


@built
@settings(max_examples=200, **SETTINGS)
@given(st.binary(max_size=6))
def test_string_bytes_checked_as_strict_utf8(raw):
    """Any bytes inside a string (a kept or a skipped one): read natively only if Python's strict
    UTF-8 decoder and ``json`` accept them."""
    for field in (b"name", b"junk"):
        doc = b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "' + field + b'": "a' + raw + b'"}]}'
        _same(doc)


@built
def test_utf8_sequences_exactly_as_python():
    """Every lead byte 0x80-0xFF with two or three following bytes around the boundaries of the
    strict decoder (overlong forms, encoded surrogates, beyond U+10FFFF, cut sequences), in a
    string that is built and in one that is only checked: accepted exactly when Python's strict
    UTF-8 decoder accepts the bytes, and built to the same text."""
    follow = [0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC2, 0xE0, 0xF0, 0xFF]
    scan = kinetoscan._compiled.scan
    for lead in range(0x80, 0x100):
        for b1 in follow:
            for b2 in follow:
                for b3 in (0x41, 0x80, 0xBF):
                    seq = bytes([lead, b1, b2, b3])
                    try:
                        text = seq.decode("utf-8")
                    except UnicodeDecodeError:
                        text = None
                    built_ = scan(b'{"s": "' + seq + b'", "traceEvents": []}', kineto._CATS)
                    checked = scan(b'{"traceEvents": [], "s": "' + seq + b'"}', kineto._CATS)
                    assert (built_ is None) == (text is None) and (checked is None) == (text is None), seq
                    assert built_ is None or built_[0] == {"s": text}, seq


EVENT_OK = b'{"ph": "X", "cat": "cuda_runtime", "name": "n", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"correlation": 3}}'


@built
@pytest.mark.parametrize("doc", [
    b'{"traceEvents": [{"ts": 12345678901234567890, "cat": "cpu_op", "ph": "X"}]}',  # beyond int64
    b'{"traceEvents": [{"ts": 1e400, "cat": "cpu_op", "ph": "X"}]}',  # infinity in json
    b'{"traceEvents": [{"ts": NaN}]}', b'{"traceEvents": [{"ts": -Infinity}]}',
    b'{"traceEvents": [{"name": "a\\ud800"}]}', b'{"traceEvents": [{"name": "\\ud83d\\ude00"}]}',
    b'{"traceEvents": [], "traceEvents": [' + EVENT_OK + b"]}",  # a top-level key twice
    b'{"trace\\u0045vents": [], "traceEvents": []}',
    b'{"traceEvents": {}}', b'{"other": []}', b"{}", b"3", b"", b"[", b"[1,]", b'{"traceEvents": [],}',
    b'\xef\xbb\xbf{"traceEvents": []}', b'{"traceEvents": []} x', b'{"traceEvents": [01]}',
    b'{"traceEvents": [' + EVENT_OK + b", 3]}",  # an event that is not an object
    b'{"traceEvents": [{"cat": ["kernel"]}]}', b'{"traceEvents": [{"cat": {}}]}',  # unhashable category
    b'{"traceEvents": [{"cat": "kernel", "ph": "X", "name": 5}]}',  # a name that is not a string
    b'{"traceEvents": [{"cat": "kernel", "ph": "X", "args": [1]}]}',  # args neither object nor false-like
    b'{"traceEvents": [{"cat": "cuda_sync", "ph": "X", "args": 2}]}',
    b'{"traceEvents": [{"cat": "kernel", "ph": "X", "name": "k", "args": "x"}]}',
    b'{"traceEvents": [{"cat": "cpu_op", "ph": "X", "name": "record_param_comms", "args": true}]}',
    b'{"traceEvents": [{"name": "tab\there"}]}',  # a control character in a string
    b'{"traceEvents": [{"name": "\\x"}]}', b'{"traceEvents": [{"name": "\\u12g4"}]}',
    b'{"traceEvents": [{"ts": 1.}]}', b'{"traceEvents": [{"ts": .5}]}', b'{"traceEvents": [{"ts": +1}]}',
    b'{"traceEvents": [{"ts": 1e}]}', b'{"traceEvents": [{"ts": -}]}', b'{"traceEvents": [{"ts": tru}]}',
])
def test_declined_or_same(doc):
    """What json, parse_whole or _collect refuse is declined (the Python path then decides)."""
    path = _same(doc)
    assert path != "native", doc
    assert kinetoscan._compiled.scan(doc, kineto._CATS) is None  # the scanner alone, without the guard


@built
@pytest.mark.parametrize("doc", [
    b' [ ] ', b'{"traceEvents": []}', b'{"a": {"b": [1, 2.5, -0, -0.0, true, null]}, "traceEvents": [], "z": 1}',
    b'[' + EVENT_OK + b"]", b'{"traceEvents": [' + EVENT_OK + b" \n ] , \"deviceProperties\": [{}]}",
    b'{"traceEvents": [{"c\\u0061t": "k\\u0065rnel", "ph": "\\u0058", "name": "nccl\\/x", "args": {"Collective name": 1, "Collective name": "ar"}}]}',
    b'{"traceEvents": [{"cat": "kernel", "ph": "X", "ph": "i", "name": "k"}, {"cat": "cpu_op", "name": "a", "name": "record_param_comms", "ph": "X"}]}',
    b'{"traceEvents": [{"cat": "cuda_sync", "ph": "X", "args": 0.0}, {"cat": "kernel", "ph": "X", "name": "NcClx", "args": ""}]}',
    b'{"traceEvents": [{"cat": 5}, {"cat": null}, {"cat": true}, {}, {"cat": "Trace"}]}',
    b'{"traceEvents": [{"cat": "user_annotation", "ph": "X", "name": "nccl:all_reduce", "ts": 8999999999999999999, "dur": 1E2}]}',
])
def test_read_natively_and_same(doc):
    assert _same(doc) == "native", doc


# ---------------------------------------------------------------- end to end


def _convert(src: Path, folder: Path) -> tuple:
    """The bytes and the table ``tracegen convert`` writes (into a new folder under ``folder``)."""
    out = Path(tempfile.mkdtemp(dir=folder)) / "t.parquet"
    r = CliRunner().invoke(main, ["convert", str(src), "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out.read_bytes(), pq.read_table(out)


@built
@pytest.mark.parametrize("name", ["a100_cuda_event_sync_tiny.json.gz", "h100_bert_small_uncased.json.gz",
                                  pytest.param("h100_qwen1.5_0.5b_chat.json.gz", marks=pytest.mark.slow),
                                  pytest.param("v100_dlrm_8rank", marks=pytest.mark.slow)])
def test_convert_writes_the_same_bytes(tmp_path, name):
    twins.agree("kineto", lambda: _convert(DATA / name, tmp_path))


# ---------------------------------------------------------------- the streaming path


def _stream_same(path: Path, chunk: int) -> bool:
    """The streaming reader gives the same rows, head and tail keys, or the same error, with the
    compiled scanner as with ijson; whether the compiled scanner read the events."""
    real = kinetoscan.stream
    read = []  # per call of the compiled scanner: whether it read the events (else it declined)

    def spy(*a, **k):
        got = real(*a, **k)
        read.append(got is not None)
        return got

    def streamed():
        read.clear()
        return twins.outcome(lambda: _file_data(path), (TraceFormatError,)), any(read)

    with mock.patch.object(kineto, "WHOLE_FILE_MAX_BYTES", 0), mock.patch.object(kineto, "CHUNK", chunk), \
            mock.patch.object(kinetoscan, "stream", spy):  # always streamed, in chunks of ``chunk``
        got = twins.run("kineto", streamed)
    twins.compare(got, view=lambda out: out[0])
    assert not got["python"][1]
    return got["native"][1]


@built
@pytest.mark.parametrize("chunk", [97, 4096, 1 << 18])
@pytest.mark.parametrize("name", KINETO_FILES[:2] + KINETO_FILES[3:4])
def test_streaming_real_traces_identical(name, chunk):
    """The streaming reader gives the same with the compiled scanner as with ijson, events cut
    anywhere by the chunks."""
    assert _stream_same(DATA / name, chunk)


@built
@settings(max_examples=150, **SETTINGS)
@given(SEEDS, st.sampled_from([5, 64, 1 << 18]), st.booleans(), st.integers(0, 3))
def test_streaming_generated_documents_identical(tmp_path, seed, chunk, gz, damage):
    """Generated documents (odd fields, keys twice, top-level keys after the events), whole or
    damaged, plain or gzip: the same rows, head and tail keys, or the same error message."""
    doc = _document(seed)
    if damage == 0:
        rng = random.Random(seed)
        pos = rng.randrange(len(doc) + 1)
        doc = doc[:pos] if rng.random() < 0.5 else doc[:pos] + rng.choice([b"\xff", b"[", b"}", b'"', b"x"]) + doc[pos + 1:]
    note(repr(doc))
    path = tmp_path / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(doc) if gz else doc)
    _stream_same(path, chunk)


@built
def test_streaming_mostly_native(tmp_path):
    """The property above is not vacuous, and realistic documents with events are never declined."""
    used = []
    for seed in range(60):
        path = tmp_path / f"g{seed}.json"
        path.write_bytes(_document(seed))
        used.append(_stream_same(path, 64))
        doc = _document(seed, _realistic_event)
        if b'"ph"' in doc:  # at least one event
            path = tmp_path / f"r{seed}.json"
            path.write_bytes(doc)
            assert _stream_same(path, 64), doc
    assert sum(used) > len(used) // 3, sum(used)
