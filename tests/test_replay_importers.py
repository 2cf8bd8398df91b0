"""``replay`` reads Kineto JSON directly through the ``fastrack.importers`` entry point (issue 16).

The installed entry-point metadata may predate the entry point, so the tests register it explicitly
(the same ``module:object`` pyproject.toml declares) and check pyproject.toml declares it."""

from __future__ import annotations

import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest

import replay.plugins as plugins
from fastrack_core.errors import TraceFormatError
from fastrack_core.traceio import read_trace
from replay.pipeline.run import open_trace, replay_trace
from tracegen.convert import convert

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
VALUE = "tracegen.convert:REPLAY_IMPORTER"


@pytest.fixture
def kineto_importer(monkeypatch):
    real = plugins._entries

    def entries(group):
        if group == plugins.IMPORTERS_GROUP:
            return {"kineto": EntryPoint(name="kineto", value=VALUE, group=group)}
        return real(group)

    monkeypatch.setattr(plugins, "_entries", entries)


def test_pyproject_registers_the_kineto_importer():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["fastrack.importers"]["kineto"] == VALUE


@pytest.mark.parametrize("name", ["a100_cuda_event_sync_tiny.json.gz", "h100_bert_small_uncased.json.gz"])
def test_kineto_json_replays_as_its_converted_parquet(kineto_importer, tmp_path, name):
    src = DATA / name
    pq_path = tmp_path / "t.parquet"
    convert([src], pq_path)
    direct, converted = open_trace(src), read_trace(pq_path)
    assert direct.metadata == converted.metadata
    assert direct.table.schema == converted.table.schema
    for col in direct.table.column_names:
        assert direct.table.column(col).to_pylist() == converted.table.column(col).to_pylist(), col
    for protocol in ("captured", "baseline"):
        a = replay_trace(src, protocol).result.to_dict()
        b = replay_trace(pq_path, protocol).result.to_dict()
        assert a == b
        assert np.isfinite(a["makespan_ns"]) and a["ops"] == converted.num_ops


def test_parquet_needs_no_importer(kineto_importer, tmp_path):
    pq_path = tmp_path / "t.parquet"
    convert([DATA / "a100_cuda_event_sync_tiny.json.gz"], pq_path)
    assert plugins.importer_for(str(pq_path)) is None


def test_unknown_format_gets_one_line_hint(kineto_importer, tmp_path):
    bad = tmp_path / "trace.sqlite"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    with pytest.raises(TraceFormatError) as exc:
        open_trace(bad)
    msg = str(exc.value)
    assert "\n" not in msg and "tracegen convert" in msg and "not a Fastrack Parquet trace" in msg


def test_broken_importer_is_named(monkeypatch, tmp_path):
    real = plugins._entries
    monkeypatch.setattr(plugins, "_entries", lambda g: {"odd": EntryPoint(name="odd", value="json:dumps", group=g)}
                        if g == plugins.IMPORTERS_GROUP else real(g))
    f = tmp_path / "x.json"
    f.write_text("{}")
    from fastrack_core.errors import PluginError

    with pytest.raises(PluginError, match="importer 'odd'"):
        plugins.importer_for(str(f))
