#!/usr/bin/env python
"""One replay in two checkouts, interleaved: is a change faster or smaller? (a script, not a test)

    python benchmarks/speed/ab_replay.py TRACE OTHER_CHECKOUT [--protocol baseline] [--runs 6]

Runs ``replay --protocol P TRACE --json`` as a child process alternately in this checkout and in
``OTHER_CHECKOUT`` (a ``git worktree`` of the revision to compare with, its extensions built there:
``python setup.py build_ext --inplace``), swapping which goes first each round so drift on a busy
machine falls on both, and prints each side's CPU times (user + sys, from ``os.wait4``), their
median and the peak RSS. Each side imports ``replay`` and ``fastrack_core`` from its own checkout
(the child runs with that checkout as its working directory); the hardware plug-in
(``fastrack_h100``, models/h100) is the installed one on both sides, so a change to the plug-in
is not compared. A 2-core machine shared with other work moves single
runs by 20-40%; compare medians of several runs, never one.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def _run(tree: Path, trace: Path, protocol: str) -> tuple[float, float]:
    with tempfile.TemporaryFile() as errf:  # (a file, not a pipe: a child that fills a pipe would never exit)
        proc = subprocess.Popen([sys.executable, "-m", "replay.frontend.cli", "--protocol", protocol, str(trace),
                                 "--json"], cwd=tree, stdout=subprocess.DEVNULL, stderr=errf)
        _, status, ru = os.wait4(proc.pid, 0)
        errf.seek(0)
        err = errf.read().decode(errors="replace").strip()
    if status:
        last = err.splitlines()[-1] if err else f"wait status {status}"
        raise SystemExit(f"ab_replay.py: replay failed in {tree}: {last}")
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("other", type=Path, help="the other checkout (a git worktree with its extensions built)")
    ap.add_argument("--protocol", default="baseline")
    ap.add_argument("--runs", type=int, default=6)
    a = ap.parse_args(argv)
    if not a.trace.is_file() or not (a.other / "replay" / "frontend" / "cli.py").is_file():
        print(f"ab_replay.py: need a trace file and a checkout (got {a.trace}, {a.other})", file=sys.stderr)
        return 2
    trees = {"this": ROOT, "other": a.other.resolve()}
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in trees}
    trace = a.trace.resolve()
    for r in range(max(1, a.runs)):
        for name in (("this", "other") if r % 2 == 0 else ("other", "this")):
            got[name].append(_run(trees[name], trace, a.protocol))
    for name, runs in got.items():
        cpu = sorted(c for c, _ in runs)
        peak = sorted(m for _, m in runs)
        print(f"{name:>5} ({trees[name]}): CPU s {', '.join(f'{c:.2f}' for c in cpu)}; median {cpu[len(cpu) // 2]:.2f} s; "
              f"peak MiB {peak[0]:,.0f}-{peak[-1]:,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
