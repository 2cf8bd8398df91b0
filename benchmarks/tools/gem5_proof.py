#!/usr/bin/env python
"""The gem5 proof of docs/gem5.md "Proven against": export, run in gem5, compare (a script, not a test).

    python benchmarks/tools/gem5_proof.py --gem5 /path/to/gem5/build/NULL/gem5.opt [--out DIR] [--only NAME ...]

Needs a gem5 built with this checkout's extension (``scons EXTRAS=models/h100/gem5 ...``,
docs/gem5.md "Build"). For each case below it writes ``replay export-gem5`` into ``DIR/NAME``, runs
``gem5.opt -d DIR/m5out-NAME DIR/NAME/run_gem5.py``, replays the same trace in Python
(``replay --json``) and prints one row: nodes, the Python makespan, gem5's ``sim_ticks`` (which
must be the makespan x 1000), the replayer's ``match``, the nodes the resource objects priced and
their ``priceMismatches``, and whether every lane's ``laneBusyNs`` and ``laneOps`` equal
``expected.json``. Exit 1 when any case disagrees (the row says where). The synthetic traces are
written into ``DIR`` first (``tracegen synth``, and :func:`write_threads` with the tests' trace factory). ``DIR`` defaults to ``benchmarks/out/gem5``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent  # benchmarks/tools/ -> the repository root

SYNTH = {"random20k.parquet": ["random", "--ops", "20000", "--seed", "1"],
         "ranks500.parquet": ["random", "--ops", "100000", "--seed", "0", "--ranks", "500"]}
THREADS = "threads4.parquet"  # four host threads sharing the channel locks: written by write_threads()
# name -> (trace: a shipped one, or a SYNTH file in DIR; replay arguments)
CASES = {
    "llama-baseline": ("traces/llama.parquet", ["--protocol", "baseline"]),
    "llama-fastrack": ("traces/llama.parquet", ["--protocol", "fastrack"]),
    "llama-b300": ("traces/llama.parquet", ["--protocol", "baseline", "--preset", "b300"]),
    "serving-baseline": ("traces/serving.parquet", ["--protocol", "baseline"]),
    "offload-baseline": ("traces/serving_offload.parquet", ["--protocol", "baseline"]),
    "random20k-baseline": ("random20k.parquet", ["--protocol", "baseline"]),
    "ranks500-baseline": ("ranks500.parquet", ["--protocol", "baseline"]),
    "threads4-baseline": (THREADS, ["--protocol", "baseline"]),
    "threads4-2ch-baseline": (THREADS, ["--protocol", "baseline", "--set", "ce.secure_channels_per_direction=2"]),
}


def write_threads(path: Path) -> None:
    """Four host threads, each issuing pinned copies of 256 KiB to 4 MiB (H2D and D2H) on its own
    stream, 400 in all: the channel locks (``csl_h2d``, ``csl_d2h``) are contended."""
    sys.path.insert(0, str(ROOT / "tests"))
    from tracefactory import op, write

    ops: list[dict] = []
    last: dict[int, int] = {}
    for k in range(400):
        th = k % 4
        h2d = bool(k % 3)
        start = 1000 + 20_000 * (k // 4)
        call = len(ops)
        ops.append(op("runtime", "cudaMemcpyAsync", start, 4000, thread=th + 1, rank=0,
                      deps=[(last[th], "program")] if th in last else []))
        ops.append(op("memcpy", "Memcpy HtoD (Pinned -> Device)" if h2d else "Memcpy DtoH (Device -> Pinned)",
                      start + 5000, 40_000, stream=th + 1, device=0, rank=0, bytes=(256 << 10) << (k % 5),
                      copy_dir="H2D" if h2d else "D2H", host_mem="pinned", deps=[(call, "launch")]))
        last[th] = call
    write(path, ops)


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, **kw)


def _lane_key(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def prove(name: str, trace: Path, args: list[str], gem5: Path, out: Path) -> tuple[bool, str]:
    case = out / name
    m5out = out / f"m5out-{name}"
    exp = _run([sys.executable, "-m", "replay.frontend.cli", "export-gem5", str(trace), *args, "-o", str(case)])
    if exp.returncode:
        return False, f"{name}: export failed: {exp.stderr.strip()[-300:]}"
    start = time.perf_counter()
    sim = _run([str(gem5), "-d", str(m5out), str(case / "run_gem5.py")])
    wall = time.perf_counter() - start
    lines = [ln for ln in sim.stdout.splitlines() if ln.startswith("{")]
    if sim.returncode or not lines:
        return False, f"{name}: gem5 exit {sim.returncode}: {(sim.stderr or sim.stdout).strip()[-300:]}"
    res = json.loads(lines[-1])
    expected = json.loads((case / "expected.json").read_text())
    rep = _run([sys.executable, "-m", "replay.frontend.cli", str(trace), "--json", "--no-reference", *args])
    if rep.returncode:
        return False, f"{name}: the Python replay failed: {rep.stderr.strip()[-300:]}"
    py = json.loads(rep.stdout)
    stats = (m5out / "stats.txt").read_text()
    mismatches = sum(int(x) for x in re.findall(r"priceMismatches\s+(\d+)", stats))
    priced = sum(int(x) for x in re.findall(r"\.priced\s+(\d+)", stats))
    busy = {m.group(1): int(float(m.group(2))) for m in re.finditer(r"laneBusyNs::(\S+)\s+(\S+)", stats)}
    ops = {m.group(1): int(float(m.group(2))) for m in re.finditer(r"laneOps::(\S+)\s+(\S+)", stats)}
    lanes_equal = all(busy.get(_lane_key(r["name"])) == r["busy_ns"] and ops.get(_lane_key(r["name"])) == r["ops"]
                      for r in expected["resources"])
    makespan = py["makespan_ns"]
    ok = (res.get("match") is True and res["sim_ticks"] == makespan * 1000
          and mismatches == 0 and lanes_equal)
    row = (f"{name}: nodes {expected['nodes']:,}, Python makespan {makespan:,} ns, sim_ticks {res['sim_ticks']:,}, "
           f"match {res.get('match')}, priced {priced:,}, priceMismatches {mismatches}, "
           f"lanes {len(expected['resources']):,} {'all equal' if lanes_equal else 'DIFFER'}, gem5 wall {wall:.2f} s"
           f"{'' if ok else '  <-- DISAGREES'}")
    return ok, row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gem5", type=Path, required=True, help="gem5.opt built with this checkout's extension")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "gem5")
    ap.add_argument("--only", nargs="*", choices=sorted(CASES), help="run only these cases")
    a = ap.parse_args(argv)
    if not a.gem5.is_file():
        print(f"error: {a.gem5}: not a file (give the gem5.opt built with this extension)", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    names = a.only or list(CASES)
    for fname, synth in SYNTH.items():
        if any(CASES[n][0] == fname for n in names) and not (a.out / fname).exists():
            _run([sys.executable, "-m", "tracegen.cli", "synth", *synth, "-o", str(a.out / fname)], check=True)
    if any(CASES[n][0] == THREADS for n in names) and not (a.out / THREADS).exists():
        write_threads(a.out / THREADS)
    good = True
    for name in names:
        trace, args = CASES[name]
        path = ROOT / trace if trace.startswith("traces/") else a.out / trace
        ok, row = prove(name, path, args, a.gem5, a.out)
        good &= ok
        print(row, flush=True)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
