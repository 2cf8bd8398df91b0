#!/usr/bin/env python
"""Study throughput: points per second and how busy the cores are (a script, not a test).

    python benchmarks/speed/bench_sweep.py [--points 1000] [--jobs N] [TRACE ...]

1. Traces: the ones given, else every ``traces/*.parquet`` shipped with the repository, else a
   ``tracegen synth random --ops 20000 --seed 0`` trace generated into ``benchmarks/out/``.
2. A study of about ``--points`` points: the traces x protocols none, baseline, fastrack x a
   square grid of PCIe bandwidth (H2D and D2H linked) x CPU AES-GCM throughput per core.
3. Runs it with ``replay.frontend.study.sweep.run_sweep`` on the local process pool (``--jobs``, default
   ``os.cpu_count()``) into a fresh ``benchmarks/out/bench_sweep.parquet`` and reports wall time,
   points/s, and core utilisation = CPU time of the workers (``getrusage(RUSAGE_CHILDREN)`` after
   the pool is shut down) / (wall time x workers), worker CPU time per point, and the load average
   (on a shared machine other processes take cores: compare the load with the worker count).
   Occupancy (the share of wall time each worker spent inside a point rather than waiting for
   work) shows whether the pool keeps the workers fed, whatever else runs on the machine.
   ``--json`` prints the numbers as one object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import sys
import time
from pathlib import Path

from replay.names import NONE

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # benchmarks/<kind>/ -> the repository root
OUT = ROOT / "benchmarks" / "out"  # shared by every benchmark (gitignored)
PROTOCOLS = [NONE, "baseline", "fastrack"]


def _traces(given: list[str]) -> list[str]:
    if given:
        return given
    shipped = sorted(str(p) for p in (ROOT / "traces").glob("*.parquet"))
    if shipped:
        return shipped
    OUT.mkdir(exist_ok=True)
    p = OUT / "random-20000-s0.parquet"
    if not p.exists():
        from click.testing import CliRunner

        from tracegen.cli import main

        r = CliRunner().invoke(main, ["synth", "random", "--ops", "20000", "--seed", "0", "-o", str(p)])
        if r.exit_code:
            sys.exit(f"tracegen synth failed: {r.output}")
    return [str(p)]


def _grid(n: int, lo: float, hi: float) -> list[float]:
    """n values from lo to hi, geometric, rounded to 3 significant digits."""
    if n == 1:
        return [lo]
    return [float(f"{lo * (hi / lo) ** (i / (n - 1)):.3g}") for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*")
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from replay.frontend.study.spec import StudySpec
    from replay.frontend.study.sweep import run_sweep

    traces = _traces(args.traces)
    side = max(1, math.ceil(math.sqrt(args.points / (len(traces) * len(PROTOCOLS)))))
    spec = StudySpec(traces=traces, protocols=PROTOCOLS, grid={
        "pcie.h2d_bandwidth_gb_s+pcie.d2h_bandwidth_gb_s": _grid(side, 8.0, 64.0),
        "cpu_crypto.core_gb_s": _grid(side, 1.0, 16.0),
    })
    OUT.mkdir(exist_ok=True)
    out = OUT / "bench_sweep.parquet"
    out.unlink(missing_ok=True)
    shutil.rmtree(OUT / "bench_sweep.parquet.parts", ignore_errors=True)
    jobs = args.jobs or os.cpu_count() or 1
    load_before = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    self_before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    rep = run_sweep(spec, out, jobs=jobs, progress=None)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    self_after = resource.getrusage(resource.RUSAGE_SELF)
    workers_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    parent_cpu = (self_after.ru_utime - self_before.ru_utime) + (self_after.ru_stime - self_before.ru_stime)
    if jobs == 1:  # in-process run: the parent is the worker
        workers_cpu, parent_cpu = parent_cpu, 0.0
    res = {
        "traces": traces,
        "points": rep.points,
        "jobs": jobs,
        "cpus": os.cpu_count(),
        "wall_s": round(wall, 2),
        "run_s": round(rep.seconds, 2),
        "points_per_s": round(rep.points / wall, 1),
        "points_per_s_running": round(rep.points_per_s, 1),
        "worker_occupancy": round(rep.busy_s / (rep.seconds * jobs), 3),
        "worker_utilisation": round(workers_cpu / (rep.seconds * jobs), 3),
        "parent_cpu_s": round(parent_cpu, 2),
        "worker_cpu_ms_per_point": round(1000 * workers_cpu / max(1, rep.ran), 1),
        "load_avg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    if args.json:
        print(json.dumps(res))
        return
    print(f"traces      {', '.join(traces)}")
    print(f"study       {rep.points} points ({len(traces)} trace(s) x {len(PROTOCOLS)} protocols x {side}x{side} grid)")
    print(f"executor    {rep.executor}")
    print(f"wall        {wall:.1f} s end to end (plan, run, compact); {rep.seconds:.1f} s running points")
    print(f"throughput  {res['points_per_s']} points/s end to end, {res['points_per_s_running']} while running")
    print(f"occupancy   workers were inside a point {res['worker_occupancy'] * 100:.0f}% of the time "
          "(the pool keeps them fed)")
    print(f"cores       workers on CPU {res['worker_utilisation'] * 100:.0f}% of {jobs} x {rep.seconds:.1f} s; "
          f"parent {parent_cpu:.1f} s CPU; {res['worker_cpu_ms_per_point']} ms worker CPU per point")
    print(f"load        1-min load average {res['load_avg_1min'][0]} before, {res['load_avg_1min'][1]} after "
          f"(above {jobs}: other processes shared the cores and the utilisation above is lower)")


if __name__ == "__main__":
    main()
