"""How fast the serving simulator runs against one replay of the trace its step prices come from.

    python benchmarks/speed/bench_serve.py [TRACE] [--requests 10000] [--concurrency 256]

TRACE: a serving capture with engine-step markers (examples/serving.py); without it a small one is
captured into benchmarks/out/ (the shipped serving trace's command: llama3-8b, concurrency 4, 8
requests, CUDA-graph decode, overlap; about 40 s, once). Measured in one process, on
the same machine, at the same time: (a) one replay of the whole trace under ``none``; (b) pricing
the step table (every captured step, one replay of its step graph each); (c) simulating
``--requests`` requests (ShareGPT-like lengths) in a closed loop at ``--concurrency`` over that
table (``--max-seqs`` = the concurrency). The target (docs/performance.md): (c) under 10x
(a). Prints CPU seconds of each and the ratio (c)/(a); nothing is asserted. The ratio depends on
the trace: (c) costs per arrival, finish and step, (a) per node (figures: docs/serving.md, "How fast").
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", nargs="?")
    p.add_argument("--requests", type=int, default=10_000)
    p.add_argument("--concurrency", type=int, default=256)
    args = p.parse_args()
    trace = args.trace
    if trace is None:
        out = ROOT / "benchmarks" / "out" / "serve_bench_llama3-8b_c4.parquet"
        if not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["tracegen", "capture", "-o", str(out), str(ROOT / "examples" / "serving.py"), "--",
                            "--model", "llama3-8b", "--requests", "8", "--concurrency", "4", "--input-len", "256",
                            "--output-len", "32", "--max-len", "2048", "--cuda-graphs", "--overlap"], check=True)
        trace = str(out)

    from replay.pipeline.run import load_graph, replay_graph
    from replay.serve.schedulers import scheduler
    from replay.serve.sim import simulate
    from replay.serve.steps import price_tables
    from replay.serve.workloads import parse_workload

    graph, _ = load_graph(trace)
    replay_graph(graph, "none")  # warm the engine (compiled core, numba cache) outside the clocks
    t0 = time.process_time()
    replay_graph(graph, "none")
    whole = time.process_time() - t0
    t0 = time.process_time()
    tables, steps = price_tables(graph, trace, ["none"], "h100", None)
    pricing = time.process_time() - t0
    work = parse_workload(f"closed:{args.concurrency}", args.requests, "sharegpt", 0)
    t0 = time.process_time()
    res = simulate(work, tables["none"], scheduler("sglang"), args.concurrency, max(2048, args.concurrency))
    sim = time.process_time() - t0
    print(f"trace {trace}: {graph.n} nodes, {len(steps)} captured steps")
    print(f"(a) one replay of the whole trace      {whole:8.3f} s CPU")
    print(f"(b) pricing the step table             {pricing:8.3f} s CPU ({len(steps)} step-graph replays)")
    print(f"(c) {args.requests} requests at concurrency {args.concurrency}: {sim:8.3f} s CPU, {res.steps} engine steps")
    print(f"ratio (c)/(a) = {sim / whole:.2f} (target < 10)")
    sys.exit(0)


if __name__ == "__main__":
    main()
