"""The input's own names stay out of a trace by default (fastrack_core.provenance; docs/robustness.md,
"Names from the input"): a hand-checkable table of reported GPU names, file types, and the
metadata an import writes, through ``tracegen convert`` and replay's in-memory import."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from fastrack_core.provenance import output_label, product_name, scrub
from fastrack_core.traceio import read_trace

DATA = Path(__file__).parent / "data"
SECRET = "hostname-sk-PLANTED7"


@pytest.mark.parametrize("reported, product", [
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100"),
    ("NVIDIA H100 NVL", "NVIDIA H100 NVL"),
    ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
    ("NVIDIA A100-PG509-200", "NVIDIA A100"),
    ("NVIDIA A100-SXM4-80GB / NVIDIA A100-SXM4-80GB", "NVIDIA A100"),
    ("Tesla V100-SXM2-32GB", "NVIDIA V100"),
    ("NVIDIA H200", "NVIDIA H200"),
    ("NVIDIA GH200 480GB", "NVIDIA GH200"),
    ("AMD Instinct MI300X", "AMD Instinct MI300X"),
    ("NVIDIA RTX A1000", "unknown"),  # not an A100: whole words only
    (f"GPU {SECRET}", "unknown"),
    ("", "unknown"),
    (None, "unknown"),
])
def test_product_name(reported, product):
    assert product_name(reported) == product


def test_scrub_and_keep():
    meta = {"trace_name": SECRET, "source_files": [f"{SECRET}_123.pt.trace.json.gz", f"{SECRET}.sqlite", "x"],
            "gpu_model": f"NVIDIA H100 80GB HBM3 {SECRET}", "source_format": "kineto-json"}
    out = scrub(meta, "/some/dir/run.parquet")
    assert out == {"trace_name": "run", "source_files": ["input1.pt.trace.json.gz", "input2.sqlite", "input3"],
                   "gpu_model": "NVIDIA H100", "source_format": "kineto-json"}
    assert SECRET not in json.dumps(out)
    assert scrub(meta, None)["trace_name"] == "imported"
    assert scrub(meta, "o.parquet", keep=True) == meta
    assert output_label("a.b.parquet") == "a.b" and output_label(".parquet") == ".parquet"


def test_convert_and_replay_keep_no_input_names(tmp_path):
    from replay.frontend.cli import main as replay_main
    from tracegen.cli import main as tracegen_main

    src = tmp_path / f"{SECRET}_4242.pt.trace.json.gz"
    shutil.copy(DATA / "h100_bert_small_uncased.json.gz", src)
    out = tmp_path / "bert.parquet"
    r = CliRunner().invoke(tracegen_main, ["convert", str(src), "-o", str(out)])
    assert r.exit_code == 0, r.output
    meta = read_trace(out).metadata
    assert SECRET not in json.dumps(meta) and meta["trace_name"] == "bert" and meta["gpu_model"] == "NVIDIA H100"
    r = CliRunner().invoke(replay_main, ["run", "--json", str(src)])  # replay reads Kineto JSON directly
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out.pop("trace") == str(src)  # the argument as the user typed it, and only there
    assert SECRET not in json.dumps(out), out
