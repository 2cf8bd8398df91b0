#!/usr/bin/env python
"""``tracegen convert`` against a plain ``json.load`` of the same file, process against process
(a script, not a test).

    python benchmarks/speed/bench_convert.py [--traces DIR_OR_FILES] [--repeat 3] [--limit N]

What it measures (the target of docs/performance.md, "Convert": ``convert`` within 1.5x of
``json.load`` on the largest real trace):

1. The traces: the Kineto files (``*.json``, ``*.json.gz``) of ``--traces`` (default
   ``../shared/traces/real`` (beside the checkout), else ``tests/data``), largest first (by decompressed size);
   ``--limit`` keeps the first N.
2. The floor: ``python -c "gzip/open + json.load"`` of the file as a whole process (interpreter
   start, imports, decompression and parse included), best of ``--repeat``.
3. ``python -m tracegen.cli convert FILE -o OUT --overwrite`` as a whole process, best of ``--repeat``.
   Before measuring, the project's packages are byte-compiled (``compileall``; ``--no-compile``
   skips it), as an installed package is: with ``PYTHONDONTWRITEBYTECODE`` set (as on the
   development machines) every convert process would otherwise compile some 30 of our modules
   from source (~0.07 s), while the stdlib ``json`` it is compared with is already compiled.
4. Every figure is the **CPU time** (user + system) of that one child process, from ``os.wait4``
   (exact per child, so other work on a shared machine inflates it little); wall time and peak
   RSS are printed for information.
5. Prints the ratio convert CPU / json.load CPU per trace, with the verdict ``pass`` or ``MISS``
   against 1.5x for the largest trace (the target; the others are printed without one:
   on small files the fixed start-up cost of the imports dominates both sides).

``--strict`` exits 1 when the target is missed (for a person at a quiet machine, never CI).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # benchmarks/<kind>/ -> the repository root
sys.path.insert(0, str(HERE))

from bench_replay import best_of, byte_compile, print_table  # noqa: E402  (one way of measuring a child process, shared)

TARGET = 1.5  # speed target: convert CPU <= 1.5 x json.load CPU on the largest real trace
DEFAULT_TRACES = [ROOT.parent / "shared" / "traces" / "real", ROOT / "tests" / "data"]  # (the shared folder beside a checkout)

LOAD_SNIPPET = (
    "import sys, gzip, json\n"
    "p = sys.argv[1]\n"
    "f = open(p, 'rb')\n"
    "f = gzip.open(p, 'rb') if f.read(2) == b'\\x1f\\x8b' else open(p, 'rb')\n"
    "json.load(f)\n"
)


def _plain_size(path: Path) -> int:
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    if not gz:
        return path.stat().st_size
    n = 0
    with gzip.open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            n += len(chunk)
    return n


def find_traces(where: list[Path]) -> list[tuple[Path, int]]:
    """Kineto files of the given files/directories (not recursive), largest (decompressed) first."""
    files: list[Path] = []
    for w in where:
        if w.is_dir():
            files += [p for p in sorted(w.iterdir()) if p.is_file() and p.name.endswith((".json", ".json.gz"))]
        elif w.is_file():
            files.append(w)
    sized = [(p, _plain_size(p)) for p in files]
    return sorted(sized, key=lambda x: -x[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", nargs="*", type=Path, help="files or directories (default: the real traces)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the least CPU time is kept")
    ap.add_argument("--limit", type=int, default=0, help="measure only the N largest traces (0: all)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per process")
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON object")
    ap.add_argument("--strict", action="store_true", help="exit 1 when the target is missed")
    ap.add_argument("--no-compile", action="store_true", help="do not byte-compile the project's packages first")
    args = ap.parse_args(argv)
    if not args.no_compile:
        byte_compile()
    where = args.traces or [next((d for d in DEFAULT_TRACES if d.is_dir()), DEFAULT_TRACES[-1])]
    traces = find_traces(where)
    if args.limit > 0:
        traces = traces[: args.limit]
    if not traces:
        print("no Kineto traces (*.json, *.json.gz) found", file=sys.stderr)
        return 2

    rows, figures, missed = [], [], False
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.parquet")
        for i, (path, size) in enumerate(traces):
            load = best_of([sys.executable, "-c", LOAD_SNIPPET, str(path)], args.repeat, args.timeout)
            conv = best_of([sys.executable, "-m", "tracegen.cli", "convert", str(path), "-o", out, "--overwrite"],
                           args.repeat, args.timeout)
            if load["rc"] != 0 or conv["rc"] != 0:
                bad = load if load["rc"] != 0 else conv
                why = bad.get("why") or f"exit {bad['rc']}: {bad['err'].strip().splitlines()[-1:] or ''}"
                rows.append([path.name, f"{size / 2**20:.1f}", "-", "-", "-", "-", f"failed ({why})"])
                missed |= i == 0
                continue
            ratio = conv["cpu"] / load["cpu"]
            target = TARGET if i == 0 else None
            verdict = "-" if target is None else ("pass" if ratio <= target else "MISS")
            missed |= verdict == "MISS"
            rows.append([path.name, f"{size / 2**20:.1f}", f"{load['cpu']:.2f}", f"{conv['cpu']:.2f}",
                         f"{conv['wall']:.2f}", f"{conv['peak'] / 2**20:.0f} / {load['peak'] / 2**20:.0f}",
                         f"{ratio:.2f}x" + (f" (<= {target:g}x) {verdict}" if target else "")])
            figures.append({"trace": path.name, "plain_bytes": size, "json_load_cpu_s": load["cpu"],
                            "convert_cpu_s": conv["cpu"], "convert_wall_s": conv["wall"],
                            "convert_peak_bytes": conv["peak"], "json_load_peak_bytes": load["peak"],
                            "ratio": ratio, "target": target})
    print_table(["trace", "MiB (plain)", "json.load CPU s", "convert CPU s", "convert wall s", "peak MiB conv/load",
            "ratio"], rows)
    print(f"\nratio = CPU time (user + sys) of the convert process / CPU time of a gzip + json.load process on the "
          f"same file, best of {args.repeat}; target (docs/performance.md) for the largest trace only")
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    return 1 if (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
