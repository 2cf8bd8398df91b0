"""Regenerate the results section of docs/multi-gpu.md: data-parallel training at 4 GPUs under GPU TEEs.

    python benchmarks/validation/multi_gpu_table.py            # rewrites the block between the markers in docs/multi-gpu.md
    python benchmarks/validation/multi_gpu_table.py --print    # prints it instead

4 GPUs as in the DDP study (docs/sources.md [S2]). Inputs: the training traces of traces/ that carry
gradient markers (GPT-2-XL first). Every number is one replay of the H100 model (preset h100-sxm)
with ``--data-parallel 4 --bucket-mb MB``; slowdowns are against ``none`` with the same buckets.
The last table replays GPT-2-XL under ``baseline`` with the per-message parameters moved across
their plausible range (they are assumptions, docs/multi-gpu.md section 4).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # benchmarks/<kind>/ -> the repository root
sys.path.insert(0, str(ROOT))

from fastrack_core.docsection import replace_section  # noqa: E402
from fastrack_core.errors import FastrackError  # noqa: E402
from fastrack_h100 import H100Model  # noqa: E402
from replay.whatif.dataparallel import data_parallel  # noqa: E402
from replay.pipeline.run import load_graph, replay_graph  # noqa: E402

DOC = ROOT / "docs" / "multi-gpu.md"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
GPUS = 4
TRACES = ("gpt2_xl", "llama", "resnet")
BUCKETS = (25.0, 400.0)
PROTOCOLS = ("ppcie", "baseline", "baseline+batched-meta", "baseline+keymgmt", "baseline+batched-meta+keymgmt",
             "fastrack", "fastrack+batched-meta+keymgmt")
# per-message parameters (assumptions) over their plausible range: (label, overrides)
SENSITIVITY = (
    ("preset defaults", ()),
    ("submission 16 us (`submit.copy_ns`)", ("submit.copy_ns=16000",)),
    ("host synchronisation 50 us (`p2p.sync_ns`; e.g. an interrupt and a thread wake-up)", ("p2p.sync_ns=50000",)),
    ("both", ("submit.copy_ns=16000", "p2p.sync_ns=50000")),
    ("rotation stall 1 s (`keys.rotation_stall_ns`), key lifetime at advantage 65 (~68.7 GB)",
     ("keys.rotation_stall_ns=1000000000", "keys.usage_limit=4294967295")),
    ("small staging chunks (`p2p.chunk_bytes` = 64 KiB)", ("p2p.chunk_bytes=65536",)),
)


def spans(graph, protocols, bucket_mb, overrides=()) -> dict[str, int]:
    g = data_parallel(graph, GPUS, bucket_mb)
    return {p: replay_graph(g, p, overrides=list(overrides)).result.makespan_ns for p in protocols}


def ms(ns: int) -> str:
    return f"{ns / 1e6:,.1f} ms"


def main_table(graphs) -> list[str]:
    lines = []
    for name, graph in graphs.items():
        res = {mb: spans(graph, ("none", *PROTOCOLS), mb) for mb in BUCKETS}
        head = "| protocol | " + " | ".join(f"{mb:g} MB buckets" for mb in BUCKETS) + " |"
        lines += [f"**{name}** (`traces/{name}.parquet`, `--data-parallel {GPUS}`), time per iteration "
                  "(slowdown vs `none` with the same buckets):", "", head, "|---|" + "---:|" * len(BUCKETS)]
        for p in ("none", *PROTOCOLS):
            lines.append(f"| `{p}` | " + " | ".join(f"{ms(res[mb][p])} ({res[mb][p] / res[mb]['none']:.2f}x)"
                                                   for mb in BUCKETS) + " |")
        lines.append("")
    return lines


def sensitivity_table(graph) -> list[str]:
    p = H100Model.from_preset().params
    defaults = (f"`submit.copy_ns` = {p['submit']['copy_ns']:,} ns, `p2p.sync_ns` = {p['p2p']['sync_ns']:,} ns, "
                f"`keys.rotation_stall_ns` = {p['keys']['rotation_stall_ns']:,} ns, "
                f"`p2p.chunk_bytes` = {p['p2p']['chunk_bytes']:,} B")
    lines = [f"**Per-message costs.** GPT-2-XL, `baseline`, {GPUS} GPUs: slowdown vs `none` with the same buckets, "
             f"as the per-message parameters move across their plausible range (preset: {defaults}).", "",
             "| per-message parameters | 25 MB | 400 MB | 400 MB vs 25 MB |", "|---|---:|---:|---:|"]
    none = {mb: spans(graph, ("none",), mb)["none"] for mb in BUCKETS}
    for label, ov in SENSITIVITY:
        try:
            x = {mb: spans(graph, ("baseline",), mb, ov)["baseline"] / none[mb] for mb in BUCKETS}
        except FastrackError as exc:  # e.g. more chunks than a replay may hold: say so in the row
            why = "more graph nodes than a replay may hold" if "graph nodes" in str(exc) else type(exc).__name__
            lines.append(f"| {label} | refused: {why} | | |")
            continue
        lines.append(f"| {label} | {x[25.0]:.2f}x | {x[400.0]:.2f}x | {x[400.0] / x[25.0]:.2f} |")
    lines.append("")
    return lines


def build() -> str:
    t0 = time.time()
    graphs = {}
    for name in TRACES:
        path = ROOT / "traces" / f"{name}.parquet"
        graph = load_graph(path)[0]
        try:
            data_parallel(graph, GPUS, BUCKETS[0])
        except FastrackError:
            continue  # not a training trace with gradient markers
        graphs[name] = graph
    lines = [BEGIN, "", *main_table(graphs), *sensitivity_table(graphs["gpt2_xl"]),
             f"Regenerate: `python benchmarks/validation/multi_gpu_table.py` ({time.time() - t0:.0f} s on the 2-core "
             "development machine).", "", END]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--print", action="store_true", help="print the block instead of rewriting docs/multi-gpu.md")
    args = ap.parse_args()
    block = build()
    if args.print:
        print(block)
        return
    try:
        replace_section(DOC, BEGIN, END, block)
    except FastrackError as exc:
        sys.exit(f"multi_gpu_table: {exc}")


if __name__ == "__main__":
    main()
