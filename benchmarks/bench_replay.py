#!/usr/bin/env python
"""Replay speed and memory against a bare Parquet read (a script, not a test).

    python benchmarks/bench_replay.py [--ops 1000000] [--protocols captured,none,baseline,fastrack]

1. Generates ``tracegen synth random --ops N --seed S`` into ``benchmarks/out/`` (gitignored)
   unless the file is already there.
2. Times a bare ``pyarrow.parquet.read_table`` of that file (best of 3, in this process).
3. For each protocol, runs ``replay --protocol P TRACE --json`` end to end in a subprocess
   (interpreter start, imports, read, transform, schedule, JSON out), measuring its wall time and
   peak RSS (``/usr/bin/time -v`` when present, else ``getrusage(RUSAGE_CHILDREN)``, which is the
   peak of *all* children so far, so an upper bound).
4. Times each protocol's graph transform alone, in this process (the graph built once, the
   default preset of the default model; the second of two runs, so loading compiled helpers is
   not counted).
5. Prints one table: read time, replay time, ratio (target <= 20x), peak memory per op (target
   < 1.5 KiB), transform time. A protocol the replay does not know (or a replay that is not installed yet) is
   reported as unavailable, not as a crash. ``--strict`` exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
RATIO_TARGET = 20.0  # replay wall time / bare read time
BYTES_PER_OP_TARGET = 1.5 * 1024  # peak RSS of the replay process / ops
TIME_BIN = "/usr/bin/time"


def _tool(name: str, module: str) -> list[str]:
    """The console script next to this interpreter, else on PATH, else ``python -c`` its main."""
    local = Path(sys.executable).with_name(name)
    if local.exists():
        return [str(local)]
    found = shutil.which(name)
    if found:
        return [found]
    return [sys.executable, "-c", f"import sys; sys.argv[0] = {name!r}; from {module} import main; main()"]


def ensure_trace(ops: int, seed: int) -> Path:
    path = OUT / f"random-{ops}-s{seed}.parquet"
    if path.exists():
        print(f"using {path.relative_to(HERE.parent)}")
        return path
    OUT.mkdir(parents=True, exist_ok=True)
    cmd = _tool("tracegen", "tracegen.cli") + ["synth", "random", "--ops", str(ops), "--seed", str(seed), "-o", str(path)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    print(f"generated in {time.perf_counter() - t0:.2f} s")
    return path


def time_read(path: Path, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        table = pq.read_table(path)
        best = min(best, time.perf_counter() - t0)
        del table
    return best


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:160] if lines else ""


def time_replay(path: Path, protocol: str, timeout: float) -> dict:
    """Wall time, peak RSS and parsed JSON of one replay run; ``status`` says what happened."""
    cmd = _tool("replay", "replay.cli") + ["--protocol", protocol, str(path), "--json"]
    rss_file = None
    if os.path.exists(TIME_BIN):
        fd, rss_file = tempfile.mkstemp(prefix="bench-rss-", suffix=".txt")
        os.close(fd)
        cmd = [TIME_BIN, "-v", "-o", rss_file] + cmd
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": f"timed out after {timeout:.0f} s"}
    finally:
        wall = time.perf_counter() - t0
    peak_kib = None
    peak_how = "getrusage"
    if rss_file:
        text = Path(rss_file).read_text(errors="replace")
        os.unlink(rss_file)
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
        if m:
            peak_kib, peak_how = int(m.group(1)), "time -v"
    if peak_kib is None:
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    if proc.returncode != 0:
        why = _last_line(proc.stderr) or _last_line(proc.stdout) or f"exit {proc.returncode}"
        return {"status": f"unavailable (exit {proc.returncode}: {why})"}
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        return {"status": f"unavailable (output is not JSON: {_last_line(proc.stdout)!r})"}
    if not isinstance(result, dict) or "makespan_ns" not in result:
        return {"status": "unavailable (JSON has no makespan_ns)"}
    return {"status": "ok", "wall": wall, "peak_bytes": peak_kib * 1024, "peak_how": peak_how,
            "makespan_ns": result.get("makespan_ns"), "ops": result.get("ops")}


def time_transforms(path: Path, protocols: list[str]) -> dict[str, str]:
    """Seconds the transform of each protocol takes on the trace's graph ("-" for captured)."""
    try:
        from replay.plugins import DEFAULT_MODEL, load_model, load_protocol
        from replay.run import load_graph
    except ImportError as exc:
        return {p: f"unavailable ({exc})" for p in protocols}
    try:
        graph, _ = load_graph(path)
        hw = load_model(DEFAULT_MODEL).from_preset()
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return {p: f"unavailable ({type(exc).__name__})" for p in protocols}
    out = {}
    for proto_name in protocols:
        if proto_name == "captured":
            out[proto_name] = "-"
            continue
        try:
            transform = load_protocol(proto_name)
        except Exception as exc:  # noqa: BLE001 - reported in the table, like an unknown protocol for replay
            out[proto_name] = f"unavailable ({type(exc).__name__})"
            continue
        transform(graph, hw)
        t0 = time.perf_counter()
        transform(graph, hw)
        out[proto_name] = f"{time.perf_counter() - t0:.3f}"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=1_000_000, help="ops in the synthetic trace (default 1000000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--protocols", default="captured", help="comma-separated, e.g. captured,none,baseline,fastrack")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per replay run")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a measured protocol misses a target")
    args = ap.parse_args(argv)
    if args.ops < 1:
        ap.error("--ops must be at least 1")
    protocols = [p.strip() for p in args.protocols.split(",") if p.strip()]

    path = ensure_trace(args.ops, args.seed)
    ops = pq.read_metadata(path).num_rows
    read_s = time_read(path)
    print(f"trace: {ops} ops, {path.stat().st_size / 2**20:.1f} MiB; bare read_table: {read_s:.3f} s\n")

    header = ["protocol", "read s", "replay s", "ratio", "peak MiB", "B/op", "makespan ms", "status", "transform s"]
    rows, missed = [], False
    for proto in protocols:
        r = time_replay(path, proto, args.timeout)
        if r["status"] != "ok":
            rows.append([proto, f"{read_s:.3f}", "-", "-", "-", "-", "-", r["status"]])
            continue
        ratio = r["wall"] / read_s if read_s > 0 else float("inf")
        per_op = r["peak_bytes"] / max(ops, 1)
        ok_ratio, ok_mem = ratio <= RATIO_TARGET, per_op < BYTES_PER_OP_TARGET
        missed |= not (ok_ratio and ok_mem)
        notes = [] if ok_ratio else [f"ratio > {RATIO_TARGET:.0f}x"]
        notes += [] if ok_mem else [f"memory >= {BYTES_PER_OP_TARGET:.0f} B/op"]
        if r["ops"] is not None and r["ops"] != ops:
            notes.append(f"replay reports {r['ops']} ops")
        if r["peak_how"] != "time -v":
            notes.append("peak = max over children")
        makespan = f"{r['makespan_ns'] / 1e6:.3f}" if isinstance(r["makespan_ns"], (int, float)) else "?"
        rows.append([proto, f"{read_s:.3f}", f"{r['wall']:.3f}", f"{ratio:.1f}x", f"{r['peak_bytes'] / 2**20:.0f}",
                     f"{per_op:.0f}", makespan, "ok" if not notes else "MISS: " + "; ".join(notes)])

    transform_s = time_transforms(path, protocols)
    for row in rows:
        row.append(transform_s[row[0]])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
    print(f"\ntargets: ratio <= {RATIO_TARGET:.0f}x, peak memory < {BYTES_PER_OP_TARGET:.0f} B/op")
    return 1 if (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
