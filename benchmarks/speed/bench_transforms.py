#!/usr/bin/env python
"""The protocol transforms alone, in process (a script, not a test; docs/performance.md "Protocol
transforms"):

    python benchmarks/speed/bench_transforms.py [--ops 100000,1000000] [--protocols none,baseline,fastrack]

For each trace size (``benchmarks/out/random-N-s0.parquet``, made by bench_replay.py) and each
protocol, one fresh child process loads the graph, warms what the transform calls that is not the
transform's own (the engine's cycle check), then measures ``protocol(graph, model)`` twice: its CPU
seconds (``time.process_time``, best of ``--repeat`` fresh processes), and, in a second run under
``tracemalloc``, its peak of traced bytes above what was allocated before it (the transform's
output included), next to the size of the graph it returns. Another helper's engine or graph
builder does not enter these figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # benchmarks/<kind>/ -> the repository root

CHILD = r"""
import json, sys, time, tracemalloc
import numpy as np
from replay.pipeline.engine import is_acyclic
from replay.plugins import load_model, load_protocol
from replay.pipeline.run import load_graph
from tests.graphs import graph as hand_graph

g0 = hand_graph([1, 2], [(0, 1, 0, 0)], lanes=[0, 0])
is_acyclic(g0, np.zeros(0, np.int64), np.zeros(0, np.int64))  # the engine's compiled check, loaded
graph, _ = load_graph(sys.argv[1])
hw = load_model("h100").from_preset(None, ())
proto = load_protocol(sys.argv[2])
if sys.argv[3] == "time":
    t = time.process_time()
    out = proto(graph, hw)
    print(json.dumps({"cpu_s": time.process_time() - t, "nodes": out.n, "edges": out.num_edges}))
else:
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    out = proto(graph, hw)
    peak = tracemalloc.get_traced_memory()[1] - base
    size = sum(a.nbytes for a in vars(out).values() if isinstance(a, np.ndarray))
    print(json.dumps({"peak_bytes": peak, "graph_bytes": size}))
"""


def child(trace: Path, protocol: str, what: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    res = subprocess.run([sys.executable, "-c", CHILD, str(trace), protocol, what], capture_output=True, text=True,
                         env=env, cwd=ROOT, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", default="100000,1000000")
    ap.add_argument("--protocols", default="none,baseline,fastrack")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for ops in [int(x) for x in args.ops.split(",")]:
        trace = ROOT / "benchmarks" / "out" / f"random-{ops}-s0.parquet"
        if not trace.exists():
            print(f"{trace} missing: run benchmarks/speed/bench_replay.py --ops {ops} first", file=sys.stderr)
            return 2
        for p in args.protocols.split(","):
            times = [child(trace, p, "time") for _ in range(args.repeat)]
            mem = child(trace, p, "memory")
            best = min(times, key=lambda r: r["cpu_s"])
            rows.append({"ops": ops, "protocol": p, **best, **mem})
    print(f"{'ops':>9}  {'protocol':9}  {'CPU s':>6}  {'peak MiB':>8}  {'graph MiB':>9}  {'nodes':>9}  {'edges':>9}")
    for r in rows:
        print(f"{r['ops']:>9,}  {r['protocol']:9}  {r['cpu_s']:6.3f}  {r['peak_bytes'] / 2**20:8.0f}  "
              f"{r['graph_bytes'] / 2**20:9.0f}  {r['nodes']:>9,}  {r['edges']:>9,}")
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
