"""A file of the wrong kind gets one line that says what to run instead:
an Nsight Systems report to ``tracegen convert`` (export it to SQLite first, whatever --format),
an input of a format replay does not read directly to ``replay`` (convert it first), a Parquet
trace to ``tracegen convert`` (it already is one). Exit code 2, nothing written, no file content
echoed. "Whatever --format" is every installed format (the importer registry), not a hand list."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from replay.frontend.cli import main as replay_main
from tracefactory import op, write
from tracegen.cli import main as tracegen_main
from tracegen.convert import FORMATS_CHOICES  # "auto" and every installed format

KINETO = {"schemaVersion": 1, "traceEvents": [
    {"ph": "X", "cat": "kernel", "name": "secret_kernel_name", "pid": 0, "tid": 7, "ts": 1, "dur": 2,
     "args": {"stream": 7, "device": 0, "correlation": 1}}]}


def _one_line_exit_2(res, path: Path, *needles: str) -> None:
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1, res.output
    assert str(path) in lines[0]
    for n in needles:
        assert n in lines[0], lines[0]
    assert "secret" not in lines[0]


def _nsys_report(tmp_path: Path) -> Path:
    rep = tmp_path / "profile.nsys-rep"
    rep.write_bytes(b"\x00\x01not sqlite: a binary report")
    return rep


@pytest.mark.parametrize("fmt", FORMATS_CHOICES)
def test_convert_nsys_report_says_export_to_sqlite_first(tmp_path, fmt):
    rep, out = _nsys_report(tmp_path), tmp_path / "t.parquet"
    res = CliRunner().invoke(tracegen_main, ["convert", "--format", fmt, str(rep), "-o", str(out)])
    _one_line_exit_2(res, rep, "nsys export --type sqlite")
    assert not out.exists()


@pytest.mark.parametrize("name,gz", [("t.json", False), ("t.json.gz", True), ("renamed.bin", True)])
def test_replay_reads_kineto_json_directly(tmp_path, name, gz):
    """No 'run tracegen convert first' hint for Kineto JSON: replay imports it in memory through
    the fastrack.importers entry point (docs/architecture.md, "Trace formats replay reads directly")."""
    src = tmp_path / name
    data = json.dumps(KINETO).encode()
    src.write_bytes(gzip.compress(data) if gz else data)
    tl = tmp_path / "tl.json"
    res = CliRunner().invoke(replay_main, [str(src), "--timeline", str(tl), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output[res.output.index("{"):])["ops"] == 1 and tl.exists()


def test_replay_on_nsys_files_says_what_to_run(tmp_path):
    rep = _nsys_report(tmp_path)
    _one_line_exit_2(CliRunner().invoke(replay_main, [str(rep)]), rep, "nsys export --type sqlite", "tracegen convert")
    db = tmp_path / "p.sqlite"
    db.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    _one_line_exit_2(CliRunner().invoke(replay_main, [str(db)]), db, "SQLite", "tracegen convert")


def test_replay_on_other_garbage_keeps_the_parquet_message(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    res = CliRunner().invoke(replay_main, [str(bad)])
    _one_line_exit_2(res, bad, "not a Parquet file")


def test_convert_on_a_parquet_trace_says_it_already_is_one(tmp_path):
    trace = write(tmp_path / "t.parquet", [op("cpu", "work", 0, 10, thread=1)])
    out = tmp_path / "again.parquet"
    for fmt in FORMATS_CHOICES:
        res = CliRunner().invoke(tracegen_main, ["convert", "--format", fmt, str(trace), "-o", str(out)])
        _one_line_exit_2(res, trace, "already a Fastrack trace", "no conversion")
        assert not out.exists()


def test_convert_on_a_foreign_parquet_file_says_what_convert_takes(tmp_path):
    plain = tmp_path / "table.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), plain)
    res = CliRunner().invoke(tracegen_main, ["convert", str(plain), "-o", str(tmp_path / "o.parquet")])
    _one_line_exit_2(res, plain, "not a profiler trace", "Kineto JSON")
