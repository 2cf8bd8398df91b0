"""Fidelity of `replay --protocol captured` on real traces: replayed vs captured span.

Usage: python benchmarks/validation/fidelity.py TRACE_OR_DIR [TRACE_OR_DIR ...]

e.g. ``python benchmarks/validation/fidelity.py ../shared/traces/real/*.json.gz ../shared/traces/real/v100_dlrm_8rank/kineto``
(the real traces the project ships beside the repository; ``tests/data`` holds small copies of some).

Converts each trace (a file, or a directory of rank files) with `tracegen convert`, replays it
with measured durations, and prints per rank and per ProfilerStep the replayed makespan, the
captured span and the relative error; then how the graph reacts: the critical path by category
(modelled: GPU compute, launch latency and sync edges; measured constants: host CPU work), the
makespan change when every kernel runs twice as fast or twice as slow (``--scale kernel=0.5`` and
``kernel=2``), the launch
latency the builder estimated and the GPU holds the trace does not explain. Prints Markdown tables
(pasted into docs/fidelity.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

USAGE = "usage: python benchmarks/validation/fidelity.py TRACE_OR_DIR [TRACE_OR_DIR ...]"


def inputs(args: list[str]) -> list[Path]:
    """The traces named on the command line; one line on stderr and exit 2 when none is given or
    one does not exist."""
    if not args:
        print(f"error: no trace given ({USAGE})", file=sys.stderr)
        sys.exit(2)
    paths = [Path(a) for a in args]
    for p in paths:
        if not (p.is_file() or p.is_dir()):
            print(f"error: {p}: no such trace file or directory", file=sys.stderr)
            sys.exit(2)
    return paths


def scaled(trace: Path, scale: str) -> int:
    r = subprocess.run(["replay", "--protocol", "captured", str(trace), "--json", "--scale", scale], check=True,
                       capture_output=True, text=True)
    return json.loads(r.stdout)["makespan_ns"]


def main(argv: list[str]) -> int:
    rows, reaction = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for src in inputs(argv):
            out = Path(tmp) / (src.name.split(".")[0] + ".parquet")
            t0 = time.perf_counter()
            subprocess.run(["tracegen", "convert", str(src), "-o", str(out)], check=True, capture_output=True)
            t1 = time.perf_counter()
            r = subprocess.run(["replay", "--protocol", "captured", str(out), "--json"], check=True,
                               capture_output=True, text=True)
            d = json.loads(r.stdout)
            worst_rank = max(abs(x["error_vs_captured"] or 0) for x in d["per_rank"])
            steps = [s for s in d["steps"] if s["captured_span_ns"] > 0]
            worst_step = max((abs(s["makespan_ns"] - s["captured_span_ns"]) / s["captured_span_ns"] for s in steps),
                             default=None)
            rows.append((src.name, d["ops"], len(d["ranks"]), d["captured_span_ns"], d["makespan_ns"], worst_rank,
                         len(steps), worst_step, t1 - t0))
            # how the graph reacts: critical path shares, launch latency, unexplained holds, faster GPU
            half, double = scaled(out, "kernel=0.5"), scaled(out, "kernel=2")
            cp, ms, cal = d["critical_path_ns"], d["makespan_ns"], d.get("calibration") or {}
            lat = sorted(cal.get("launch_latency_ns", {}).values())
            reaction.append((src.name, 100 * cp.get("compute", 0) / ms, 100 * cp.get("launch", 0) / ms,
                             100 * cp.get("sync_wait", 0) / ms, 100 * cp.get("host", 0) / ms,
                             100 * (half - ms) / ms, 100 * (double - ms) / ms,
                             (f"{lat[0] / 1e3:.1f}" + (f"-{lat[-1] / 1e3:.1f}" if lat[-1] != lat[0] else "")) if lat
                             else "-", cal.get("unexplained_gpu_ops", 0), cal.get("unexplained_gpu_hold_ns", 0)))
    print("| trace | ops | ranks | captured span (us) | replayed (us) | worst rank error | steps | worst step error | convert s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, ops, nr, cap, rep, wr, ns, ws, ct in rows:
        print(f"| {name} | {ops:,} | {nr} | {cap / 1e3:,.1f} | {rep / 1e3:,.1f} | {100 * wr:.3f}% | {ns} | "
              f"{'-' if ws is None else f'{100 * ws:.3f}%'} | {ct:.2f} |")
    print()
    print("| trace | critical path: compute | launch | sync wait | host (measured) | `--scale kernel=0.5` | "
          "`kernel=2` | launch latency (us) | unexplained GPU holds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, comp, launch, sync, host, half, double, lat, n_un, t_un in reaction:
        print(f"| {name} | {comp:.1f}% | {launch:.1f}% | {sync:.1f}% | {host:.1f}% | {half:+.1f}% | {double:+.1f}% | "
              f"{lat} | {n_un} ops, {t_un / 1e3:,.0f} us |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
