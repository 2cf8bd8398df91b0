"""``tracegen convert``: format detection, summary line, one-line errors with exit code 2."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from fastrack_core.traceio import read_trace
from tracegen.cli import main

DATA = Path(__file__).resolve().parent / "data"
TINY = DATA / "a100_cuda_event_sync_tiny.json.gz"
GOOD_EVENTS = [
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 0, "dur": 5,
     "args": {"correlation": 1}},
    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 6, "dur": 5,
     "args": {"correlation": 1, "stream": 7, "device": 0}},
]  # fmt: skip


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_convert_is_registered():
    res = run("--help")
    assert res.exit_code == 0 and "convert" in res.output


def test_convert_real_trace(tmp_path):
    out = tmp_path / "tiny.parquet"
    res = run("convert", TINY, "-o", out)
    assert res.exit_code == 0, res.output
    line = res.stdout.strip()
    assert "\n" not in line and "29 ops" in line and "1 rank(s)" in line and "events/s" in line
    trace = read_trace(out)
    assert trace.num_ops == 29
    assert trace.metadata["source_format"] == "kineto-json"
    # the input's own names stay out by default (fastrack_core.provenance): position and type only
    assert trace.metadata["source_files"] == ["input1.json.gz"]
    assert trace.metadata["trace_name"] == "tiny"
    kept = tmp_path / "kept.parquet"
    assert run("convert", TINY, "-o", kept, "--keep-source-names").exit_code == 0
    assert read_trace(kept).metadata["source_files"] == [TINY.name]


def test_convert_directory_of_ranks_and_explicit_format(tmp_path):
    out = tmp_path / "dlrm.parquet"
    res = run("convert", DATA / "v100_dlrm_8rank", "-o", out, "--format", "kineto")
    assert res.exit_code == 0, res.output
    assert "8 rank(s)" in res.stdout
    meta = read_trace(out, columns=["rank"]).metadata
    assert meta["ranks"] == list(range(8)) and meta["world_size"] == 8


def test_convert_several_files(tmp_path):
    files = sorted((DATA / "v100_dlrm_8rank").iterdir())[:2]
    out = tmp_path / "two.parquet"
    res = run("convert", *files, "-o", out)
    assert res.exit_code == 0, res.output
    assert read_trace(out, columns=["rank"]).metadata["ranks"] == [0, 1]


def _bad_cases(tmp: Path) -> dict[str, Path]:
    good = json.dumps({"traceEvents": GOOD_EVENTS}).encode()
    gz = gzip.compress(json.dumps({"traceEvents": GOOD_EVENTS * 300}).encode())
    neg = json.loads(json.dumps(GOOD_EVENTS))
    neg[1]["dur"] = -1
    cases = {
        "missing.json": None,
        "trunc_gzip.json.gz": gz[: len(gz) // 2],
        "corrupt_gzip.json.gz": gz[:12] + b"\x00" * 40 + gz[52:],
        "trunc_json.json": good[:-10],
        "corrupt_json.json": good.replace(b'"ph"', b"ph", 1),
        "not_trace.json": b'{"hello": "world"}',
        "empty_trace.json": b'{"traceEvents": []}',
        "no_cuda.json": json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1,
                                                     "tid": 1, "ts": 0, "dur": 3}]}).encode(),  # fmt: skip
        "negative.json": json.dumps({"traceEvents": neg}).encode(),
        "nan.json": good.replace(b'"dur": 5', b'"dur": NaN', 1),
        "garbage.bin": b"\x00\x01\x02 definitely not a trace",
        "empty.json": b"",
    }
    out = {}
    for name, content in cases.items():
        p = tmp / name
        if content is not None:
            p.write_bytes(content)
        out[name] = p
    return out


@pytest.mark.parametrize(
    "name",
    ["missing.json", "trunc_gzip.json.gz", "corrupt_gzip.json.gz", "trunc_json.json", "corrupt_json.json",
     "not_trace.json", "empty_trace.json", "no_cuda.json", "negative.json", "nan.json", "garbage.bin", "empty.json"],
)  # fmt: skip
def test_bad_input_one_line_exit_2_no_output(tmp_path, name):
    path = _bad_cases(tmp_path)[name]
    out = tmp_path / "out.parquet"
    res = run("convert", path, "-o", out)
    assert res.exit_code == 2, (res.output, res.exception)
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and name in err, err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("out")]


def test_bad_file_among_good_ones_names_it(tmp_path):
    d = tmp_path / "ranks"
    shutil.copytree(DATA / "v100_dlrm_8rank", d)
    (d / "worker9_broken.json").write_bytes(b'{"traceEvents": [')
    out = tmp_path / "o.parquet"
    res = run("convert", d, "-o", out)
    assert res.exit_code == 2 and "worker9_broken.json" in res.stderr and not out.exists()


def test_duplicate_rank_error(tmp_path):
    a = tmp_path / "rank-1.json"
    b = tmp_path / "again_rank1.json"
    for p in (a, b):
        p.write_text(json.dumps({"traceEvents": GOOD_EVENTS}))
    res = run("convert", a, b, "-o", tmp_path / "o.parquet")
    assert res.exit_code == 2 and "rank-1.json" in res.stderr and "again_rank1.json" in res.stderr


def test_metadata_secrets_do_not_leak(tmp_path):
    src = tmp_path / "s.json"
    src.write_text(json.dumps({"metadata": {"env": {"HF_TOKEN": "secret"}}, "unknownTopLevel": "secret-too",
                               "traceEvents": GOOD_EVENTS, "trailer": {"x": "secret"}}))  # fmt: skip
    out = tmp_path / "o.parquet"
    assert run("convert", src, "-o", out).exit_code == 0
    assert b"secret" not in out.read_bytes()


def test_sqlite_input_routes_to_nsys(tmp_path, monkeypatch):
    """Detection picks the importer from the registry by the file's first bytes."""
    from tracegen.importers import KINETO, NSYS

    db = tmp_path / "prof.sqlite"
    db.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    seen = []

    def read(paths):
        seen.append(list(paths))
        return KINETO.read([str(TINY)])

    monkeypatch.setattr(NSYS, "read", read)
    res = run("convert", db, "-o", tmp_path / "o.parquet")
    assert res.exit_code == 0, res.output
    assert seen == [[str(db)]]


def test_format_choices_help_and_error_come_from_the_registry(tmp_path):
    from tracegen.convert import FORMATS_CHOICES
    from tracegen.importers import format_names, formats

    names = format_names()
    assert {"chakra", "pytorch-et", "kineto", "nsys"} <= set(names)
    assert FORMATS_CHOICES == ("auto", *names)
    help_text = " ".join(run("convert", "--help").output.split())
    bad = tmp_path / "odd.bin"
    bad.write_bytes(b"\x07not a trace of any kind")
    res = run("convert", bad, "-o", tmp_path / "o.parquet")
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1 and "odd.bin" in res.stderr
    for name, importer in formats().items():
        assert f"{name}: {importer.description}" in help_text, name
        assert f"{name}: {importer.description}" in res.stderr, name


def test_detect_format():
    from tracegen.convert import detect_format

    assert detect_format(str(TINY)) == "kineto"
    assert detect_format(str(DATA / "v100_dlrm_8rank")) == "kineto"


def test_mixed_formats_error(tmp_path):
    db = tmp_path / "prof.sqlite"
    db.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    res = run("convert", TINY, db, "-o", tmp_path / "o.parquet")
    assert res.exit_code == 2 and "mix" in res.stderr


# --------------------------------------------------------------------------- output and input paths


def _one_line(res, *words):
    assert res.exit_code == 2, (res.output, res.exception)
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1, err
    for w in words:
        assert w in err, err
    return err


def test_existing_output_needs_overwrite(tmp_path):
    out = tmp_path / "o.parquet"
    out.write_bytes(b"keep me")
    _one_line(run("convert", TINY, "-o", out), "o.parquet", "--overwrite")
    assert out.read_bytes() == b"keep me"
    res = run("convert", TINY, "-o", out, "--overwrite")
    assert res.exit_code == 0, res.output
    assert read_trace(out).num_ops == 29


@pytest.mark.parametrize("what", ["devnull", "symlink", "directory", "fifo"])
def test_output_that_is_not_a_regular_file_is_refused_even_with_overwrite(tmp_path, what):
    target = tmp_path / "target.parquet"
    target.write_bytes(b"keep me")
    out = tmp_path / "o.parquet"
    if what == "devnull":
        out = Path(os.devnull)
    elif what == "symlink":
        out.symlink_to(target)
    elif what == "directory":
        out.mkdir()
    else:
        os.mkfifo(out)
    _one_line(run("convert", TINY, "-o", out, "--overwrite"), str(out))
    assert target.read_bytes() == b"keep me"
    if what == "symlink":
        assert out.is_symlink()
    assert not list(tmp_path.glob(".*.part"))


def test_output_same_as_input_is_refused_even_with_overwrite(tmp_path):
    src = tmp_path / "in.json.gz"
    shutil.copy(TINY, src)
    before = src.read_bytes()
    _one_line(run("convert", src, "-o", src, "--overwrite"), "in.json.gz", "same file")
    link = tmp_path / "alias.json.gz"
    os.link(src, link)  # a hard link is the same file under another name
    _one_line(run("convert", src, "-o", link, "--overwrite"), "alias.json.gz", "same file")
    assert src.read_bytes() == before


@pytest.fixture
def fifo(tmp_path):
    """A FIFO with a writer waiting in a thread: a reader that wrongly opens it gets an empty
    stream (and the test fails) instead of blocking forever."""
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    writer = threading.Thread(target=lambda: os.close(os.open(path, os.O_WRONLY)), daemon=True)
    writer.start()
    yield path
    os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))  # release the writer if nobody read
    writer.join(5)


def test_fifo_input_is_refused_not_read(tmp_path, fifo):
    out = tmp_path / "o.parquet"
    from tracegen.convert import FORMATS_CHOICES

    for fmt in FORMATS_CHOICES:  # "auto" and every installed format
        _one_line(run("convert", fifo, "-o", out, "--format", fmt), "pipe.json", "FIFO")
    assert not out.exists()


def test_device_input_is_refused(tmp_path):
    _one_line(run("convert", os.devnull, "-o", tmp_path / "o.parquet"), os.devnull, "device")
