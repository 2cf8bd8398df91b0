"""Validation of the H100 TEE model against the published claims: regenerates docs/validation.md.

Usage:
    python benchmarks/validation/validate_model.py                            # print the section (Markdown)
    python benchmarks/validation/validate_model.py --write docs/validation.md # replace it between the markers

``--write`` replaces the text between ``<!-- validation:begin -->`` and ``<!-- validation:end -->``
of the file, atomically; a file without exactly one pair of markers is refused (one line, exit 2,
nothing written). What it computes (nothing here is fitted to the published figures):

1. Copy microbenchmarks (``tracegen synth memcpy``, 4 KiB to 1 GiB, H2D and D2H, pinned and
   pageable, 4 copies each): time per copy under none, baseline and fastrack, and baseline / none,
   against Fastrack's CPU-GPU communication cost of 12.69x-33.53x [S1]; the 1 GiB H2D rate against
   the one public end-to-end CC copy rate, ~5.26 GB/s [S14]; both host presets.
2. Each single fix on a 1 GiB H2D copy, and the sensitivity to ``ce.crypto_gb_s`` (unpublished).
3. The shipped traces (traces/*.parquet) under every protocol and both host presets, against
   inference +54% to +904% and training +10% to +455% over no TEE, and "up to 84.6%" less runtime.
4. The encrypted-submission cost (no public measurement [S10]) from 0.5 to 10 us.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fastrack_core.docsection import between, emit_section, replace_section
from fastrack_core.errors import FastrackError
from fastrack_core.traceio import Trace, read_trace
from replay.pipeline.build import build_graph
from replay.pipeline.run import replay_graph
from tracegen.synth import memcpy_table

ROOT = Path(__file__).resolve().parents[2]  # benchmarks/<kind>/ -> the repository root
BEGIN, END = "<!-- validation:begin -->", "<!-- validation:end -->"
SIZES = [("4 KiB", 4 << 10), ("64 KiB", 64 << 10), ("1 MiB", 1 << 20), ("16 MiB", 16 << 20),
         ("256 MiB", 256 << 20), ("1 GiB", 1 << 30)]
FIXES = ["fastrack:direct", "fastrack:auth", "fastrack:overlap"]
PROTOCOLS = ["none", "baseline", *FIXES, "fastrack"]
HOSTS = ["h100-sxm", "h100-sxm-aesni"]
TRACES = {"resnet.parquet": "training", "llama.parquet": "training", "gpt2_xl.parquet": "training",
          "bert_infer.parquet": "inference", "llama_infer.parquet": "inference"}
INFERENCE = [name for name, kind in TRACES.items() if kind == "inference"]
SUBMIT_NS = [500, 1600, 5000, 10000]
CE_GB_S = [2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]
REPEAT = 4
PUBLISHED = "published [S1]: communication 12.69x-33.53x; inference +54% to +904%; training +10% to +455%; " \
            "Fastrack up to 84.6% less runtime"


class _Out:
    def __init__(self):
        self.lines: list[str] = []

    def __call__(self, text: str = "") -> None:
        self.lines.append(text)


def _us(ns: float) -> str:
    return f"{ns / 1e3:,.1f}"


def _copy_graph(size: int, direction: str, memory: str):
    return build_graph(Trace(table=memcpy_table(size, direction, memory, REPEAT), metadata={}))


def _per_copy(graph, protocol: str, preset: str, overrides=()) -> float:
    return replay_graph(graph, protocol, preset=preset, overrides=list(overrides)).result.makespan_ns / REPEAT


HOST_DATA = ("direct.h2d=none", "direct.d2h=none")  # host-built data: one CPU pass under CC
CLIENT_DATA = ("direct.h2d=all", "direct.d2h=all")  # data that arrived encrypted: two CPU passes


def microbenchmarks(out: _Out, preset: str) -> None:
    out(f"**Copies, preset `{preset}`**, host-built data (`--set direct.h2d=none`: one CPU AES-GCM pass, as in a "
        "plain cudaMemcpy benchmark); time per copy from the call to completion, us:")
    out()
    out("| direction | memory | size | none | baseline | fastrack | baseline / none | fastrack / none |")
    out("|---|---|---|---|---|---|---|---|")
    ratios = []
    for direction in ("h2d", "d2h"):
        for memory in ("pinned", "pageable"):
            for label, size in SIZES:
                g = _copy_graph(size, direction, memory)
                t = {p: _per_copy(g, p, preset, HOST_DATA) for p in ("none", "baseline", "fastrack")}
                r = t["baseline"] / t["none"]
                ratios.append((r, size))
                out(f"| {direction.upper()} | {memory} | {label} | {_us(t['none'])} | {_us(t['baseline'])} | "
                    f"{_us(t['fastrack'])} | {r:.2f}x | {t['fastrack'] / t['none']:.2f}x |")
    big = [r for r, size in ratios if size >= 1 << 20]
    out()
    out(f"baseline / none: {min(r for r, _ in ratios):.2f}x to {max(r for r, _ in ratios):.2f}x over all sizes, "
        f"{min(big):.2f}x to {max(big):.2f}x from 1 MiB up (published: 12.69x to 33.53x).")
    out()


def rates(out: _Out) -> None:
    out("**End-to-end CC copy rate** (1 GiB, pinned, host-built data, baseline; [S14] measured ~5.26 GB/s on an "
        "H200 with a VAES host, size and direction not stated):")
    out()
    out("| preset | H2D GB/s | D2H GB/s | H2D baseline / none | D2H baseline / none |")
    out("|---|---|---|---|---|")
    size = 1 << 30
    for preset in HOSTS:
        row = []
        ratio = []
        for direction in ("h2d", "d2h"):
            g = _copy_graph(size, direction, "pinned")
            base, none = _per_copy(g, "baseline", preset, HOST_DATA), _per_copy(g, "none", preset, HOST_DATA)
            row.append(f"{size / base:.2f}")
            ratio.append(f"{base / none:.2f}x")
        out(f"| `{preset}` | {row[0]} | {row[1]} | {ratio[0]} | {ratio[1]} |")
    out()


def fixes(out: _Out, preset: str) -> None:
    out(f"**Each fix on one 1 GiB copy** (`{preset}`, ms). Host-built data: `direct.*=none` (one CPU pass, "
        "nothing for fix 1 to skip); client data: `direct.*=all` (the data arrived encrypted: the baseline pays two "
        "CPU passes, fix 1 none):")
    out()
    out("| copy | none | baseline | " + " | ".join(FIXES) + " | fastrack |")
    out("|---|---|---|" + "---|" * len(FIXES) + "---|")
    size = 1 << 30
    for direction in ("h2d", "d2h"):
        g = _copy_graph(size, direction, "pinned")
        for label, ov in (("host-built data", HOST_DATA), ("client data", CLIENT_DATA)):
            t = {p: _per_copy(g, p, preset, ov) for p in PROTOCOLS}
            out(f"| {direction.upper()} pinned, {label} | " + " | ".join(f"{t[p] / 1e6:,.2f}" for p in PROTOCOLS) + " |")
    out()


def ce_sensitivity(out: _Out, preset: str, graphs) -> None:
    out(f"**Sensitivity to `ce.crypto_gb_s`** (unpublished; `{preset}`), ms: one 1 GiB H2D pinned copy of host-built "
        "data (baseline, `fastrack:auth`) and of client data (`fastrack:direct`, `fastrack`: no CPU pass left, so "
        "the CE can bound the copy), and ResNet training (default rule):")
    out()
    out("| ce.crypto_gb_s | host data: baseline | host data: fastrack:auth | client data: fastrack:direct | "
        "client data: fastrack | resnet baseline | resnet fastrack:auth |")
    out("|---|---|---|---|---|---|---|")
    g = _copy_graph(1 << 30, "h2d", "pinned")
    resnet = graphs.get("resnet.parquet")
    for rate in CE_GB_S:
        ov = [f"ce.crypto_gb_s={rate}"]
        cells = [f"{_per_copy(g, p, preset, [*ov, *HOST_DATA]) / 1e6:,.2f}" for p in ("baseline", "fastrack:auth")]
        cells += [f"{_per_copy(g, p, preset, [*ov, *CLIENT_DATA]) / 1e6:,.2f}" for p in ("fastrack:direct", "fastrack")]
        if resnet is not None:
            cells += [f"{replay_graph(resnet, p, preset=preset, overrides=ov).result.makespan_ns / 1e6:,.2f}"
                      for p in ("baseline", "fastrack:auth")]
        else:
            cells += ["-", "-"]
        out(f"| {rate:g} | " + " | ".join(cells) + " |")
    out()


def traces(out: _Out, preset: str, graphs) -> None:
    out(f"**Shipped traces, preset `{preset}`** (default `[direct]` rule; makespan, and over `none`):")
    out()
    out("| trace | kind | none | " + " | ".join(PROTOCOLS[1:]) + " | Fastrack removes |")
    out("|---|---|---|" + "---|" * (len(PROTOCOLS) - 1) + "---|")
    for name, kind in TRACES.items():
        if name not in graphs:
            continue
        t = {p: replay_graph(graphs[name], p, preset=preset).result.makespan_ns for p in PROTOCOLS}
        cells = " | ".join(f"{t[p] / 1e6:,.2f} ms ({100 * (t[p] / t['none'] - 1):+.1f}%)" for p in PROTOCOLS[1:])
        cut = 100 * (t["baseline"] - t["fastrack"]) / t["baseline"]
        out(f"| {name} | {kind} | {t['none'] / 1e6:,.2f} ms | {cells} | {cut:.1f}% |")
    out()


def submission(out: _Out, preset: str, graphs) -> None:
    out(f"**Encrypted submission cost** (no public measurement [S10]; all four `submit.*` keys set; `{preset}`): "
        "baseline over `none`:")
    out()
    out("| trace | " + " | ".join(f"{ns / 1e3:g} us" for ns in SUBMIT_NS) + " |")
    out("|---|" + "---|" * len(SUBMIT_NS))
    for name in [*INFERENCE, "llama.parquet", "resnet.parquet"]:
        if name not in graphs:
            continue
        none = replay_graph(graphs[name], "none", preset=preset).result.makespan_ns
        cells = []
        for ns in SUBMIT_NS:
            ov = [f"submit.{k}_ns={ns}" for k in ("kernel", "copy", "memset", "collective")]
            t = replay_graph(graphs[name], "baseline", preset=preset, overrides=ov).result.makespan_ns
            cells.append(f"{100 * (t / none - 1):+.1f}%")
        out(f"| {name} | " + " | ".join(cells) + " |")
    out()


def section(preset: str) -> str:
    out = _Out()
    out(f"Generated by `python benchmarks/validation/validate_model.py --write docs/validation.md` (default preset `{preset}`; "
        "microbenchmarks are `tracegen synth memcpy`, 4 copies each; traces are those of `traces/`, see "
        "traces/README.md). {}.".format(PUBLISHED))
    out()
    graphs = {name: build_graph(read_trace(ROOT / "traces" / name)) for name in TRACES
              if (ROOT / "traces" / name).exists()}
    microbenchmarks(out, preset)
    rates(out)
    fixes(out, preset)
    ce_sensitivity(out, preset, graphs)
    for host in HOSTS if preset == HOSTS[0] else [preset]:
        traces(out, host, graphs)
    submission(out, preset, graphs)
    return "\n".join(out.lines).rstrip() + "\n"


def write_section(path: Path, text: str) -> None:
    replace_section(path, BEGIN, END, between(BEGIN, text, END))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="h100-sxm")
    ap.add_argument("--write", type=Path, default=None, help="replace the section between the markers of this file")
    args = ap.parse_args(argv)
    try:
        emit_section(args.write, BEGIN, END, lambda: section(args.preset))  # --write checked before the replays
    except FastrackError as exc:
        print(f"validate_model: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
