"""Validation of the H100 TEE model against the published claims (regenerates docs/model.md §8).

Usage: python benchmarks/validate_model.py [--preset h100-sxm]

1. Transfer microbenchmarks (`tracegen synth memcpy`, 4 KiB to 1 GiB, H2D and D2H, pinned and
   pageable, 4 copies each): time of one copy (call to completion) under each protocol, and the
   ratio baseline / none, to compare with the published communication cost of 12.69x-33.53x.
2. The shipped traces in traces/: slowdown of baseline and fastrack versus none, and how much of
   the baseline runtime Fastrack removes, to compare with inference 54%-904% / training
   10%-455% slower and "up to 84.6%" shorter runtime.
Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fastrack.traceio import Trace
from replay.build import build_graph
from replay.run import replay_graph
from tracegen.synth import memcpy_table

ROOT = Path(__file__).resolve().parent.parent
SIZES = [("4 KiB", 4 << 10), ("64 KiB", 64 << 10), ("1 MiB", 1 << 20), ("16 MiB", 16 << 20),
         ("256 MiB", 256 << 20), ("1 GiB", 1 << 30)]
PROTOCOLS = ["none", "baseline", "fastrack:direct", "fastrack:auth", "fastrack:overlap", "fastrack"]
TRACES = {"llama.parquet": "training", "resnet.parquet": "training", "llama_infer.parquet": "inference",
          "bert_infer.parquet": "inference"}
REPEAT = 4


def fmt_us(ns: float) -> str:
    return f"{ns / 1e3:,.1f}"


def microbenchmarks(preset: str | None) -> None:
    print("| direction | memory | size | none (us/copy) | baseline (us/copy) | fastrack (us/copy) | baseline / none | fastrack / none |")
    print("|---|---|---|---|---|---|---|---|")
    ratios = []
    for direction in ("h2d", "d2h"):
        for memory in ("pinned", "pageable"):
            for label, size in SIZES:
                graph = build_graph(Trace(table=memcpy_table(size, direction, memory, REPEAT), metadata={}))
                t = {p: replay_graph(graph, p, preset=preset).result.makespan_ns / REPEAT
                     for p in ("none", "baseline", "fastrack")}
                r = t["baseline"] / t["none"]
                ratios.append(r)
                print(f"| {direction.upper()} | {memory} | {label} | {fmt_us(t['none'])} | {fmt_us(t['baseline'])} | "
                      f"{fmt_us(t['fastrack'])} | {r:.2f}x | {t['fastrack'] / t['none']:.2f}x |")
    print(f"\nbaseline / none over all sizes: {min(ratios):.2f}x to {max(ratios):.2f}x "
          "(published: 12.69x to 33.53x)\n")


def traces(preset: str | None) -> None:
    print("| trace | kind | none | " + " | ".join(PROTOCOLS[1:]) + " | Fastrack removes |")
    print("|---|---|---|" + "---|" * (len(PROTOCOLS) - 1) + "---|")
    for name, kind in TRACES.items():
        path = ROOT / "traces" / name
        if not path.exists():
            continue
        from fastrack.traceio import read_trace

        graph = build_graph(read_trace(path))
        t = {p: replay_graph(graph, p, preset=preset).result.makespan_ns for p in PROTOCOLS}
        cells = " | ".join(f"{t[p] / 1e6:,.2f} ms (+{100 * (t[p] / t['none'] - 1):.1f}%)" for p in PROTOCOLS[1:])
        cut = 100 * (t["baseline"] - t["fastrack"]) / t["baseline"]
        print(f"| {name} | {kind} | {t['none'] / 1e6:,.2f} ms | {cells} | {cut:.1f}% |")
    print("\npublished: inference +54% to +904%, training +10% to +455% over no TEE; "
          "Fastrack cuts runtime by up to 84.6%")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default=None)
    args = ap.parse_args(argv)
    microbenchmarks(args.preset)
    traces(args.preset)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
