"""Host-side figures of the real H100 traces: the calibration of the modelled host time of
emulated capture (``tracegen capture --host-time modelled``, ``tracegen/emulation/costmodel.py``).

    python benchmarks/validation/host_calibration.py [--real-dir tests/data]

For each Kineto trace (``h100_bert_small_uncased.json.gz``, ``h100_qwen1.5_0.5b_chat.json.gz``)
it prints, from the main thread's events:

* the median duration of each CUDA runtime/driver call (all calls in the file);
* the return latency of the synchronise calls: call end minus the end of the GPU work it waited
  for (the whole call when the GPU was already idle);
* inside the ``ProfilerStep#N`` annotation: the framework time of an ATen op that launches GPU
  work (the innermost ``cpu_op`` around a launch call, its duration minus the runtime calls
  inside it), the duration of a leaf ATen op that launches nothing (views, allocations), the
  Python time per ``nn.Module`` call (step host time not inside any ATen op or runtime call,
  divided by the module calls of the step), and the host time per launched GPU op.

Both traces were recorded with ``record_shapes``, ``profile_memory``, ``with_stack`` and
``with_modules``: the profiler's own overhead is inside every figure (see docs/emulation.md).
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # benchmarks/<kind>/ -> the repository root
TRACES = ("h100_bert_small_uncased.json.gz", "h100_qwen1.5_0.5b_chat.json.gz")
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC")
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _med(xs):
    return statistics.median(xs) if xs else float("nan")


def analyse(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    step = [e for e in ev if e.get("cat") == "user_annotation" and str(e["name"]).startswith("ProfilerStep#")][-1]
    main = step["tid"]
    t0, t1 = step["ts"], step["ts"] + step["dur"]
    calls = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and e["tid"] == main]
    gpu = [e for e in ev if e.get("cat") in GPU_CATS]

    out: dict = {"name": path.name, "step": step["name"], "step_us": step["dur"]}
    durs = defaultdict(list)
    for c in calls:
        durs[c["name"]].append(c["dur"])
    out["call_median_us"] = {k: (len(v), _med(v)) for k, v in sorted(durs.items(), key=lambda kv: -len(kv[1]))}

    # sync return latency: end of the call minus the end of the last GPU op that started before the
    # call returned (in-order default stream; the GPU work it waited for)
    lat = defaultdict(list)
    for c in calls:
        if c["name"] not in SYNC_CALLS:
            continue
        end = c["ts"] + c["dur"]
        busy_end = max((g["ts"] + g["dur"] for g in gpu if g["ts"] < end and g["ts"] + g["dur"] <= end),
                       default=c["ts"])
        lat[c["name"]].append(end - max(busy_end, c["ts"]))
    out["sync_return_us"] = {k: sorted(round(x, 2) for x in v) for k, v in lat.items()}

    # the step window on the main thread
    ops = sorted((e for e in ev if e.get("cat") == "cpu_op" and e["tid"] == main and t0 <= e["ts"] <= t1),
                 key=lambda e: (e["ts"], -e["dur"]))
    scalls = [c for c in calls if t0 <= c["ts"] <= t1]
    parent_of = _innermost(ops, scalls)
    launches = [c for c in scalls if c["name"] in LAUNCH_CALLS or c["name"] in ("cudaMemcpyAsync", "cudaMemsetAsync")]
    inner_ops = {}
    for c in launches:
        p = parent_of.get(id(c))
        if p is not None:
            inner_ops[id(p)] = p
    rt_inside = defaultdict(float)
    for c in scalls:
        for o in ops:  # every enclosing op loses the call's time
            if o["ts"] <= c["ts"] and c["ts"] + c["dur"] <= o["ts"] + o["dur"]:
                rt_inside[id(o)] += c["dur"]
    dispatch = [p["dur"] - rt_inside[id(p)] for p in inner_ops.values()]
    has_child = set()
    stack: list = []
    for o in ops:
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= o["ts"]:
            stack.pop()
        if stack:
            has_child.add(id(stack[-1]))
        stack.append(o)
    leaf_no_launch = [o["dur"] for o in ops if id(o) not in has_child and rt_inside[id(o)] == 0]
    out["launching_op_framework_us"] = (len(dispatch), _med(dispatch))
    out["leaf_nonlaunching_op_us"] = (len(leaf_no_launch), _med(leaf_no_launch))

    # host span of the step: from its start to the end of its last launch call (the final wait excluded)
    last = max(c["ts"] + c["dur"] for c in launches)
    span = last - t0
    top = _top_level(ops)
    in_ops = sum(o["dur"] for o in top if o["ts"] + o["dur"] <= last)
    outside_rt = sum(c["dur"] for c in scalls if parent_of.get(id(c)) is None and c["ts"] + c["dur"] <= last)
    modules = [e for e in ev if e.get("cat") == "python_function" and e["tid"] == main
               and str(e["name"]).startswith("nn.Module:") and t0 <= e["ts"] <= last]
    residual = span - in_ops - outside_rt
    out["host_span_us"] = span
    out["gpu_ops_launched"] = len(launches)
    out["host_per_gpu_op_us"] = span / max(1, len(launches))
    out["python_outside_ops_us"] = residual
    out["module_calls"] = len(modules)
    out["python_per_module_call_us"] = residual / max(1, len(modules))
    out["aten_ops_top_level"] = len(top)
    return out


def _innermost(ops, calls) -> dict:
    """id(call) -> the innermost cpu_op enclosing it (ops sorted by start, longest first)."""
    starts = [o["ts"] for o in ops]
    res = {}
    for c in calls:
        best = None
        for o in ops[:bisect.bisect_right(starts, c["ts"])]:
            if o["ts"] <= c["ts"] and c["ts"] + c["dur"] <= o["ts"] + o["dur"]:
                if best is None or o["dur"] <= best["dur"]:
                    best = o
        if best is not None:
            res[id(c)] = best
    return res


def _top_level(ops) -> list:
    top, end = [], float("-inf")
    for o in ops:
        if o["ts"] >= end:
            top.append(o)
            end = o["ts"] + o["dur"]
    return top


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--real-dir", default=str(ROOT / "tests" / "data"))
    args = p.parse_args()
    for name in TRACES:
        r = analyse(Path(args.real_dir) / name)
        print(f"== {r['name']} ({r['step']}: {r['step_us']:.1f} us)")
        print("  runtime/driver call durations, all calls in the file (count, median us):")
        for k, (n, m) in r["call_median_us"].items():
            print(f"    {k:24s} {n:5d} {m:9.2f}")
        print("  sync return latency, call end - end of the GPU work it waited for (us):")
        for k, v in r["sync_return_us"].items():
            print(f"    {k:24s} {v}")
        n, m = r["launching_op_framework_us"]
        print(f"  framework time of an ATen op that launches (innermost op, minus calls): median {m:.2f} us (n={n})")
        n, m = r["leaf_nonlaunching_op_us"]
        print(f"  leaf ATen op that launches nothing (view/alloc):                  median {m:.2f} us (n={n})")
        print(f"  step host span to the last launch: {r['host_span_us']:.1f} us for {r['gpu_ops_launched']} GPU ops "
              f"= {r['host_per_gpu_op_us']:.2f} us per GPU op; {r['aten_ops_top_level']} top-level ATen ops")
        print(f"  Python outside ATen ops and calls: {r['python_outside_ops_us']:.1f} us over {r['module_calls']} "
              f"nn.Module calls = {r['python_per_module_call_us']:.2f} us per module call")


if __name__ == "__main__":
    main()
