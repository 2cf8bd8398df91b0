"""CLI conventions: replay list, --json on every reporting command, -q/-v,
help on every option of both tools, shell completion of protocol and preset names, and the
README's command examples run with the options they show."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from replay.frontend.cli import main as replay_main
from tracegen.cli import main as tracegen_main

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    p = tmp_path_factory.mktemp("cli") / "r.parquet"
    r = CliRunner().invoke(tracegen_main, ["synth", "random", "--ops", "200", "--seed", "5", "-o", str(p)])
    assert r.exit_code == 0, r.output
    return p


def _walk(cmd, ctx, path):
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            yield from _walk(cmd.get_command(ctx, name), ctx, [*path, name])
    else:
        yield path, cmd


def test_every_option_of_every_tracegen_command_has_help():
    ctx = click.Context(tracegen_main)
    missing = [f"{' '.join(path)} {p.opts[0]}" for path, cmd in _walk(tracegen_main, ctx, ["tracegen"])
               for p in cmd.params if isinstance(p, click.Option) and not (p.help or "").strip()]
    assert not missing, missing
    assert [p for p in tracegen_main.params if p.name in ("quiet", "verbose")]


def test_list_protocols_presets_params():
    r = CliRunner().invoke(replay_main, ["list", "protocols", "--json"])
    names = [row["name"] for row in json.loads(r.output)]
    assert names[0] == "captured" and {"none", "baseline", "fastrack"} <= set(names)
    r = CliRunner().invoke(replay_main, ["list", "presets", "--json"])
    presets = {row["name"]: row for row in json.loads(r.output)}
    assert presets["h100-sxm"]["default"] and presets["h100-pcie"]["description"]
    r = CliRunner().invoke(replay_main, ["list", "params", "--preset", "h100-pcie", "--json"])
    rows = {row["name"]: row for row in json.loads(r.output)}
    assert rows["pcie.latency_ns"]["unit"] == "ns" and rows["pcie.latency_ns"]["source"]
    assert all(row["preset"] == "h100-pcie" for row in rows.values())
    r = CliRunner().invoke(replay_main, ["list", "params"])
    assert r.exit_code == 0 and re.search(r"pcie\.h2d_bandwidth_gb_s\s+\S+ GB/s", r.output)
    assert "source: " in r.output
    r = CliRunner().invoke(replay_main, ["list", "presets", "--model", "nope"])
    assert r.exit_code == 2 and "unknown model (a str of 4 characters)" in r.output and "nope" not in r.output


def test_json_on_reporting_commands(tmp_path, trace):
    r = CliRunner().invoke(replay_main, ["sweep", str(trace), "--protocols", "baseline", "--set", "pcie.latency_ns=500,900",
                                         "-o", str(tmp_path / "s.parquet"), "-j", "1", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output.strip().splitlines()[-1])
    assert d["points"] == 4 and d["ran"] == 4 and d["rows"] == 4  # 2 values x (baseline + none)
    r = CliRunner().invoke(replay_main, ["sensitivity", str(trace), "--protocol", "baseline", "-j", "1", "--json",
                                         "--no-progress"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["protocol"] == "baseline" and d["rows"] and {"parameter", "change", "status"} <= set(d["rows"][0])
    r = CliRunner().invoke(replay_main, ["export-gem5", str(trace), "--protocol", "baseline", "-o",
                                         str(tmp_path / "g5"), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["exporter"] == "gem5" and d["nodes"] > 0 and d["output"] == str(tmp_path / "g5")


def test_convert_json_summary(tmp_path, data_dir):
    out = tmp_path / "t.parquet"
    r = CliRunner().invoke(tracegen_main, ["convert", str(data_dir / "a100_cuda_event_sync_tiny.json.gz"), "-o",
                                           str(out), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["output"] == str(out) and d["ops"] > 0 and d["ranks"] == 1 and d["events"] >= d["ops"]


def test_quiet_and_verbose(tmp_path, trace):
    args = ["sweep", str(trace), "--protocols", "baseline", "-o", str(tmp_path / "s.parquet"), "-j", "1"]
    r = CliRunner().invoke(replay_main, ["-v", *args])
    assert r.exit_code == 0 and "points, 0 already done" in r.output  # the sweep's plan, logged at DEBUG (-v)
    r = CliRunner().invoke(replay_main, [*args, "--overwrite"])
    assert r.exit_code == 0 and "points, " not in r.output  # an error after it would not be one line
    r = CliRunner().invoke(replay_main, ["-q", *args])
    assert r.exit_code == 0 and "already done" in r.output and "points, " not in r.output.split("wrote")[0]
    # -q/-v before an implicit `run` still reach the group
    r = CliRunner().invoke(replay_main, ["-q", "--protocol", "captured", str(trace), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["protocol"] == "captured"
    r = CliRunner().invoke(replay_main, ["-v", "--protocol", "captured", str(trace), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["protocol"] == "captured"


def test_shell_completion_of_protocols_and_presets():
    from click.shell_completion import ShellComplete

    def complete(args, incomplete):
        return [c.value for c in ShellComplete(replay_main, {}, "replay", "_REPLAY_COMPLETE")
                .get_completions(args, incomplete)]

    assert "fastrack" in complete(["compare", "t.parquet", "--protocols"], "fas")
    assert "none,baseline" in complete(["compare", "t.parquet", "--protocols"], "none,bas")
    assert complete(["run", "--protocol"], "cap") == ["captured"]
    assert "h100-pcie" in complete(["compare", "t.parquet", "--preset"], "h100-p")
    assert "h100-sxm-aesni" in complete(["sweep", "--preset"], "h100-sxm,h100-sxm-a")[0].split(",")


def _readme_commands(tool: str) -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    return [shlex.split(m) for m in re.findall(rf"`({tool} [^`|]+)`", text)]


def test_readme_synth_examples_have_the_required_options(tmp_path, monkeypatch):
    """The README's `tracegen synth ...` examples run as written (sizes made small)."""
    monkeypatch.chdir(tmp_path)
    cmds = [c for c in _readme_commands("tracegen") if c[1] == "synth"]
    assert len(cmds) >= 2
    for c in cmds:
        args = [("2000" if a == "1000000" else a) for a in c[1:]]
        r = CliRunner().invoke(tracegen_main, args)
        assert r.exit_code == 0, (c, r.output)
