"""Regenerate the tables of docs/multi-gpu.md (GPT-2-XL data-parallel training under GPU TEEs).

    python benchmarks/multi_gpu_table.py            # rewrites the block between the markers in docs/multi-gpu.md
    python benchmarks/multi_gpu_table.py --print    # prints it instead

Input: traces/gpt2_xl.parquet (one emulated GPT-2-XL training step, batch 4 x 1024; traces/README.md)
and, for the batch-size rows, the same script captured at batch 1 into a temporary file (emulated
capture, ~10 s). Every number is one replay of the H100 model (preset h100-sxm unless said) with
``--data-parallel N --bucket-mb MB``; slowdowns are against ``none`` on the same N GPUs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fastrack_h100 import H100Model  # noqa: E402
from replay.dataparallel import data_parallel  # noqa: E402
from replay.protocols.collectives import find, messages  # noqa: E402
from replay.run import load_graph, replay_graph  # noqa: E402

TRACE = ROOT / "traces" / "gpt2_xl.parquet"
DOC = ROOT / "docs" / "multi-gpu.md"
BEGIN, END = "<!-- multi_gpu_table:begin -->", "<!-- multi_gpu_table:end -->"
GPUS = (1, 2, 4, 8)
PROTOCOLS = ("none", "ppcie", "cc-multi", "cc-multi:batched-meta", "cc-multi:keymgmt", "cc-multi:auth",
             "cc-multi:overlap", "cc-multi:fastrack", "cc-multi:all")
BUCKETS = (1.0, 25.0, 100.0, 400.0)
BUCKET_PROTOCOLS = ("none", "cc-multi", "cc-multi:batched-meta", "cc-multi:all")
DEFAULT_BUCKET = 25.0


def spans(graph, protocols, world, bucket_mb, preset=None) -> dict[str, int]:
    g = data_parallel(graph, world, bucket_mb)
    return {p: replay_graph(g, p, preset=preset).result.makespan_ns for p in protocols}


def n_messages(graph, world, bucket_mb) -> tuple[int, int]:
    g = data_parallel(graph, world, bucket_mb)
    col = find(g, H100Model.from_preset())
    return len(col), len(messages(col))


def ms(ns: int) -> str:
    return f"{ns / 1e6:,.1f}"


def table_by_gpus(graph, preset=None) -> list[str]:
    res = {n: spans(graph, PROTOCOLS, n, DEFAULT_BUCKET, preset) for n in GPUS}
    head = "| protocol | " + " | ".join(f"{n} GPU{'s' if n > 1 else ''}" for n in GPUS) + " |"
    lines = [head, "|---|" + "---:|" * len(GPUS)]
    for p in PROTOCOLS:
        cells = [f"{ms(res[n][p])} ms ({res[n][p] / res[n]['none']:.2f}x)" for n in GPUS]
        lines.append(f"| `{p}` | " + " | ".join(cells) + " |")
    counts = [n_messages(graph, n, DEFAULT_BUCKET) for n in GPUS]
    lines.append("| all-reduces / encrypted messages per iteration | "
                 + " | ".join(f"{c} / {m:,}" for c, m in counts) + " |")
    return lines


def table_by_bucket(graph) -> list[str]:
    worlds = (2, 8)
    head = "| bucket | " + " | ".join(f"`{p}`, {n} GPUs" for n in worlds for p in BUCKET_PROTOCOLS) + \
           " | all-reduces, 8 GPUs |"
    lines = [head, "|---:|" + "---:|" * (len(worlds) * len(BUCKET_PROTOCOLS) + 1)]
    for mb in BUCKETS:
        cells = []
        for n in worlds:
            r = spans(graph, BUCKET_PROTOCOLS, n, mb)
            cells += [f"{r[p] / r['none']:.2f}x" if p != "none" else f"{ms(r[p])} ms" for p in BUCKET_PROTOCOLS]
        cells.append(str(n_messages(graph, 8, mb)[0]))
        lines.append(f"| {mb:g} MB | " + " | ".join(cells) + " |")
    return lines


def batch1_graph(tmp: Path):
    from fastrack.traceio import write_trace
    from tracegen.capture import capture

    out = tmp / "gpt2_xl_b1.parquet"
    table, meta = capture(ROOT / "examples" / "gpt2_xl_train.py", ["--steps", "2", "--batch", "1"], emulate=True,
                          skip_steps=1, steps=1, name="gpt2-xl-train-b1")
    write_trace(out, table, meta)
    return load_graph(out)[0]


def table_by_batch(graph, graph_b1) -> list[str]:
    lines = ["| per-GPU batch | GPUs | `none` | `cc-multi` | `cc-multi:all` |", "|---:|---:|---:|---:|---:|"]
    for label, g in (("4 x 1024 (traces/gpt2_xl.parquet)", graph), ("1 x 1024", graph_b1)):
        for n in (2, 8):
            r = spans(g, ("none", "cc-multi", "cc-multi:all"), n, DEFAULT_BUCKET)
            lines.append(f"| {label} | {n} | {ms(r['none'])} ms | {r['cc-multi'] / r['none']:.2f}x | "
                         f"{r['cc-multi:all'] / r['none']:.2f}x |")
    return lines


def build(with_batch1: bool = True, trace: Path = TRACE) -> str:
    t0 = time.time()
    graph = load_graph(trace)[0]
    out = [BEGIN, "", "**Table 1.** GPT-2-XL, one iteration per GPU (batch 4 x 1024), DDP buckets of 25 MB, "
           "preset `h100-sxm` (NVLink 380 GB/s). Time per iteration (slowdown vs `none` on as many GPUs).", ""]
    out += table_by_gpus(graph)
    out += ["", "**Table 2.** Same, preset `h100-pcie` (no NVSwitch: plaintext GPU-to-GPU traffic over PCIe).", ""]
    out += table_by_gpus(graph, "h100-pcie")
    out += ["", "**Table 3.** Bucket size (`--bucket-mb`): slowdown vs `none` with the same buckets, "
            "`h100-sxm`.", ""]
    out += table_by_bucket(graph)
    if with_batch1:
        with tempfile.TemporaryDirectory() as tmp:
            g1 = batch1_graph(Path(tmp))
        out += ["", "**Table 4.** Less compute per iteration (per-GPU batch 1, captured on the fly by this "
                "script), 25 MB buckets, `h100-sxm`.", ""]
        out += table_by_batch(graph, g1)
    out += ["", f"Regenerate: `python benchmarks/multi_gpu_table.py` ({time.time() - t0:.0f} s on the "
            "2-core development machine).", "", END]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--print", action="store_true", help="print the block instead of rewriting docs/multi-gpu.md")
    ap.add_argument("--no-batch1", action="store_true", help="skip Table 4 (no capture)")
    ap.add_argument("--trace", type=Path, default=TRACE, help=f"GPT-2-XL trace [{TRACE.relative_to(ROOT)}]")
    args = ap.parse_args()
    block = build(not args.no_batch1, args.trace)
    if args.print:
        print(block)
        return
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOC}: markers {BEGIN} / {END} not found")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(head + block + tail)
    print(f"updated {DOC}")


if __name__ == "__main__":
    main()
