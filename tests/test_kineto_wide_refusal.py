"""A Kineto file with an integer beyond 64 bits is read by ijson's pure-Python parser; when that
file is then refused (too deep, invalid UTF-8, cut short), the refusal is still one line: the
parser's half-way coroutines must not print "Exception ignored" tracebacks after it (found by
the CI fuzz run, seeds 1 cases 246/963/1476)."""

from __future__ import annotations

import gzip
import subprocess
import sys

import pytest

WIDE = b'{"schemaVersion": 1, "hive_id": 123456789012345678901234567890, "traceEvents": ['
EVENT = b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2}'


@pytest.mark.parametrize("body", [
    EVENT + b', {"args": ' + b'[' * 80 + b']' * 80 + b'}]}',  # nested deeper than the limit
    EVENT + b', {"name": "\xff\xfe"}]}',  # invalid UTF-8
    EVENT + b', {"name": "cut',  # the document ends inside a string
], ids=["deep", "utf8", "cut"])
def test_refusal_after_the_wide_integer_fallback_is_one_line(tmp_path, body):
    src = tmp_path / "in.json.gz"
    src.write_bytes(gzip.compress(WIDE + body))
    out = tmp_path / "o.parquet"
    r = subprocess.run([sys.executable, "-m", "tracegen.cli", "convert", str(src), "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert not out.exists()
