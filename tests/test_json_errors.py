"""A JSON syntax error is reported by position, never by the bytes around it (real
traces embed tokens, and the parser's own message quotes the input)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracegen.cli import main
from tracegen.importers import kineto

SECRET = "hf_PLANTEDSECRET0123456789"


@pytest.fixture(autouse=True, params=["whole-file", "streaming"])
def reader(request, monkeypatch):
    """Every case through both Kineto readers: the whole-file one, and the streaming one (the
    limit switched to 0). The whole-file one leaves every bad document to the streaming one, so
    the message must be the same."""
    if request.param == "streaming":
        monkeypatch.setattr(kineto, "WHOLE_FILE_MAX_BYTES", 0)
    return request.param


def _convert(path, tmp_path):
    out = tmp_path / "out.parquet"
    r = CliRunner().invoke(main, ["convert", str(path), "-o", str(out)])
    return r, out


@pytest.mark.parametrize("doc,line,hint", [
    ('{"traceEvents": [{"name": "a", "HF_TOKEN": "%s" x }]}' % SECRET, 1, False),
    ('{"traceEvents": [\n{"name": "a",\n"HF_TOKEN": "%s"\n "x": 1}]}' % SECRET, 4, False),
    ('{"traceEvents": [{"name": "%s", "dur": NaN}]}' % SECRET, 1, True),
    ('{"deviceProperties": [{"a": "%s" x}], "traceEvents": []}' % SECRET, 1, False),
])
def test_syntax_errors_name_the_position_not_the_content(tmp_path, doc, line, hint):
    path = tmp_path / "bad.json"
    path.write_text(doc)
    r, out = _convert(path, tmp_path)
    assert r.exit_code == 2 and not out.exists()
    msg = r.output.strip()
    assert len(msg.splitlines()) == 1 and SECRET not in msg and "HF_TOKEN" not in msg
    assert f"(line {line}" in msg and "invalid JSON at byte" in msg
    assert ("NaN/Infinity" in msg) == hint


def test_an_error_deep_in_a_large_gzipped_file_is_located(tmp_path):
    events = ",".join('{"ph": "X", "cat": "kernel", "name": "k%d", "pid": 0, "tid": 7, "ts": %d, "dur": 1}' % (i, i)
                      for i in range(20000))
    body = '{"traceEvents": [' + events + "]}"
    cut = len(body) // 2
    cut = body.index("{", cut)
    body = body[:cut] + '@TOKEN=%s ' % SECRET + body[cut:]
    path = tmp_path / "big.json.gz"
    path.write_bytes(gzip.compress(body.encode()))
    r, _ = _convert(path, tmp_path)
    msg = r.output.strip()
    assert r.exit_code == 2 and SECRET not in msg
    offset = int(msg.split("at byte ")[1].split(" ")[0].replace(",", ""))
    assert abs(offset - cut) < 40


def test_a_head_value_nested_too_deep_is_refused(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"deviceProperties": ' + "[" * 5000 + "]" * 5000 + ', "traceEvents": []}')
    r, _ = _convert(path, tmp_path)
    assert r.exit_code == 2 and "nested deeper than" in r.output


def _tiny_doc():
    import json as _json

    return _json.loads(gzip.decompress((Path(__file__).parent / "data" / "a100_cuda_event_sync_tiny.json.gz").read_bytes()))


@pytest.mark.parametrize("mutate,message", [
    (lambda evs: evs[0].__setitem__("ts", -1.7e18), "a trace may span at most 13 days"),
    (lambda evs: evs[0].__setitem__("ts", -1), "a trace may span at most 13 days"),
    (lambda evs: evs[0].__setitem__("name", ["a", "b"]), "'name' is a JSON array, expected a string"),
    (lambda evs: evs[0].__setitem__("tid", {"x": SECRET}), "a JSON object where a number or a label belongs"),
    (lambda evs: evs[0].__setitem__("dur", SECRET), "non-numeric 'dur' (a str)"),
])
def test_wrong_values_in_events_are_refused_in_one_line(tmp_path, mutate, message):
    import json as _json

    doc = _tiny_doc()
    mutate([e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"])
    path = tmp_path / "t.json"
    path.write_text(_json.dumps(doc))
    r, out = _convert(path, tmp_path)
    msg = r.output.strip()
    assert r.exit_code == 2 and not out.exists() and message in msg, msg
    assert len(msg.splitlines()) == 1 and SECRET not in msg


def test_a_number_too_long_for_the_parser_is_refused_before_it_crashes_it(tmp_path):
    """ijson's C backend crashes the process (SIGSEGV) on a number of some 10,000 digits."""
    path = tmp_path / "long.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": ' + "1" * 20000 + "}]}")
    r, out = _convert(path, tmp_path)
    assert r.exit_code == 2 and "number at byte" in r.output and not out.exists()


@pytest.mark.parametrize("bad", [b"\xff", b"\xed\xa0\x80", b"\xc0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82"])
@pytest.mark.parametrize("gz", [False, True])
def test_invalid_utf8_is_refused_in_one_line_by_position(tmp_path, bad, gz):
    """Encoded surrogates and overlong forms passed yajl's check and failed with a traceback."""
    head = ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "%s ' % SECRET).encode()
    doc = head + bad + b'", "ts": 1, "dur": 1}]}'
    if bad == b"\xe2\x82":
        doc = head + bad  # a sequence cut by the end of the file
    path = tmp_path / ("u.json.gz" if gz else "u.json")
    path.write_bytes(gzip.compress(doc) if gz else doc)
    r, out = _convert(path, tmp_path)
    msg = r.output.strip()
    assert r.exit_code == 2 and not out.exists() and len(msg.splitlines()) == 1 and SECRET not in msg
    assert f"invalid UTF-8 at byte {len(head):,}" in msg, msg
