"""Replay cost against the rank count: the same number of ops spread over more ranks.

Target: replay cost linear in ops and lanes whatever the rank count; 10,000 ranks within about
2x of the same ops on one rank (each rank brings about ten model lanes, so the lane count, and
the per-lane rows of the result, grow with the ranks even when the ops do not).

For each rank count a synthetic trace (``tracegen synth random``, same seed, same ops) is built
once; the figure is the fastest of ``--repeats`` ``baseline`` replays of its graph (graph build
excluded), process CPU time. Printed: seconds per rank count and the ratio to one rank (the
floor, measured in the same run). A replay's per-lane report rows (``ReplayResult.resources``,
one dict per lane: the JSON report's ``resources``) are built when first read, not by the
replay; the time to build them is printed beside it (``rows``), since a report pays it.

    python benchmarks/speed/bench_ranks.py [--ops 200000] [--ranks 1,100,1000,10000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=200_000, help="ops per trace (1000-10000000)")
    ap.add_argument("--ranks", default="1,100,1000,10000", help="rank counts, comma-separated (1-100000)")
    ap.add_argument("--repeats", type=int, default=3, help="replays per trace (1-20)")
    ap.add_argument("--protocol", default="baseline")
    a = ap.parse_args(argv)
    try:
        ranks = [int(x) for x in a.ranks.split(",")]
    except ValueError:
        ap.error("--ranks: comma-separated integers")
    if not (1000 <= a.ops <= 10_000_000 and 1 <= a.repeats <= 20 and all(1 <= r <= 100_000 for r in ranks)):
        ap.error("--ops 1000-10000000, --repeats 1-20, --ranks 1-100000 each")
    if 1 not in ranks:
        ranks = [1, *ranks]
    from replay.pipeline.run import load_graph, replay_graph

    times, rows = {}, {}
    with tempfile.TemporaryDirectory() as d:
        for r in ranks:
            path = Path(d) / f"r{r}.parquet"
            subprocess.run([sys.executable, "-m", "tracegen.cli", "synth", "random", "--ops", str(a.ops), "--seed",
                            "1", "--ranks", str(r), "-o", str(path)], check=True, capture_output=True)
            graph, tr = load_graph(path)
            best = best_rows = None
            for _ in range(a.repeats):
                t0 = time.process_time()
                rep = replay_graph(graph, a.protocol, trace_ops=tr.num_ops)
                dt = time.process_time() - t0
                best = dt if best is None else min(best, dt)
                t0 = time.process_time()
                lanes = len(rep.result.resources)
                dt = time.process_time() - t0
                best_rows = dt if best_rows is None else min(best_rows, dt)
                del rep
            times[r], rows[r] = best, (best_rows, lanes)
    floor = times[1]
    print(f"{a.ops} ops under {a.protocol}, fastest of {a.repeats} (process CPU s)")
    for r in ranks:
        print(f"  {r:>6} ranks: {times[r]:7.3f} s  ({times[r] / floor:5.2f}x one rank); rows of {rows[r][1]:,} "
              f"lanes {rows[r][0]:.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
