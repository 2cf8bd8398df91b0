#!/usr/bin/env python
"""What prediction ranges cost: ``replay --ranges --json`` against a single replay, in the same run
(a script, not a test; docs/performance.md "Prediction ranges").

    python benchmarks/speed/bench_ranges.py [--ops 1000000] [--protocol baseline] [--seed 0] [--range-jobs 1,2]
                                            [--trace PATH] [--repeat 1]

0. Byte-compiles the project's packages first (``--no-compile`` skips it), as bench_replay.py does.
1. Generates ``tracegen synth random --ops N --seed S`` into ``benchmarks/out/`` unless it is there
   (the trace bench_replay.py uses), or with ``--trace PATH`` measures that trace instead (a
   shipped one, say: the synthetic trace is the worst case, every ranged parameter moving it and
   its copies crossing every size threshold).
2. Runs ``python -m replay.frontend.cli --protocol P TRACE --json`` (a single replay: the protocol
   and its ``none`` reference) and the same with ``--ranges`` as whole processes, one after the
   other, and prints the CPU time (user + system, ``os.wait4``: exact per child) and peak memory
   of each, the ratio, the points the range study scheduled, re-priced and skipped, and the range
   itself. The target is a ratio of at most 3x.
3. ``--range-jobs`` (comma-separated, default ``1`` and the CPUs this process may use): one
   ``--ranges`` run per value, so the one-at-a-time study and the threaded one are measured in
   the same run. Each gets two ratios: of CPU time (the work; threads add some) and of wall time
   (what a user waits for). The reports must be identical; the script exits 1 if not.
4. ``--repeat N``: the single replay and each ``--ranges`` run N times, interleaved (single, then
   each jobs value, then again), each figure the median of its N runs (the runs' CPU times in
   brackets) and each peak the largest. A single replay's CPU time on a shared machine varies by a
   third between runs, so one run's ratio is known to about a point; medians of 3 narrow it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OUT = ROOT / "benchmarks" / "out"
TARGET = 3.0
sys.path.insert(0, str(HERE))

from bench_replay import byte_compile  # noqa: E402  (the same preparation as the replay benchmark)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def measured(cmd: list[str]) -> dict:
    """CPU seconds, wall seconds, peak RSS and stdout of one child process."""
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, env=_env(), cwd=ROOT)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        out_f.seek(0)
        err_f.seek(0)
        rc = os.waitstatus_to_exitcode(status)
        if rc != 0:
            sys.exit(f"{' '.join(cmd[:4])} ... failed ({rc}): {err_f.read().decode()[-400:]}")
        return {"cpu_s": ru.ru_utime + ru.ru_stime, "wall_s": wall, "peak_mib": ru.ru_maxrss / 1024,
                "out": json.loads(out_f.read())}


def summary(runs: list[dict]) -> dict:
    """Median CPU and wall time of ``runs`` (one measurement repeated), their largest peak, every
    run's report, and the runs' CPU times as a suffix for the printed line (none for one run)."""
    return {"cpu_s": statistics.median(r["cpu_s"] for r in runs),
            "wall_s": statistics.median(r["wall_s"] for r in runs),
            "peak_mib": max(r["peak_mib"] for r in runs), "out": runs[0]["out"],
            "reports": [r["out"] for r in runs],
            "each": "" if len(runs) == 1 else "  [CPU " + ", ".join(f"{r['cpu_s']:.2f}" for r in runs) + " s]"}


def ensure_trace(ops: int, seed: int) -> Path:
    path = OUT / f"random-{ops}-s{seed}.parquet"
    if not path.exists():
        OUT.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "tracegen.cli", "synth", "random", "--ops", str(ops), "--seed", str(seed),
                        "-o", str(path)], check=True, env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=1_000_000)
    ap.add_argument("--protocol", default="baseline")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-compile", action="store_true", help="do not byte-compile the project's packages first")
    ap.add_argument("--trace", type=Path, default=None,
                    help="measure this trace instead of the synthetic one (e.g. traces/serving_offload.parquet)")
    ap.add_argument("--range-jobs", default=None,
                    help="comma-separated --range-jobs values, one --ranges run each (default: 1 and the CPUs)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each measurement, interleaved; medians (1..20)")
    args = ap.parse_args()
    if not 1 <= args.repeat <= 20:
        sys.exit("--repeat: not an integer in 1..20")
    from replay.pipeline.ranges import default_jobs

    jobs = [int(j) for j in args.range_jobs.split(",")] if args.range_jobs else sorted({1, default_jobs()})
    if not args.no_compile:
        byte_compile()
    if args.trace is not None and not args.trace.is_file():
        sys.exit(f"{args.trace}: not a file")
    trace = args.trace.resolve() if args.trace is not None else ensure_trace(args.ops, args.seed)
    base = [sys.executable, "-m", "replay.frontend.cli", "--protocol", args.protocol, str(trace), "--json"]
    cmds = [base] + [base + ["--ranges", "--range-jobs", str(j)] for j in jobs]
    runs = [[] for _ in cmds]
    for _ in range(args.repeat):
        for k, cmd in enumerate(cmds):
            runs[k].append(measured(cmd))
    single, *ranged_runs = [summary(rs) for rs in runs]
    size = f"{single['out']['ops']:,} ops"
    print(f"trace {trace.name} ({size}), protocol {args.protocol}, 1-minute load {os.getloadavg()[0]:.1f}, "
          f"{default_jobs()} CPUs" + (f", medians of {args.repeat} runs" if args.repeat > 1 else ""))
    print(f"single replay             CPU {single['cpu_s']:7.2f} s  wall {single['wall_s']:7.2f} s  "
          f"peak {single['peak_mib']:,.0f} MiB{single['each']}")
    reports = []
    for j, ranged in zip(jobs, ranged_runs):
        reports += ranged["reports"]
        ratio, wall = ranged["cpu_s"] / single["cpu_s"], ranged["wall_s"] / single["wall_s"]
        print(f"--ranges --range-jobs {j:<3} CPU {ranged['cpu_s']:7.2f} s  wall {ranged['wall_s']:7.2f} s  "
              f"peak {ranged['peak_mib']:,.0f} MiB  ratio CPU {ratio:.2f}x, wall {wall:.2f}x "
              f"(target <= {TARGET:g}x: CPU {'pass' if ratio <= TARGET else 'MISS'}, "
              f"wall {'pass' if wall <= TARGET else 'MISS'}){ranged['each']}")
    if any(rep != reports[0] for rep in reports):
        sys.exit("the --range-jobs runs gave different reports")
    r = reports[0]
    info = r["ranges"]
    print(f"{len(info['parameters'])} ranged parameters read, {len(info['not_read'])} not read; "
          f"{info['points_replayed']} points evaluated, {info['points_unchanged']} unchanged (not evaluated); "
          f"{info.get('points_repriced', 0)} of all these re-priced, the others re-transformed; "
          f"{info.get('points_retimed', 0)} re-timed in the preset's order, "
          f"{info.get('points_estimated', 0)} of the study's points still estimates at the end")
    print(f"slowdown {r['slowdown_vs_none']} range {r['slowdown_range']} driven by {r['range_driver']}")


if __name__ == "__main__":
    main()
