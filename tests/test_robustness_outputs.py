"""Outputs: any legal output name gets a legal temporary sibling, and the file system's refusals
name the file the user gave, never the hidden temporary one (fastrack_core/atomic.py)."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from fastrack_core.atomic import atomic_dir, atomic_path
from fastrack_core.cli_support import reports_errors

DATA = Path(__file__).parent / "data" / "a100_cuda_event_sync_tiny.json.gz"


def test_a_251_character_output_name_is_written(tmp_path):
    from tracegen.cli import main

    out = tmp_path / ("a" * 243 + ".parquet")
    assert len(out.name) == 251
    res = CliRunner().invoke(main, ["convert", str(DATA), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert out.is_file() and [p.name for p in tmp_path.iterdir()] == [out.name]


def test_a_255_byte_multibyte_name_gets_a_legal_temporary_name(tmp_path):
    out = tmp_path / ("é" * 127 + "x")  # 255 bytes of UTF-8
    with atomic_path(out) as tmp:
        assert len(Path(tmp).name.encode()) <= 255
        Path(tmp).write_text("ok")
    assert out.read_text() == "ok"
    with atomic_dir(tmp_path / ("d" * 255)) as d:
        (d / "f").write_text("ok")
    assert (tmp_path / ("d" * 255) / "f").read_text() == "ok"


@pytest.mark.parametrize("exc", [
    OSError("Error writing bytes to file. Detail: [errno 28] No space left on device"),  # Arrow's wording
    OSError(errno.ENOSPC, "No space left on device"),  # a write() without a file name
])
def test_a_full_disk_names_the_users_output(tmp_path, exc):
    out = tmp_path / "trace.parquet"
    with pytest.raises(OSError) as got:
        with atomic_path(out) as tmp:
            Path(tmp).write_text("partial")
            raise exc
    assert got.value.filename == str(out) and got.value.errno == errno.ENOSPC
    assert got.value.strerror == os.strerror(errno.ENOSPC)
    assert list(tmp_path.iterdir()) == []  # the temporary file is gone


def test_a_read_only_folder_names_the_users_output_not_the_temporary(tmp_path, monkeypatch):
    out = tmp_path / "trace.parquet"

    def refuse(prefix, suffix, dir):
        raise PermissionError(errno.EACCES, "Permission denied", os.path.join(dir, prefix + "abcdefgh" + suffix))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)

    @click.command()
    @reports_errors
    def write():
        with atomic_path(out):
            pass

    res = CliRunner().invoke(write, [])
    assert res.exit_code == 2
    assert res.stderr.strip() == f"error: {out}: Permission denied"
