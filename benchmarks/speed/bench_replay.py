#!/usr/bin/env python
"""Replay cost against the cost of reading the trace, process against process (a script, not a test).

    python benchmarks/speed/bench_replay.py [--ops 1000000,10000000] [--protocols captured,baseline,fastrack]

What it measures (the speed targets of docs/performance.md, "Replay"):

0. Byte-compiles the project's packages first (``--no-compile`` skips it), as an installed package
   is: with PYTHONDONTWRITEBYTECODE set, every process would compile some modules from source.
1. For each size N of ``--ops``, generates ``tracegen synth random --ops N --seed S`` into
   ``benchmarks/out/`` (gitignored) unless the file is already there.
2. The floor: a bare read, ``python -c "import pyarrow.parquet as pq; pq.read_table(TRACE)"``, as a
   whole process (interpreter start and imports included), best of ``--repeat``.
3. For each protocol, ``python -m replay.frontend.cli --protocol P TRACE --json`` as a whole process (start,
   imports, read, graph, transform, schedule, JSON out), best of ``--repeat``.
4. Every figure is the **CPU time** (user + system) and the **peak RSS** of that one child process
   (``os.wait4``'s resource usage: exact per child, not a maximum over all children), so other
   work on a shared machine inflates neither much; wall time is printed for information.
5. Prints, per size, the ratio replay CPU / read CPU with the targets (1M ops: ``captured``
   <= 2x, ``baseline`` and ``fastrack`` <= 3x; 10M ops: ``captured`` <= 3x, ``baseline`` <= 3x and a
   peak within 4 GiB), and, with two sizes or more, the memory *at the margin*: the slope of peak
   RSS between the smallest and the largest size in bytes per op (targets: ``captured`` <= 300,
   ``baseline`` <= 500; the read's own slope is printed as the reference). Sizes without a
   target are measured and printed without a verdict.

Each verdict reads ``pass`` or ``MISS``. ``--strict`` exits 1 when a target is missed (for a person
at a quiet machine, never CI: times on shared machines vary).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # benchmarks/<kind>/ -> the repository root
OUT = ROOT / "benchmarks" / "out"  # shared by every benchmark (gitignored)
GIB = 2**30

# speed targets: (ops, protocol) -> max ratio of replay CPU to bare-read CPU
RATIO_TARGETS = {
    (1_000_000, "captured"): 2.0, (1_000_000, "baseline"): 3.0, (1_000_000, "fastrack"): 3.0,
    (10_000_000, "captured"): 3.0, (10_000_000, "baseline"): 3.0,
}
PEAK_TARGETS = {(10_000_000, "baseline"): 4 * GIB}  # bytes of peak RSS
MARGIN_TARGETS = {"captured": 300.0, "baseline": 500.0}  # bytes of peak RSS per extra op

READ_SNIPPET = "import sys, pyarrow.parquet as pq; pq.read_table(sys.argv[1])"


def _env() -> dict[str, str]:
    """The child sees this checkout first (so a worktree measures its own code)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def measured(cmd: list[str], timeout: float) -> dict:
    """CPU seconds (user + sys, and each part), wall seconds, peak RSS bytes, exit status, stdout and
    stderr of one child process, from ``os.wait4`` (exact for that child)."""
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f, env=_env(), cwd=ROOT)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                proc.returncode = -9
                return {"rc": None, "why": f"timed out after {timeout:.0f} s"}
            time.sleep(0.01)
        wall = time.perf_counter() - t0
        proc.returncode = rc = os.waitstatus_to_exitcode(status)
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read().decode(errors="replace"), err_f.read().decode(errors="replace")
    return {"rc": rc, "wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "user": ru.ru_utime, "sys": ru.ru_stime,
            "peak": ru.ru_maxrss * 1024, "out": out, "err": err}


def best_of(cmd: list[str], repeat: int, timeout: float) -> dict:
    """The run with the least CPU time among ``repeat`` (peak RSS: the smallest too)."""
    runs = []
    for _ in range(max(1, repeat)):
        r = measured(cmd, timeout)
        if r["rc"] != 0:
            return r
        runs.append(r)
    best = min(runs, key=lambda r: r["cpu"])
    return {**best, "peak": min(r["peak"] for r in runs)}


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:160] if lines else ""


def ensure_trace(ops: int, seed: int) -> Path:
    path = OUT / f"random-{ops}-s{seed}.parquet"
    if path.exists():
        return path
    OUT.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "tracegen.cli", "synth", "random", "--ops", str(ops), "--seed", str(seed),
                    "-o", str(path)], check=True, env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL)
    return path


def _verdict(value: float, target: float | None) -> str:
    if target is None:
        return "-"
    return "pass" if value <= target else "MISS"


PACKAGES = ("fastrack", "tracegen", "replay", "models/h100")


def byte_compile() -> None:
    """Byte-compile the project's packages, as an installed package is: with
    PYTHONDONTWRITEBYTECODE set (as on the development machines), every measured process would
    otherwise compile some of our modules from source (~0.1-0.2 s of CPU)."""
    import compileall

    for pkg in PACKAGES:
        compileall.compile_dir(str(ROOT / pkg), quiet=1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="1000000,10000000", help="comma-separated trace sizes (default 1000000,10000000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--protocols", default="captured,baseline,fastrack", help="comma-separated protocols")
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement; the least CPU time is kept")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per process")
    ap.add_argument("--json", action="store_true", help="also print the figures as one JSON object")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--no-compile", action="store_true", help="do not byte-compile the project's packages first")
    args = ap.parse_args(argv)
    if not args.no_compile:
        byte_compile()
    try:
        sizes = sorted({int(x) for x in args.ops.split(",") if x.strip()})
    except ValueError:
        ap.error("--ops takes comma-separated integers")
    if not sizes or sizes[0] < 1:
        ap.error("--ops sizes must be at least 1")
    protocols = [p.strip() for p in args.protocols.split(",") if p.strip()]

    figures: dict = {"sizes": {}, "margin": {}}
    missed = False
    rows = []
    for ops in sizes:
        path = ensure_trace(ops, args.seed)
        read = best_of([sys.executable, "-c", READ_SNIPPET, str(path)], args.repeat, args.timeout)
        if read["rc"] != 0:
            print(f"bare read of {path} failed: {_last_line(read.get('err', '')) or read.get('why')}", file=sys.stderr)
            return 2
        size = {"read": {"cpu_s": read["cpu"], "user_s": read["user"], "sys_s": read["sys"], "wall_s": read["wall"],
                         "peak_bytes": read["peak"]}, "replay": {}}
        rows.append([f"{ops:,}", "read", f"{read['cpu']:.2f}", f"{read['sys']:.2f}", f"{read['wall']:.2f}", "1.0x",
                     "1.0x", "-", f"{read['peak'] / 2**20:.0f}", "-", ""])
        for proto in protocols:
            r = best_of([sys.executable, "-m", "replay.frontend.cli", "--protocol", proto, str(path), "--json"], args.repeat,
                        args.timeout)
            if r["rc"] != 0:
                why = r.get("why") or f"exit {r['rc']}: {_last_line(r['err'])}"
                rows.append([f"{ops:,}", proto, "-", "-", "-", "-", "-", "-", "-", "-", f"unavailable ({why})"])
                continue
            try:
                makespan = json.loads(r["out"])["makespan_ns"]
            except (ValueError, KeyError, TypeError):
                makespan = None
            ratio = r["cpu"] / read["cpu"]
            user_ratio = r["user"] / read["user"] if read["user"] > 0 else None
            target = RATIO_TARGETS.get((ops, proto))
            peak_target = PEAK_TARGETS.get((ops, proto))
            verdicts = [_verdict(ratio, target)]
            if peak_target is not None:
                verdicts.append(_verdict(r["peak"], peak_target) + " (peak)")
            missed |= any(v.startswith("MISS") for v in verdicts)
            size["replay"][proto] = {"cpu_s": r["cpu"], "user_s": r["user"], "sys_s": r["sys"], "wall_s": r["wall"],
                                     "peak_bytes": r["peak"], "ratio": ratio, "user_ratio": user_ratio,
                                     "ratio_target": target, "peak_target_bytes": peak_target,
                                     "makespan_ns": makespan}
            rows.append([f"{ops:,}", proto, f"{r['cpu']:.2f}", f"{r['sys']:.2f}", f"{r['wall']:.2f}", f"{ratio:.2f}x",
                         f"{user_ratio:.2f}x" if user_ratio is not None else "-", f"<= {target:g}x" if target else "-", f"{r['peak'] / 2**20:.0f}",
                         f"<= {peak_target / 2**20:.0f}" if peak_target else "-", " ".join(verdicts)])
        figures["sizes"][ops] = size

    header = ["ops", "process", "CPU s", "of it sys", "wall s", "ratio", "user ratio", "target", "peak MiB", "target",
              "verdict"]
    print_table(header, rows)

    if len(sizes) >= 2:
        lo, hi = sizes[0], sizes[-1]
        span = hi - lo
        print(f"\nmemory at the margin (peak RSS slope between {lo:,} and {hi:,} ops):")
        mrows = []
        for name in ["read", *protocols]:
            a = figures["sizes"][lo]["read"] if name == "read" else figures["sizes"][lo]["replay"].get(name)
            b = figures["sizes"][hi]["read"] if name == "read" else figures["sizes"][hi]["replay"].get(name)
            if not a or not b:
                continue
            slope = (b["peak_bytes"] - a["peak_bytes"]) / span
            target = MARGIN_TARGETS.get(name)
            verdict = _verdict(slope, target)
            missed |= verdict == "MISS"
            figures["margin"][name] = {"bytes_per_op": slope, "target": target}
            mrows.append([name, f"{slope:.0f}", f"<= {target:g}" if target else "-", verdict])
        print_table(["process", "B/op", "target", "verdict"], mrows)
    print("\nratio = CPU time (user + sys) of the replay process / CPU time of a bare pq.read_table process on the "
          "same file, both measured in this run; targets from docs/performance.md (sizes without a target: no verdict)."
          "\nuser ratio = the same with user time only, shown without a verdict: system time is mostly the kernel "
          "zeroing fresh pages, which on a VM swings between runs (docs/performance.md, \"Figures\")")
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    return 1 if (args.strict and missed) else 0


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


if __name__ == "__main__":
    sys.exit(main())
