"""How stable script host time is on this machine (``tracegen capture --host-time script``):
the measured counterpart of the exact virtual-clock tests in ``tests/test_capture_hosttime.py``.

    python benchmarks/validation/script_time.py [--runs 4] [--steps 9]

A script burns N pure-Python iterations per step (plus one GEMM, one ReLU and one sum), at two
levels (150 000 and 300 000), runs interleaved (low, high, low, high, ...) so a change of load
hits both. Printed: the median per-step host time of each run, the ratio of the levels' means
(2 expected), each level's run-to-run spread (max/min - 1), and the spread of the CPU
calibration (``calibrate_cpu``, taken as often as there are runs). Nothing is asserted: on a
shared machine thread CPU time varies with what else runs (docs/capture.md, "Host time as the
script spends it", records the figures and the command)."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

BURN = """
import sys
import torch

n = int(sys.argv[1])
x = torch.ones(64, 64, device="cuda")


def burn(k):
    acc = 0
    for i in range(k):
        acc += i & 7
    return acc


with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    for _ in range({steps}):
        burn(n)
        y = (x @ x).relu().sum()
        prof.step()
"""
LEVELS = (150_000, 300_000)


def per_step_ms(path: Path) -> float:
    from fastrack_core.traceio import read_trace

    df = read_trace(path).table.to_pandas()
    host = df[df.kind.isin(["cpu", "runtime"]) & (df.step >= 1)]
    return float(host.groupby("step").dur_ns.sum().median()) / 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=4, help="runs per level (1-50)")
    ap.add_argument("--steps", type=int, default=9, help="profiler steps per run (2-1000)")
    a = ap.parse_args(argv)
    if not (1 <= a.runs <= 50 and 2 <= a.steps <= 1000):
        ap.error("--runs must be 1-50 and --steps 2-1000")
    from click.testing import CliRunner

    from tracegen import emulation
    from tracegen.cli import main as tracegen_main
    from tracegen.emulation.scripttime import calibrate_cpu

    emulation.preload()
    runs = {n: [] for n in LEVELS}
    cal = []
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "burn.py"
        script.write_text(textwrap.dedent(BURN.format(steps=a.steps)))
        out = Path(d) / "o.parquet"
        for _ in range(a.runs):
            cal.append(calibrate_cpu())
            for n in LEVELS:
                res = CliRunner().invoke(tracegen_main, ["capture", "--overwrite", "-o", str(out), str(script),
                                                         "--", str(n)])
                if res.exit_code:
                    print(res.output, file=sys.stderr)
                    return 1
                runs[n].append(per_step_ms(out))
    lo, hi = (runs[n] for n in LEVELS)
    for n in LEVELS:
        r = runs[n]
        print(f"N={n:>7}: per-step host ms {', '.join(f'{x:.3f}' for x in r)}; "
              f"spread {max(r) / min(r) - 1:.1%}")
    print(f"ratio of means {statistics.mean(hi) / statistics.mean(lo):.3f} (expected {LEVELS[1] / LEVELS[0]:.0f})")
    print(f"calibration loop ns {', '.join(map(str, cal))}; spread {max(cal) / min(cal) - 1:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
