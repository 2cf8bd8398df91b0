"""The fuzzer of benchmarks/tools/fuzz.py as tests: a short seeded run by default, the 2,000-case CI run
in the slow pass (docs/robustness.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parent.parent / "benchmarks" / "tools" / "fuzz.py"


def _run(cases: int, seed: int, timeout: float) -> dict:
    r = subprocess.run([sys.executable, str(FUZZ), "--cases", str(cases), "--seed", str(seed), "--json"],
                       capture_output=True, text=True, timeout=timeout)
    summary = json.loads(r.stdout[r.stdout.index("{"):])
    assert r.returncode == 0 and summary["failing"] == 0, r.stderr[-3000:]
    return summary


def test_a_short_seeded_fuzz_run_keeps_the_bad_input_contract():
    s = _run(24, 11, 600)
    assert s["cases"] == 24 and set(s["exit_codes"]) <= {"0", "2"}


@pytest.mark.slow
def test_the_ci_fuzz_run_of_2000_cases():
    s = _run(2000, 1, 3600)
    assert s["cases"] == 2000
    assert int(s["exit_codes"].get("2", 0)) > 1000  # most mutations must be refused, not accepted silently


def test_a_case_rerun_in_a_fresh_interpreter_is_judged_by_the_same_oracle(tmp_path, monkeypatch):
    """What the fuzzer does after a forked child hangs: the case runs again in a fresh interpreter
    and is judged as usual (here a refused input: one error line, exit 2), marked as rerun."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fuzz", FUZZ)
    fuzz = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "fuzz", fuzz)  # (its dataclasses look their module up)
    spec.loader.exec_module(fuzz)
    case = fuzz.Case(index=0, generator="test", tool="replay", argv=["--protocol", "baseline", "t.parquet"],
                     files={"t.parquet": b"not a parquet file"})
    out = fuzz.rerun_fresh(case, tmp_path / "case0", 2048, 120.0, None)
    assert out.rerun and out.rc == 2 and out.problems == [], out
    assert out.first_line.startswith("error: ")


def test_no_case_starts_after_the_deadline(tmp_path, monkeypatch):
    """``--stop-after-s``: a long run sized to a time budget stops drawing cases at the deadline
    (the summary then gives how many ran: cases 0..N-1, in order)."""
    import importlib.util
    import time

    spec = importlib.util.spec_from_file_location("fuzz", FUZZ)
    fuzz = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "fuzz", fuzz)
    spec.loader.exec_module(fuzz)
    made = []
    monkeypatch.setattr(fuzz, "make_case", lambda seed, i, corpus: made.append(i))
    out = fuzz.run_cases(range(5), 1, None, 1, 2048, 60.0, tmp_path, None, False, deadline=time.monotonic() - 1)
    assert out == [] and made == []
    with pytest.raises(SystemExit):
        fuzz.main(["--stop-after-s", "0"])
