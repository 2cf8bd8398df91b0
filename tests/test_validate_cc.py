"""benchmarks/validation/validate_cc.py: the "Validation" block of docs/model.md (the calibrated presets
against their inputs, one copy table per preset)."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _module():
    path = ROOT / "benchmarks" / "validation" / "validate_cc.py"
    spec = importlib.util.spec_from_file_location("validate_cc", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_refuses_a_file_without_markers_before_any_replay(tmp_path, capsys, monkeypatch):
    mod = _module()
    monkeypatch.setattr(mod, "section", lambda: pytest.fail("replayed before checking the markers"))
    p = tmp_path / "doc.md"
    p.write_text(f"no markers here\n{mod.BEGIN}\n")
    assert mod.main(["--write", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "doc.md" in err[0] and "nothing written" in err[0]
    assert p.read_text() == f"no markers here\n{mod.BEGIN}\n"
    assert mod.main(["--write", str(tmp_path / "missing.md")]) == 2
    assert not (tmp_path / "missing.md").exists()


def test_replaces_only_between_markers(tmp_path):
    mod = _module()
    p = tmp_path / "doc.md"
    p.write_text(f"before\n{mod.BEGIN}\nold\n{mod.END}\nafter\n")
    mod.write_section(p, "new\n")
    assert p.read_text() == f"before\n{mod.BEGIN}\nnew\n{mod.END}\nafter\n"


def test_a_4kib_row_is_what_the_commands_it_names_give(tmp_path):
    """One row of a copy table, computed in process, against the commands the block names:
    `tracegen synth memcpy ... --repeat 1` written to a file, then `replay compare --json`."""
    from click.testing import CliRunner

    from replay.frontend.cli import main as replay_main
    from tracegen.cli import main as tracegen_main

    mod = _module()
    row = mod.copy_row("h100-sxm", 4096, "d2h", "pinned")
    trace = tmp_path / "c.parquet"
    res = CliRunner().invoke(tracegen_main, ["synth", "memcpy", "--bytes", "4KiB", "--direction", "d2h", "--memory",
                                             "pinned", "--repeat", "1", "-o", str(trace)])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(replay_main, ["compare", str(trace), "--preset", "h100-sxm", "--protocols",
                                           ",".join(mod.PROTOCOLS), "--json"])
    assert res.exit_code == 0, res.output
    got = {r["protocol"]: r["makespan_ns"] for r in json.loads(res.output)["rows"]}
    assert got == {p: row[p] for p in mod.PROTOCOLS}
    assert row["none"] < row["baseline"]  # the CC path costs something even on 4 KiB


def test_calibrated_presets_are_found_from_their_sources():
    """b300 and h200 say in their source strings which file `replay calibrate` fitted them to; the
    uncalibrated presets say nothing of the kind."""
    mod = _module()
    found = mod.calibrated_presets()
    by_file = {path.name: presets for path, presets in found.items()}
    assert set(by_file) == {"b300-cc-microbench.json", "h200-cc-microbench.json"}
    assert "submit.crossing_ns" in by_file["b300-cc-microbench.json"]["b300"]
    assert "cpu_crypto.core_gb_s" in by_file["h200-cc-microbench.json"]["h200"]
    assert all(p.is_file() for p in found)
    assert not any("h100-sxm" in presets or "b300-hgx" in presets for presets in found.values())
    assert mod.base_preset("b300").endswith("b300-hgx.toml")


def test_figures_by_hand():
    mod = _module()
    assert mod._figure("toll", 336_000.0, 6_000.0, 4096) == 330_000.0
    assert mod._figure("ratio", 50.0, 10.0, 1 << 30) == pytest.approx(0.2)
    assert mod._figure("rate", 1e9, 1.0, 1 << 30) == pytest.approx(1.0)  # 1 GiB in one second: 1 GiB/s
    assert mod._show_figure("toll", 329_901.0) == "+329.9 us" and mod._show_figure("ratio", 0.2077) == "0.208x"


@pytest.mark.slow
def test_docs_model_validation_block_is_current():
    """The generated block of docs/model.md is what benchmarks/validation/validate_cc.py computes today."""
    from fastrack_core.docsection import between, read_section

    mod = _module()
    doc = ROOT / "docs" / "model.md"
    assert read_section(doc, mod.BEGIN, mod.END) == between(mod.BEGIN, mod.section(), mod.END)
