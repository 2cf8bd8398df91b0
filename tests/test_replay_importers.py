"""One importer registry (the ``fastrack.importers`` entry points, :mod:`tracegen.importers`) for
``tracegen convert``, its ``--format`` and ``replay``'s direct read of a non-Parquet input.

``replay`` reads Kineto JSON directly, exactly as ``tracegen convert`` would write it, and refuses
the other shipped formats with one line saying to convert first. The sniffing contract: every
importer is handed exactly its declared ``sniff_bytes`` (an 18-byte magic number matches).
A third-party importer registered in the group is detected by both tools, in its place.

The installed entry-point metadata may predate pyproject.toml, so the ``declared`` fixture
registers exactly what pyproject.toml declares."""

from __future__ import annotations

import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import replay.plugins as plugins
import tracegen.importers as importers
from fastrack_core.errors import PluginError, TraceFormatError
from fastrack_core.schema import OpKind
from fastrack_core.traceio import read_trace
from replay.frontend.cli import main as replay_main
from replay.pipeline.run import open_trace, replay_trace
from tracegen.cli import main as tracegen_main
from tracegen.convert import convert
from tracegen.importers import Importer, RawImport

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
TINY = DATA / "a100_cuda_event_sync_tiny.json.gz"
SHIPPED = {"chakra": "CHAKRA", "pytorch-et": "PYTORCH_ET", "kineto": "KINETO", "nsys": "NSYS"}


def _declared() -> dict[str, str]:
    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][importers.GROUP])


def register(monkeypatch, entries: dict[str, str], *, keep_declared: bool = True) -> None:
    """Make ``entries`` (name -> "module:object") the installed importers of both registries, as a
    ``pip install`` of a distribution declaring them would (plus pyproject.toml's own)."""
    group = importers.GROUP
    eps = {n: EntryPoint(name=n, value=v, group=group) for n, v in {**(_declared() if keep_declared else {}),
                                                                      **entries}.items()}
    real = plugins._entries
    monkeypatch.setattr(plugins, "_entries", lambda g: dict(eps) if g == group else real(g))
    monkeypatch.setattr(importers, "_entry_points", lambda: dict(eps))


@pytest.fixture
def declared(monkeypatch):
    register(monkeypatch, {})


# ----------------------------------------------------------------------------- the registry


def test_pyproject_registers_every_shipped_importer_in_one_group():
    assert _declared() == {n: f"tracegen.importers:{obj}" for n, obj in SHIPPED.items()}
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert not any("import" in g and g != importers.GROUP for g in meta)  # no second importer group


def test_shipped_importers_and_detection_order(declared):
    found = importers.formats()
    assert list(found) == ["chakra", "pytorch-et", "kineto", "nsys"]  # specific before broad
    for name, imp in found.items():
        assert isinstance(imp, Importer) and imp.name == name and imp.sniff_bytes > 0 and imp.description
    assert [i.name for i in plugins.importers()] == list(found)  # replay asks in the same order
    assert found["kineto"].replay_reads and not any(i.replay_reads for n, i in found.items() if n != "kineto")


def test_unknown_format_name_lists_the_installed_ones(declared):
    with pytest.raises(TraceFormatError, match="expected one of auto, chakra, pytorch-et, kineto, nsys"):
        importers.choose([TINY], "bogus")
    with pytest.raises(PluginError, match="installed formats: chakra, kineto, nsys, pytorch-et"):
        importers.load_importer("bogus")


# ----------------------------------------------------------------------------- replay reads through it


@pytest.mark.parametrize("name", ["a100_cuda_event_sync_tiny.json.gz", "h100_bert_small_uncased.json.gz"])
def test_kineto_json_replays_as_its_converted_parquet(declared, tmp_path, name):
    src = DATA / name
    pq_path = tmp_path / "t.parquet"
    convert([src], pq_path)
    direct, converted = open_trace(src), read_trace(pq_path)
    # the same, but for the name: a converted trace is named after its output, one imported in
    # memory has none to take (fastrack_core.provenance)
    assert converted.metadata["trace_name"] == "t" and direct.metadata["trace_name"] == "imported"
    assert {**direct.metadata, "trace_name": "t"} == converted.metadata
    assert direct.table.schema == converted.table.schema
    for col in direct.table.column_names:
        assert direct.table.column(col).to_pylist() == converted.table.column(col).to_pylist(), col
    for protocol in ("captured", "baseline"):
        a = replay_trace(src, protocol).result.to_dict()
        b = replay_trace(pq_path, protocol).result.to_dict()
        assert a == b
        assert np.isfinite(a["makespan_ns"]) and a["ops"] == converted.num_ops


def test_parquet_needs_no_importer(declared, tmp_path):
    pq_path = tmp_path / "t.parquet"
    convert([TINY], pq_path)
    assert plugins.importer_for(str(pq_path)) is None


def test_a_format_replay_does_not_read_says_convert_first(declared, tmp_path):
    bad = tmp_path / "trace.sqlite"
    bad.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    assert plugins.importer_for(str(bad)) is importers.NSYS
    with pytest.raises(TraceFormatError) as exc:
        open_trace(bad)
    msg = str(exc.value)
    assert "\n" not in msg and str(bad) in msg and "'nsys'" in msg
    assert "tracegen convert" in msg and "not a Fastrack Parquet trace" in msg


def test_an_unrecognised_file_keeps_the_parquet_message(declared, tmp_path):
    bad = tmp_path / "x.bin"
    bad.write_bytes(b"\x07 nothing known")
    assert plugins.importer_for(str(bad)) is None
    with pytest.raises(TraceFormatError, match="not a Parquet file"):
        open_trace(bad)


def test_broken_importer_is_named(monkeypatch, tmp_path):
    register(monkeypatch, {"odd": "json:dumps"}, keep_declared=False)
    f = tmp_path / "x.json"
    f.write_text("{}")
    with pytest.raises(PluginError, match="importer 'odd'"):
        plugins.importer_for(str(f))
    with pytest.raises(PluginError, match="importer 'odd'"):
        importers.formats()
    assert importers.catalogue() == [("odd", "does not load")]  # --help still works


# ----------------------------------------------------------------------------- a third-party importer

MAGIC18 = b"MAGIC-18-BYTES-V1\n"  # 18 bytes: more than any default head the shipped formats use


class Magic18(Importer):
    """A format whose files start with an 18-byte magic, then one kernel duration (ns) per line."""

    name = "magic18"
    description = "magic-18 test traces"
    sniff_bytes = len(MAGIC18)

    def recognises(self, head: bytes, path: str) -> bool:
        return head == MAGIC18

    def read(self, paths: list[str]) -> RawImport:
        import pandas as pd

        rows = []
        for path in paths:
            durs = [int(x) for x in Path(path).read_bytes()[len(MAGIC18):].split()]
            t = 0
            for i, d in enumerate(durs):
                rows.append({"kind": int(OpKind.RUNTIME), "name": "cudaLaunchKernel", "start_ns": t, "dur_ns": 10,
                             "thread": 1, "correlation": i})
                rows.append({"kind": int(OpKind.KERNEL), "name": f"k{i}", "start_ns": t + 20, "dur_ns": d,
                             "stream": 7, "device": 0, "correlation": i})
                t += 20 + d
        return RawImport(raw=pd.DataFrame(rows), metadata={"source_format": "magic18"}, num_events=len(rows),
                         files=[str(p) for p in paths])


MAGIC = Magic18()


@pytest.fixture
def magic(monkeypatch, tmp_path):
    register(monkeypatch, {"magic18": f"{__name__}:MAGIC"})
    f = tmp_path / "run.m18"
    f.write_bytes(MAGIC18 + b"1000\n2000\n")
    return f


def test_an_18_byte_magic_is_seen_by_convert_and_replay(magic, tmp_path):
    assert importers.detect(magic) == "magic18"
    assert plugins.importer_for(str(magic)) is MAGIC
    out = tmp_path / "m.parquet"
    res = CliRunner().invoke(tracegen_main, ["convert", str(magic), "-o", str(out)])
    assert res.exit_code == 0, res.output
    kinds = read_trace(out).table.column("kind").to_pylist()
    assert kinds.count("kernel") == 2 and kinds.count("runtime") == 2  # (and a CPU gap between the launches)
    res = CliRunner().invoke(replay_main, [str(magic), "--json"])
    assert res.exit_code == 0, res.output
    assert replay_trace(magic).result.to_dict() == replay_trace(out).result.to_dict()


def test_a_third_party_format_takes_its_place_in_the_registry(magic):
    assert importers.format_names() == ("chakra", "pytorch-et", "magic18", "kineto", "nsys")
    assert "magic18: magic-18 test traces" in importers.formats_help()
    assert "magic18: magic-18 test traces" in importers.unknown_format_message()
    # a file whose 18th byte differs is not this format
    magic.write_bytes(MAGIC18[:-1] + b"X1000\n")
    assert plugins.importer_for(str(magic)) is None


class NoBytes(Magic18):
    sniff_bytes = 0


class Misnamed(Magic18):
    name = "other"


@pytest.mark.parametrize("cls,words", [("NoBytes", "sniff_bytes"), ("Misnamed", "entry-point name")])
def test_the_registry_refuses_an_importer_that_breaks_the_contract(monkeypatch, cls, words):
    register(monkeypatch, {"magic18": f"{__name__}:{cls}"}, keep_declared=False)  # a class: built by the registry
    with pytest.raises(PluginError, match=f"importer 'magic18'.*{words}"):
        importers.load_importer("magic18")
    if cls == "NoBytes":
        with pytest.raises(PluginError, match="importer 'magic18'.*sniff_bytes"):
            plugins.importer_for(__file__)
