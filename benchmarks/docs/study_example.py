#!/usr/bin/env python
"""Regenerate the worked study of docs/studies.md: its table and docs/img/study_example.png.

    python benchmarks/docs/study_example.py --overwrite [--executor dask://HOST:PORT]

Runs ``replay sweep --study docs/studies/pcie_x_crypto.toml`` (PCIe bandwidth x CPU AES-GCM
throughput per core x protocol on the shipped Llama traces and a transfer-heavy synthetic trace) into
``benchmarks/out/study_example.parquet`` (replaced: ``--overwrite``), then
``replay plot`` (slowdown against CPU crypto throughput, one panel per trace) into
docs/img/study_example.png (which the checkout ships: ``--overwrite`` replaces it; without it the
script stops before any work, exit 2), and prints the
Markdown table pasted into docs/studies.md. The synthetic trace (``tracegen synth random --ops
20000 --seed 0``) is generated into ``benchmarks/out/`` when missing; when the shipped traces are
missing the study runs on the synthetic trace alone and says so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]  # benchmarks/<kind>/ -> the repository root
STUDY = ROOT / "docs" / "studies" / "pcie_x_crypto.toml"
OUT = ROOT / "benchmarks" / "out" / "study_example.parquet"
FIG = ROOT / "docs" / "img" / "study_example.png"
SHIPPED = [ROOT / "traces" / "llama.parquet", ROOT / "traces" / "resnet.parquet"]
PCIE = "pcie.h2d_bandwidth_gb_s"
CRYPTO = "cpu_crypto.core_gb_s"


def _invoke(main, args: list[str]) -> None:
    r = CliRunner().invoke(main, args, catch_exceptions=False)
    sys.stderr.write(r.output)
    if r.exit_code:
        sys.exit(r.exit_code)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--executor", default="local")
    ap.add_argument("--overwrite", action="store_true", help=f"replace {FIG.relative_to(ROOT)} (the checkout ships it)")
    args = ap.parse_args()
    if FIG.exists() and not args.overwrite:
        print(f"error: {FIG.relative_to(ROOT)} exists; pass --overwrite to regenerate it", file=sys.stderr)
        sys.exit(2)
    from replay.frontend.cli import main as replay_main
    from replay.names import NONE
    from tracegen.cli import main as tracegen_main

    # the study's third trace: synthetic and transfer-heavy, generated here (benchmarks/out is not committed)
    synth = ROOT / "benchmarks" / "out" / "random-20000-s0.parquet"
    if not synth.exists():
        synth.parent.mkdir(parents=True, exist_ok=True)
        _invoke(tracegen_main, ["synth", "random", "--ops", "20000", "--seed", "0", "-o", str(synth)])
    traces: list[str] = []
    if not all(p.exists() for p in SHIPPED):
        print(f"note: shipped traces missing; using only {synth.relative_to(ROOT)}", file=sys.stderr)
        traces = [str(synth)]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    _invoke(replay_main, ["sweep", *traces, "--study", str(STUDY), "-o", str(OUT), "--overwrite",
                          "--executor", args.executor])
    _invoke(replay_main, ["plot", str(OUT), "--x", CRYPTO, "--y", "slowdown", "--hue", "protocol",
                          "--facet", "trace", "--title", "slowdown vs no TEE (h100-sxm)", "-o", str(FIG),
                          *(["--overwrite"] if args.overwrite else [])])
    df = pd.read_parquet(OUT)
    df["trace"] = df["trace"].map(lambda t: Path(t).name)
    tab = df.pivot_table(index=["trace", PCIE, CRYPTO], columns="protocol", values="slowdown").reset_index()
    none_ms = df[df["protocol"] == NONE].set_index(["trace", PCIE, CRYPTO])["makespan_ns"] / 1e6
    tab["none (ms)"] = [none_ms.get((t, p, c)) for t, p, c in zip(tab["trace"], tab[PCIE], tab[CRYPTO])]
    cols = ["trace", PCIE, CRYPTO, "none (ms)"] + [c for c in ("baseline", "fastrack") if c in tab.columns]
    lines = ["| " + " | ".join(["trace", "PCIe GB/s", "CPU crypto GB/s/core", "none (ms)", "baseline x",
                                "fastrack x"][:len(cols)]) + " |", "|" + "---|" * len(cols)]
    for _, r in tab[cols].iterrows():
        lines.append("| " + " | ".join([r["trace"], f"{r[PCIE]:g}", f"{r[CRYPTO]:g}", f"{r['none (ms)']:.2f}"]
                                       + [f"{r[c]:.2f}" for c in cols[4:]]) + " |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
