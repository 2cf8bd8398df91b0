"""Holistic Trace Analysis reads replay timelines fully: its temporal breakdown, kernel breakdown,
communication/computation overlap, queue lengths and critical-path analysis run on what
``replay --timeline`` writes, for a single-rank replay and for multi-rank ones (one file per rank,
``--timeline 'dir/rank{rank}.json.gz'``).

HTA runs in a child process, so the versions it needs stay out of this environment: HTA 0.5's
critical path calls ``DataFrame.drop(axis=1, columns=...)``, which pandas 3 refuses (for a real
profile as for ours), so the child is the interpreter ``FASTRACK_HTA_PYTHON`` names, else this
run's own where HTA is installed beside pandas < 3, else a virtual environment made for the
session from the ``hta-cp`` extra of pyproject.toml (HTA with pandas < 3; needs the package
index). Only an interpreter named by hand can lack the critical path (pandas 3), which is then
skipped, saying so. Slow (HTA parses with pandas row by row; the environment takes about a minute). Outside CI
the test is skipped when that environment cannot be made; in CI (``CI`` set) that is a failure.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest
from click.testing import CliRunner

from replay.frontend.cli import main
from test_timeline import dp_ops, steps_trace
from tracefactory import write

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
DLRM = ROOT / "tests" / "data" / "v100_dlrm_8rank"

# what the child runs: every analysis on every rank of each directory, as JSON on stdout
SCRIPT = r"""
import json, logging, math, sys, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
import pandas as pd
from hta.trace_analysis import TraceAnalysis

out = {}
for d in sys.argv[1:]:
    ta = TraceAnalysis(trace_dir=d)
    ranks = sorted(ta.t.traces)
    r = {"ranks": ranks}
    r["temporal"] = ta.get_temporal_breakdown(visualize=False).to_dict("records")
    kt, _ = ta.get_gpu_kernel_breakdown(visualize=False)
    r["kernel_types"] = dict(zip(kt["kernel_type"], kt["sum"].astype(float)))
    ov = ta.get_comm_comp_overlap(visualize=False)
    r["overlap"] = [None if math.isnan(v) else float(v) for v in ov["comp_comm_overlap_pctg"]]
    q = ta.get_queue_length_time_series(ranks=ranks)
    r["queue_min"] = {str(k): int(v["queue_length"].min()) for k, v in q.items()}
    if int(pd.__version__.split(".")[0]) < 3:
        g, ok = ta.critical_path_analysis(rank=ranks[0], annotation="ProfilerStep", instance_id=0)
        t, sym = ta.t.get_trace(ranks[0]), ta.t.symbol_table.get_sym_table()
        names = sorted({sym[int(n)] for n in t.loc[list(g.critical_path_events_set), "name"]})
        r["critical_path"] = {"ok": bool(ok), "summary": {str(k): float(v) for k, v in g.summary().items()},
                              "event_names": names}
    out[d] = r
print(json.dumps(out))
"""


def _hta_requirements() -> list[str]:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return extras["hta-cp"]


@pytest.fixture(scope="module")
def hta_python(tmp_path_factory) -> str:
    if os.environ.get("FASTRACK_HTA_PYTHON"):  # an interpreter that has HTA (a developer's, made once)
        return os.environ["FASTRACK_HTA_PYTHON"]
    try:
        import hta  # noqa: F401
        import pandas as pd

        if int(pd.__version__.split(".")[0]) < 3:  # everything, the critical path included, runs here
            return sys.executable
    except ImportError:
        pass
    env = tmp_path_factory.mktemp("hta-venv")
    try:
        venv.create(env, with_pip=True)
        py = str(env / "bin" / "python")
        subprocess.run([py, "-m", "pip", "install", "-q", *_hta_requirements()], check=True,
                       capture_output=True, timeout=1200)
    except (subprocess.SubprocessError, OSError) as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no environment with Holistic Trace Analysis could be made ({type(exc).__name__})")
    return py


def _replay(out: Path, trace: Path, *args: str) -> Path:
    out.mkdir()
    res = CliRunner().invoke(main, ["--protocol", "baseline", str(trace), *args,
                                    "--timeline", str(out / "rank{rank}.json.gz")])
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory, hta_python) -> dict:
    from tracegen.convert import convert

    tmp = tmp_path_factory.mktemp("hta")
    one = _replay(tmp / "one", write(tmp / "steps.parquet", steps_trace()))
    two = _replay(tmp / "two", write(tmp / "dp.parquet", dp_ops()), "--data-parallel", "2")
    dlrm = tmp / "dlrm.parquet"
    convert(sorted(DLRM.iterdir()), dlrm)
    eight = _replay(tmp / "eight", dlrm)
    proc = subprocess.run([hta_python, "-c", SCRIPT, str(one), str(two), str(eight)], capture_output=True,
                          text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"one": res[str(one)], "two": res[str(two)], "eight": res[str(eight)]}


def _temporal_adds_up(rows):
    for row in rows:
        total = row["idle_time(us)"] + row["compute_time(us)"] + row["non_compute_time(us)"]
        assert total == pytest.approx(row["kernel_time(us)"])


def test_single_rank(results):
    r = results["one"]
    assert r["ranks"] == [0]  # the rank from distributedInfo
    _temporal_adds_up(r["temporal"])
    row = r["temporal"][0]
    # HTA leaves out the last ProfilerStep (as for a PyTorch profile) and keeps the GPU ops whose
    # launch (correlation id) lies in the others: step 0's 100 us kernel (rounded to whole us)
    assert row["compute_time(us)"] == pytest.approx(100, abs=2)
    assert row["non_compute_time(us)"] > 0  # the staged copies hold the stream: memory time, not idle
    assert {"COMPUTATION", "MEMORY"} <= set(r["kernel_types"])
    assert min(r["queue_min"].values()) >= 0


def test_single_rank_critical_path_names_the_cpu_crypto(results):
    cp = results["one"].get("critical_path")
    if cp is None:
        pytest.skip("HTA 0.5's critical path needs pandas < 3 (the hta-cp extra)")
    assert cp["ok"] and sum(cp["summary"].values()) == pytest.approx(100, abs=0.5)
    # HTA's summary has one CPU class (cpu_bound); the crypto is on the path as operators of its own name
    assert {"cpu_encrypt", "cpu_decrypt"} <= set(cp["event_names"])
    assert "cudaMemcpyAsync" in cp["event_names"]


def test_data_parallel_ranks_communicate(results):
    r = results["two"]
    assert r["ranks"] == [0, 1]
    _temporal_adds_up(r["temporal"])
    assert r["kernel_types"].get("COMMUNICATION", 0) > 0  # the all-reduces are NCCL kernels to HTA
    assert all(v is not None and 0 <= v <= 100 for v in r["overlap"])  # not NaN: there is communication
    assert min(r["queue_min"].values()) >= 0
    if "critical_path" in r:
        assert r["critical_path"]["ok"]


def test_dlrm_eight_ranks(results):
    r = results["eight"]
    assert r["ranks"] == list(range(8))
    _temporal_adds_up(r["temporal"])
    assert r["kernel_types"].get("COMMUNICATION", 0) > 0
    assert all(v is not None and not math.isnan(v) for v in r["overlap"])
    # a GPU op is never drawn before its launch allows, so no stream's queue dips below 0 (the
    # original profile's minimum); staged collectives used to start at a receive that came first
    assert min(r["queue_min"].values()) >= 0
    if "critical_path" in r:
        assert r["critical_path"]["ok"]
