"""Accuracy of emulated capture against real H100 traces: regenerates the table of docs/capture.md.

    python benchmarks/capture_accuracy.py [--real-dir tests/data] [--out FILE.md]

For each workload it captures the script in emulation (``tracegen capture --emulate``, h100-sxm,
the last ProfilerStep only) and reads the real Kineto trace (the GPU ops launched inside its
``ProfilerStep#N`` CPU annotation, matched by correlation id), then compares total GPU busy time
(sum of kernel, memcpy and memset durations), op counts and the split by operator family.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from fastrack.atomic import write_text_atomic  # noqa: E402
from tracegen.emulation.costmodel import kernel_family  # noqa: E402

FAMILY_ORDER = ("gemm", "attention", "elementwise", "reduction", "memcpy/memset", "other")

WORKLOADS = [
    {
        "name": "BERT-small (bert_uncased_L-4_H-512_A-8), batch 1 x 141 tokens, bf16 inference",
        "real": "h100_bert_small_uncased.json.gz",
        "script": ROOT / "examples" / "bert_infer.py",
        "args": ["--batch", "1", "--seq", "141", "--iters", "3"],
        "skip": 2,
    },
    {
        "name": "Qwen1.5-0.5B (24 layers, hidden 1024), batch 16 x 559 tokens, bf16 forward (no LM head)",
        "real": "h100_qwen1.5_0.5b_chat.json.gz",
        "script": ROOT / "examples" / "qwen_forward.py",
        "args": ["--batch", "16", "--seq", "559", "--iters", "2"],
        "skip": 1,
    },
]


def family(name: str) -> str:
    fam = kernel_family(name)
    return "memcpy/memset" if fam in ("memcpy", "memset") else fam


def real_step_ops(path: Path) -> list[tuple[str, float]]:
    """(name, duration us) of the GPU ops launched inside the trace's ProfilerStep CPU annotation."""
    with gzip.open(path, "rt") as f:
        ev = json.load(f)["traceEvents"]
    steps = [e for e in ev if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")]
    step = steps[-1]
    t0, t1 = step["ts"], step["ts"] + step["dur"]
    corr = {e["args"]["correlation"] for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
            and t0 <= e["ts"] <= t1 and "correlation" in e.get("args", {})}
    return [(e["name"], float(e["dur"])) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
            and e.get("args", {}).get("correlation") in corr]


def emulated_ops(w) -> list[tuple[str, float]]:
    from tracegen.capture import capture_emulated

    table, _ = capture_emulated(w["script"], w["args"], device="h100-sxm", skip_steps=w["skip"], steps=1)
    kinds = table.column("kind").to_pylist()
    names = table.column("name").to_pylist()
    durs = table.column("dur_ns").to_pylist()
    return [(n, d / 1000.0) for n, k, d in zip(names, kinds, durs) if k in ("kernel", "memcpy", "memset")]


def summarize(ops):
    busy = collections.Counter()
    count = collections.Counter()
    for name, dur in ops:
        f = family(name)
        busy[f] += dur
        count[f] += 1
    return busy, count


def table_for(w, real_dir: Path) -> tuple[str, float]:
    real = real_step_ops(real_dir / w["real"])
    emu = emulated_ops(w)
    rb, rc = summarize(real)
    eb, ec = summarize(emu)
    tr, te = sum(rb.values()), sum(eb.values())
    err = (te - tr) / tr * 100
    lines = [f"**{w['name']}** (real: `{w['real']}`)", "",
             "| family | real busy (us) | emulated busy (us) | real ops | emulated ops |",
             "|---|---:|---:|---:|---:|"]
    for f in FAMILY_ORDER:
        lines.append(f"| {f} | {rb[f]:.1f} | {eb[f]:.1f} | {rc[f]} | {ec[f]} |")
    lines.append(f"| **total** | **{tr:.1f}** | **{te:.1f}** ({err:+.1f}%) | **{sum(rc.values())}** | "
                 f"**{sum(ec.values())}** |")
    return "\n".join(lines) + "\n", err


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--real-dir", type=Path, default=ROOT / "tests" / "data",
                   help="folder holding the real H100 traces [tests/data]")
    p.add_argument("--out", type=Path, help="also write the tables to this Markdown file")
    args = p.parse_args()
    parts, worst = [], 0.0
    for w in WORKLOADS:
        text, err = table_for(w, args.real_dir)
        parts.append(text)
        worst = max(worst, abs(err))
    out = "\n".join(parts)
    print(out)
    print(f"largest total-busy-time error: {worst:.1f}% (target: within 25%)")
    if args.out:
        write_text_atomic(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
