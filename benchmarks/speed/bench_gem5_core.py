#!/usr/bin/env python
"""Speed of the gem5-free C++ core (models/h100/cpp) against the Python replay (a script, not a test).

    python benchmarks/speed/bench_gem5_core.py [--ops 1000000] [--seed 0] [--protocols captured,fastrack]
                                         [--gem5 /path/to/gem5/build/NULL/gem5.opt]

1. Generates ``tracegen synth random --ops N --seed S`` into ``benchmarks/out/`` (gitignored)
   unless it is already there (the same file ``bench_replay.py`` uses).
2. Builds ``fastrack_replay`` with the Makefile into ``benchmarks/out/cpp-build``.
3. Per protocol: replays the trace in Python (``replay_trace``: read, build, transform, schedule,
   summarise), times the engine alone (``replay.pipeline.engine.schedule`` on the transformed graph,
   numba warm, best of 3), exports it (``write_export``), then runs the C++ driver on the export
   (best of 3: process wall time, and its own read and schedule times) and checks that both give
   the same makespan and per-lane busy time.
4. With ``--gem5`` (a gem5 built with the extension, docs/gem5.md), also runs the export's
   run_gem5.py (one run: wall time of the gem5 process, and whether the simulated time matched).
5. Prints one table. Exit code 1 if the C++, gem5 and Python results differ.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # benchmarks/<kind>/ -> the repository root
OUT = ROOT / "benchmarks" / "out"  # shared by every benchmark (gitignored)
CPP = ROOT / "models" / "h100" / "cpp"


def ensure_trace(ops: int, seed: int) -> Path:
    path = OUT / f"random-{ops}-s{seed}.parquet"
    if path.exists():
        return path
    OUT.mkdir(parents=True, exist_ok=True)
    from click.testing import CliRunner

    from tracegen.synth import command

    t0 = time.perf_counter()
    r = CliRunner().invoke(command, ["random", "--ops", str(ops), "--seed", str(seed), "-o", str(path)])
    if r.exit_code != 0:
        raise SystemExit(f"tracegen synth failed: {r.output}")
    print(f"generated {path.name} in {time.perf_counter() - t0:.1f} s")
    return path


def build_driver() -> Path:
    build = OUT / "cpp-build"
    if not shutil.which("make"):
        raise SystemExit("make is needed to build the C++ driver")
    subprocess.run(["make", "-s", "-C", str(CPP), f"BUILD_DIR={build}"], check=True)
    return build / "fastrack_replay"


def best_of(fn, repeat: int = 3):
    best, value = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - t0)
    return best, value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--protocols", default="captured,fastrack")
    ap.add_argument("--gem5", help="gem5.opt built with EXTRAS=models/h100/gem5 (optional)")
    args = ap.parse_args(argv)

    from replay.pipeline.engine import schedule
    from replay.frontend.export import write_export
    from replay.exporters.exporter import load_exporter
    from replay.pipeline.run import replay_trace

    trace = ensure_trace(args.ops, args.seed)
    driver = build_driver()
    rows, failed = [], False
    for proto in [p.strip() for p in args.protocols.split(",") if p.strip()]:
        try:
            t0 = time.perf_counter()
            rep = replay_trace(trace, protocol=proto)
            py_total = time.perf_counter() - t0
        except Exception as exc:  # a protocol that is not installed: report, do not crash
            rows.append([proto, "-", "-", "-", "-", "-", "-", f"unavailable: {exc}"[:60]])
            continue
        py_sched, _ = best_of(lambda rep=rep: schedule(rep.graph))
        export_dir = OUT / f"gem5-export-{trace.stem}-{proto.replace(':', '_')}"
        t0 = time.perf_counter()
        expected = write_export(load_exporter("gem5"), export_dir, rep.graph, rep.schedule, rep.result,
                                trace=str(trace), protocol=proto, model_info=rep.result.model)
        export_s = time.perf_counter() - t0

        def run_driver(export_dir=export_dir):
            p = subprocess.run([str(driver), str(export_dir)], capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"fastrack_replay failed: {p.stderr.strip()}")
            return json.loads(p.stdout)

        cpp_wall, got = best_of(run_driver)
        same = got["makespan_ns"] == expected["makespan_ns"] and \
            [r["busy_ns"] for r in got["resources"]] == [r["busy_ns"] for r in expected["resources"]]
        gem5_note = ""
        if args.gem5:
            t0 = time.perf_counter()
            m5out = OUT / f"m5out-{export_dir.name}"  # not inside the export: a re-export replaces that directory
            g = subprocess.run([args.gem5, "-q", "-d", str(m5out), str(export_dir / "run_gem5.py")],
                               capture_output=True, text=True)
            gem5_s = time.perf_counter() - t0
            line = next((ln for ln in g.stdout.splitlines() if ln.startswith("{")), "{}")
            match = json.loads(line).get("match") is True and g.returncode == 0
            same &= match
            gem5_note = f"; gem5 {gem5_s:.2f} s, simulated time {'matches' if match else 'DIFFERS'}"
        failed |= not same
        rows.append([proto, f"{rep.graph.n:,}", f"{py_total:.2f}", f"{py_sched:.3f}", f"{export_s:.2f}",
                     f"{cpp_wall:.3f}", f"{got['timing_ms']['read'] / 1e3:.3f}+{got['timing_ms']['schedule'] / 1e3:.3f}",
                     f"{'same' if same else 'DIFFERENT'} makespan {expected['makespan_ns'] / 1e6:.3f} ms; "
                     f"engine speed-up {py_sched / (got['timing_ms']['schedule'] / 1e3):.1f}x{gem5_note}"])
    header = ["protocol", "nodes", "py replay s", "py engine s", "export s", "C++ wall s", "C++ read+sched s",
              "result"]
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    print(f"trace {trace.name}: {args.ops:,} ops")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    print("\npy replay = replay_trace end to end (read, build, transform, schedule, summarise); py engine = "
          "replay.pipeline.engine.schedule alone (numba, warm, best of 3); C++ wall = fastrack_replay process "
          "(read graph.bin, validate, schedule, summarise, JSON), best of 3.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
