"""CC-on / CC-off microbenchmarks in the measurement format of ``replay calibrate`` (docs/model.md
"Calibration").

On a CUDA machine (PyTorch), run it once with confidential computing on and once with it off::

    python benchmarks/cc_microbench.py --cc off -o off.json
    python benchmarks/cc_microbench.py --cc on --merge off.json -o m.json    # m.json: both halves
    replay calibrate m.json -o my-machine.toml

Each point is the mean wall time of ``--repeat`` iterations of: the call (``copy_(non_blocking=True)``
of DIRECTION from MEMORY, one tiny kernel, one CUDA graph of ``--graph-kernels`` kernels, or a small
device-to-device copy) and ``torch.cuda.synchronize()``, after ``--warmup`` iterations. Whether a
non_blocking H2D copy returned before it completed is recorded (``non_blocking_blocks_host``). Pageable
memory is an ordinary tensor; pinned is ``pin_memory()`` (``cudaHostAlloc``; ``cudaHostRegister`` is
refused under CC). Without CUDA it exits with status 2.

Without a GPU, ``--simulate PRESET [--set k=v ...]`` writes the same file from replays of the same
loops under the H100 model (``baseline`` = CC on, ``none`` = CC off): the copies are ``tracegen
synth memcpy`` traces, the launches, graph launches and D2D copies the loops of
``replay.frontend.calibrate.microbench_table`` (synth has no kernel-launch loop). That makes the
calibration testable here::

    python benchmarks/cc_microbench.py --simulate h100-sxm --set submit.copy_ns=25000 -o m.json
    replay calibrate m.json -o cal.toml

A file derived from published CC-on/CC-off figures whose CC-off side is the model's own replay (the
shipped b300 and h200 inputs, their "notes" say so) goes stale when the base preset changes;
``--refresh-cc-off FILE [--keep derived|cc_on] -o FILE`` replays its CC-off latencies again under
its ``extends`` preset and re-derives the CC-on ones from the figures it was derived from.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FORMAT = "fastrack-cc-microbench/1"
DEFAULT_SIZES = "4KiB,1MiB,64MiB,1GiB"


def _sizes(text: str) -> list[int]:
    from tracegen.synth import parse_size

    return [parse_size(s.strip(), "--sizes") for s in text.split(",") if s.strip()]


# ---------------------------------------------------------------------------------------------
# simulated (the model replays the loops)


def simulate(preset: str, sets: list[str], sizes: list[int], repeat: int, graph_kernels: int) -> dict:
    from fastrack_core.traceio import trace_in_memory
    from replay.frontend.calibrate import MICROBENCH_SETS, Point, point_graph
    from replay.pipeline.build import build_graph
    from replay.pipeline.run import replay_graph
    from tracegen.synth import memcpy_table

    user_sets = sets
    sets = [*MICROBENCH_SETS, *sets]  # plaintext buffers: no copy is client data (calibrate.py)

    def per_iter(graph) -> tuple[float, float]:
        on = replay_graph(graph, "baseline", "h100", preset, sets).result.makespan_ns / repeat
        off = replay_graph(graph, "none", "h100", preset, sets).result.makespan_ns / repeat
        return on, off

    out = {"format": FORMAT, "extends": preset, "repeat": repeat, "copies": [],
           "machine": f"simulated: replay of preset {preset}" + (f" with --set {' '.join(user_sets)}" if user_sets else ""),
           "non_blocking_blocks_host": True}
    for direction in ("h2d", "d2h"):
        for memory in ("pinned", "pageable"):
            for nbytes in sizes:
                table = memcpy_table(nbytes, direction, memory, repeat)
                g = build_graph(trace_in_memory(table, {"source_format": "synthetic", "trace_name": "cc microbench"}))
                on, off = per_iter(g)
                out["copies"].append({"direction": direction, "memory": memory, "bytes": nbytes,
                                      "cc_on_ns": round(on, 1), "cc_off_ns": round(off, 1)})
    for what, extra in (("launch", {}), ("graph_launch", {"kernels": graph_kernels}), ("d2d", {"bytes": 4096})):
        pt = Point(what, what, 1.0, 1.0, nbytes=extra.get("bytes", 0), kernels=extra.get("kernels", 1))
        on, off = per_iter(point_graph(pt, repeat))
        out[what] = {**extra, "cc_on_ns": round(on, 1), "cc_off_ns": round(off, 1)}
    # the rule the replay applies: whether a CC H2D copy holds its thread until it completes
    from fastrack_core.schema import CopyDir
    from replay.plugins import load_model

    model = load_model("h100").from_preset(preset, sets)
    out["non_blocking_blocks_host"] = bool(model.copy_blocks_host(CopyDir.H2D))
    return out


def refresh_cc_off(path: str, keep: str) -> dict:
    """A measurement file whose CC-off latencies are the model's own (a file derived from published
    CC-on/CC-off figures, its "notes" say so) with each ``cc_off_ns`` replayed again under the file's
    ``extends`` preset (calibrate's loops, ``none``) and its ``cc_on_ns`` re-derived so that the
    published figure stays what it was: ``keep`` = "derived" keeps a copy's CC cost (cc_on - cc_off)
    up to 64 KiB and its ratio cc_on / cc_off from 16 MiB (the tolls and bandwidth ratios of [S38]);
    "cc_on" keeps every CC-on latency (an absolute rate, as [S14]'s)."""
    from fastrack_core.errors import FastrackError
    from replay.frontend.calibrate import (LARGE_MIN_BYTES, SMALL_MAX_BYTES, Simulator, _relative_to,
                                           load_measurements)

    meas = load_measurements(path)
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    sim = Simulator(meas.points, meas.repeat, _relative_to(meas.extends, Path(path).parent))
    bodies = [*doc["copies"], *(doc[k] for k in ("launch", "graph_launch", "d2d") if k in doc)]
    for i, (pt, body) in enumerate(zip(meas.points, bodies)):
        off = round(sim.latency(i, "none", {}), 1)
        if keep == "cc_on":
            on = pt.cc_on_ns
        elif pt.what == "copy" and pt.nbytes >= LARGE_MIN_BYTES:
            on = round(off * pt.cc_on_ns / pt.cc_off_ns, 1)
        elif pt.what != "copy" or pt.nbytes <= SMALL_MAX_BYTES:
            on = round(off + pt.delta_ns, 1)
        else:
            raise FastrackError(f"{path}: {pt.label}: a copy between {SMALL_MAX_BYTES} and {LARGE_MIN_BYTES} bytes "
                                "has no derived figure to keep (use --keep cc_on)")
        body["cc_off_ns"], body["cc_on_ns"] = off, on
    return doc


# ---------------------------------------------------------------------------------------------
# measured (PyTorch on a CUDA device)


def measure(cc: str, sizes: list[int], repeat: int, warmup: int, graph_kernels: int) -> dict:
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        print("error: no CUDA device (PyTorch with CUDA is needed; use --simulate PRESET without a GPU)",
              file=sys.stderr)
        raise SystemExit(2)
    dev = torch.device("cuda")
    key = f"cc_{cc}_ns"

    def timed(fn) -> float:
        for _ in range(warmup):
            fn()
            torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        for _ in range(repeat):
            fn()
            torch.cuda.synchronize()
        return (time.perf_counter_ns() - t0) / repeat

    out = {"format": FORMAT, "repeat": repeat, "copies": [], "machine": torch.cuda.get_device_name(dev)}
    for direction in ("h2d", "d2h"):
        for memory in ("pinned", "pageable"):
            for nbytes in sizes:
                host = torch.empty(nbytes, dtype=torch.uint8)
                if memory == "pinned":
                    host = host.pin_memory()
                gpu = torch.empty(nbytes, dtype=torch.uint8, device=dev)
                fn = (lambda g=gpu, h=host: g.copy_(h, non_blocking=True)) if direction == "h2d" else \
                     (lambda g=gpu, h=host: h.copy_(g, non_blocking=True))
                out["copies"].append({"direction": direction, "memory": memory, "bytes": nbytes,
                                      key: round(timed(fn), 1)})
                del host, gpu
    x = torch.zeros(1, device=dev)
    out["launch"] = {key: round(timed(lambda: x.add_(1)), 1)}
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        x.add_(1)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        for _ in range(graph_kernels):
            x.add_(1)
    out["graph_launch"] = {"kernels": graph_kernels, key: round(timed(g.replay), 1)}
    a = torch.empty(4096, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    out["d2d"] = {"bytes": 4096, key: round(timed(lambda: b.copy_(a)), 1)}
    # does a non_blocking pinned H2D copy hold the thread until it completes?
    big = 256 << 20
    host = torch.empty(big, dtype=torch.uint8).pin_memory()
    gpu = torch.empty(big, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    gpu.copy_(host, non_blocking=True)
    t_call = time.perf_counter_ns() - t0
    torch.cuda.synchronize()
    t_all = time.perf_counter_ns() - t0
    out[f"non_blocking_blocks_host_cc_{cc}"] = bool(t_call > 0.5 * t_all)
    return out


def merge(mine: dict, other: dict) -> dict:
    """Merge two halves (one CC on, one CC off) measured with the same sizes."""
    out = dict(mine)
    idx = {(c["direction"], c["memory"], c["bytes"]): c for c in other.get("copies", [])}
    out["copies"] = [{**idx.get((c["direction"], c["memory"], c["bytes"]), {}), **c} for c in mine["copies"]]
    for k in ("launch", "graph_launch", "d2d"):
        if k in mine and k in other:
            out[k] = {**other[k], **mine[k]}
    for k, v in other.items():
        if k.startswith("non_blocking_blocks_host_cc_"):
            out[k] = v
    if "non_blocking_blocks_host_cc_on" in out:
        out["non_blocking_blocks_host"] = out["non_blocking_blocks_host_cc_on"]
    for k in [k for k in out if k.startswith("non_blocking_blocks_host_cc_")]:
        out.pop(k)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--simulate", metavar="PRESET", help="replay the loops under this preset instead of a GPU")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="K=V",
                    help="parameter override for --simulate (repeatable)")
    ap.add_argument("--cc", choices=("on", "off"), help="on a GPU: whether CC is on for this run")
    ap.add_argument("--merge", metavar="HALF.json", help="on a GPU: the other half (the run with the other --cc)")
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help=f"copy sizes (default {DEFAULT_SIZES})")
    ap.add_argument("--repeat", type=int, default=10, help="iterations per point (default 10)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed iterations before each point (GPU only)")
    ap.add_argument("--graph-kernels", type=int, default=100, help="kernels in the CUDA graph (default 100)")
    ap.add_argument("--refresh-cc-off", metavar="FILE",
                    help="re-replay FILE's CC-off latencies under its 'extends' preset and re-derive its CC-on "
                         "ones (a file derived from published figures; see --keep)")
    ap.add_argument("--keep", choices=("derived", "cc_on"), default="derived",
                    help="with --refresh-cc-off: keep the tolls (<= 64 KiB) and ratios (>= 16 MiB) the file was "
                         "derived from (default), or keep every CC-on latency")
    ap.add_argument("-o", "--output", required=True, help="measurement JSON to write")
    args = ap.parse_args(argv)
    from fastrack_core.atomic import write_text_atomic
    from fastrack_core.errors import FastrackError

    try:
        sizes = _sizes(args.sizes)
        if not 1 <= args.repeat <= 10_000:
            raise FastrackError("--repeat: expected 1..10000")
        if args.refresh_cc_off:
            out = refresh_cc_off(args.refresh_cc_off, args.keep)
        elif args.simulate:
            out = simulate(args.simulate, args.sets, sizes, args.repeat, args.graph_kernels)
        else:
            if args.cc is None:
                raise FastrackError("--cc on|off is required on a GPU (or give --simulate PRESET)")
            out = measure(args.cc, sizes, args.repeat, args.warmup, args.graph_kernels)
            if args.merge:
                out = merge(out, json.loads(Path(args.merge).read_text()))
        bad = [c for c in out["copies"] for v in c.values() if isinstance(v, float) and not math.isfinite(v)]
        if bad:
            raise FastrackError("a latency came out not finite")
        write_text_atomic(args.output, json.dumps(out, indent=1) + "\n")
    except FastrackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.output} ({len(out['copies'])} copy points)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
