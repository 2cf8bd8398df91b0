#!/usr/bin/env python
"""What writing a timeline costs, as a ratio to a floor measured in the same run (a script, not a test).

    python benchmarks/speed/bench_timeline.py [--ops 200000] [--protocol baseline] [--levels 1,6]

1. Generates ``tracegen synth random --ops N --seed 0`` into ``benchmarks/out/`` (gitignored)
   unless it is there, and replays it once under the protocol (graph, transform, schedule: not
   timed here).
2. The **floor**: the same events (our own JSON output, parsed back into Python dicts before the
   clock starts) dumped with ``orjson`` a block of 50,000 at a time, joined as our file joins them,
   and written to a file. It is what any writer pays to serialise these events at all.
3. The **compressor**: the one the writer uses (ISA-L level 1, or zlib 1 without ``isal``), and
   zlib at each ``--levels`` for comparison, on the same JSON bytes.
4. Ours, each from the replay's graph and schedule: the layout (``build_layout``), then the JSON
   writer, the ``.json.gz`` writer (at ``GZIP_LEVEL``) and the ``.pftrace`` writer.

Every figure is CPU time of this process (``time.process_time``, best of ``--repeat``), so other
work on a shared machine inflates it little. Printed: seconds, and the ratios of the targets
(docs/timelines.md, "Speed"): JSON (layout + writer) <= 1.3x the floor; ``.json.gz`` <= 1.3x
(floor + the compressor used); ``.pftrace`` <= 2x the JSON floor. Compressed sizes are printed
for each compressor, the basis of the choice. Needs ``orjson`` (``pip install '.[bench]'``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OUT = ROOT / "benchmarks" / "out"
BLOCK = 50_000
TARGETS = {"json": 1.3, "json.gz": 1.3, "pftrace": 2.0}


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=200_000)
    ap.add_argument("--protocol", default="baseline")
    ap.add_argument("--levels", default="1,6", help="zlib levels to measure the compressor at")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    import orjson

    from replay.exporters.timeline.chrome import GZIP_LEVEL, _deflate, open_sink, write_chrome
    from replay.exporters.timeline.layout import build_layout
    from replay.exporters.timeline.pftrace import write_pftrace
    from replay.pipeline.run import load_graph, prepare, replay_prepared

    OUT.mkdir(parents=True, exist_ok=True)
    trace = OUT / f"synth_random_{args.ops}_s0.parquet"
    if not trace.exists():
        subprocess.run([sys.executable, "-m", "tracegen.cli", "synth", "random", "--ops", str(args.ops), "--seed", "0",
                        "-o", str(trace)], check=True)
    graph, tr = load_graph(trace)
    rep = replay_prepared(prepare(graph, args.protocol), trace_ops=tr.num_ops)
    g, s = rep.graph, rep.schedule
    print(f"{args.ops:,} ops under {args.protocol}: {g.n:,} nodes")

    with tempfile.TemporaryDirectory(dir=OUT) as tmp:
        target = os.path.join(tmp, "tl")
        layout = build_layout(g, s, args.protocol)
        buf = io.BytesIO()
        write_chrome(buf, g, s, layout, args.protocol, {})
        text = buf.getvalue()
        head, _, body = text.partition(b"[\n")
        events = [json.loads(line.rstrip(b",")) for line in body.split(b"\n") if line.startswith(b"{")]
        del buf

        def floor():
            with open(target, "wb") as f:
                f.write(head + b"[\n")
                for lo in range(0, len(events), BLOCK):
                    f.write((b",\n" if lo else b"") + b",\n".join(map(orjson.dumps, events[lo:lo + BLOCK])))
                f.write(b"\n]}\n")

        blocks = [text[lo:lo + (8 << 20)] for lo in range(0, len(text), 8 << 20)]

        def compressor(level, mod=zlib):
            def run():
                z = mod.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
                n = sum(len(z.compress(b)) for b in blocks) + len(z.flush())
                run.size = n
            return run

        def ours(fmt):
            def run():
                lay = build_layout(g, s, args.protocol)
                if fmt == "pftrace":
                    with open(target, "wb") as f:
                        write_pftrace(f, g, s, lay, args.protocol)
                else:
                    with open_sink(target, fmt == "json.gz") as f:
                        write_chrome(f, g, s, lay, args.protocol, {})
                run.size = os.path.getsize(target)
            return run

        t_floor = best(floor, args.repeat)
        t_layout = best(lambda: build_layout(g, s, args.protocol), args.repeat)
        print(f"events: {len(events):,}; JSON {len(text) / 1e6:.1f} MB")
        print(f"floor (orjson dump of the same events): {t_floor:.2f} s")
        for level in [int(x) for x in args.levels.split(",")]:
            fn = compressor(level)
            t = best(fn, args.repeat)
            print(f"zlib level {level}: {t:.2f} s, {fn.size / 1e6:.1f} MB ({len(text) / fn.size:.1f}x smaller)")
        fn = compressor(GZIP_LEVEL, _deflate)
        t_comp = best(fn, args.repeat)
        used = f"{_deflate.__name__} level {GZIP_LEVEL}"
        print(f"{used} (the one used): {t_comp:.2f} s, {fn.size / 1e6:.1f} MB ({len(text) / fn.size:.1f}x smaller)")
        print(f"layout (shared by every format): {t_layout:.2f} s")
        events.clear()  # (memory, before the writers run)
        for fmt in ("json", "json.gz", "pftrace"):
            fn = ours(fmt)
            t = best(fn, args.repeat)
            ref = t_floor + (t_comp if fmt == "json.gz" else 0.0)
            ratio = t / ref
            verdict = "pass" if ratio <= TARGETS[fmt] else "MISS"
            what = "floor + compressor" if fmt == "json.gz" else "floor"
            print(f"{fmt:8s} {t:6.2f} s (layout included), {fn.size / 1e6:6.1f} MB: {ratio:.2f}x {what} "
                  f"(target {TARGETS[fmt]}x) {verdict}")
    return 0


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print(f"({time.time() - t0:.0f} s wall)")
    sys.exit(rc)
