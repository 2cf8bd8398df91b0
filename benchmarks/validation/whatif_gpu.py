"""What-if predictions against a real CUDA GPU: inject a known cost into a small training step,
measure what it does, and compare with what replay of the clean capture predicts.

    python benchmarks/validation/whatif_gpu.py [--out DIR] [--steps N] [--configs gpu-bound launch-bound]

Needs a CUDA GPU and PyTorch (written for an H100/H200); without one it prints "needs a CUDA
GPU" and exits with status 2. Not yet run (no GPU was available when it was written).

Workload: an MLP training step in bf16 (``--layers`` x [Linear, LayerNorm, GELU], SGD with
momentum), one ``torch.cuda.synchronize()`` per step, in two sizes: ``gpu-bound`` (batch 16384,
hidden 4096, 8 layers: an estimated 20-30 ms of GPU work per step on an H100, the host far
ahead) and ``launch-bound`` (batch 64, hidden 1024, 4 layers: tiny kernels, the host's launch
rate decides).

Variants, each run ``--warmup`` steps, then timed over ``--steps`` steps (CUDA events around each
step; the median), then profiled over ``--profile-steps`` steps with ``torch.profiler`` (CPU +
CUDA) and converted with ``tracegen convert``:

* ``clean``;
* ``host +2 us`` / ``host +10 us``: a ``TorchDispatchMode`` busy-waits 2 / 10 us after every
  ATen operator that returns a CUDA tensor it did not alias (an approximation of "after every
  kernel launch": one operator may launch several kernels or none; the table reports spins and
  kernel launches per step so the two can be compared);
* ``+8 MiB H2D + D2H``: a pinned 8 MiB host buffer uploaded (``non_blocking``) before the step and
  an 8 MiB device buffer downloaded into pinned memory after it.

Compared:

* host delays: measured step time minus clean (CUDA events) against the **prediction from the
  clean capture**: the clean trace with ``+2000`` / ``+10000`` ns added to the ``dur_ns`` of every
  host call that launched GPU work (:func:`add_launch_delay`), replayed with ``replay --protocol
  captured``, minus the clean trace's replay. ``replay --scale host=F`` is a different what-if
  (every host duration times F), not an added constant per launch;
* extra copies: measured step time minus clean against the **replay of the capture that includes
  them** minus the replay of the clean capture (how well the replayed graph reproduces the cost of
  the copies; no prediction from the clean capture, which has no copies to scale).

Replay makespans are per profiled step (the median of ``steps[].makespan_ns`` of ``replay
--protocol captured --json``). Prints a Markdown table; ``--out`` keeps the traces.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # benchmarks/<kind>/ -> the repository root
MiB = 1024 * 1024
COPY_BYTES = 8 * MiB
DELAYS_NS = (2000, 10000)
CONFIGS = {  # name: (batch, hidden, layers)
    "gpu-bound": (16384, 4096, 8),
    "launch-bound": (64, 1024, 4),
}
LAUNCH_NAMES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                "cudaLaunchCooperativeKernel", "cudaMemcpyAsync", "cudaMemsetAsync")


# ----------------------------------------------------------------------------- the workload

def build(torch, batch: int, hidden: int, layers: int):
    nn = torch.nn
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(hidden, hidden), nn.LayerNorm(hidden), nn.GELU()]
    model = nn.Sequential(*blocks).to(device="cuda", dtype=torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, foreach=True)
    x = torch.randn(batch, hidden, device="cuda", dtype=torch.bfloat16)
    return model, opt, x


class Copies:
    """The extra per-step transfers: pinned 8 MiB H2D before the step, 8 MiB D2H after it."""

    def __init__(self, torch):
        n = COPY_BYTES // 4
        self.up_host = torch.ones(n, dtype=torch.float32).pin_memory()
        self.down_host = torch.empty(n, dtype=torch.float32).pin_memory()
        self.dev = torch.empty(n, dtype=torch.float32, device="cuda")

    def before(self):
        self.dev.copy_(self.up_host, non_blocking=True)

    def after(self):
        self.down_host.copy_(self.dev, non_blocking=True)


def make_spin_mode(torch, delay_ns: int):
    """A TorchDispatchMode that busy-waits ``delay_ns`` after every operator returning a new CUDA
    tensor (counted in ``.spins``)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Spin(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.spins = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.is_cuda]
            if outs and not func.is_view:
                self.spins += 1
                end = time.perf_counter_ns() + delay_ns
                while time.perf_counter_ns() < end:
                    pass
            return out

    return Spin()


def train_step(model, opt, x, copies: Copies | None):
    if copies is not None:
        copies.before()
    loss = model(x).float().square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if copies is not None:
        copies.after()


def run_variant(torch, cfg, variant: str, args, trace_json: Path) -> dict:
    """Warm up, time ``args.steps`` steps (CUDA events, median), profile ``args.profile_steps``."""
    import contextlib

    from torch.profiler import ProfilerActivity, profile, schedule

    torch.cuda.empty_cache()  # the previous variant's model is gone
    model, opt, x = build(torch, *cfg)
    copies = Copies(torch) if variant == "copies" else None
    delay = {"host2": 2000, "host10": 10000}.get(variant, 0)
    mode = make_spin_mode(torch, delay) if delay else None

    def one_step():
        with mode if mode is not None else contextlib.nullcontext():
            train_step(model, opt, x, copies)

    for _ in range(args.warmup):
        one_step()
        torch.cuda.synchronize()
    times = []
    for _ in range(args.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        one_step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e6)  # ms -> ns
    spins_before = mode.spins if mode is not None else 0
    sched = schedule(wait=0, warmup=1, active=args.profile_steps, repeat=1)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=sched) as prof:
        for _ in range(1 + args.profile_steps):
            one_step()
            torch.cuda.synchronize()
            prof.step()
    prof.export_chrome_trace(str(trace_json))
    spins = ((mode.spins - spins_before) / (1 + args.profile_steps)) if mode is not None else 0.0
    return {"step_ns": statistics.median(times), "spins_per_step": spins}


# ----------------------------------------------------------------------------- trace helpers

def convert(trace_json: Path, out: Path) -> Path:
    r = subprocess.run([sys.executable, "-m", "tracegen.cli", "convert", "--overwrite", str(trace_json), "-o",
                        str(out)], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"whatif_gpu: tracegen convert failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return out


def step_makespan(trace: Path) -> int:
    """Median per-step makespan (ns) of ``replay --protocol captured``."""
    r = subprocess.run([sys.executable, "-m", "replay.frontend.cli", "--protocol", "captured", str(trace), "--no-reference",
                        "--json"], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"whatif_gpu: replay failed on {trace.name}: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    d = json.loads(r.stdout)
    steps = [s["makespan_ns"] for s in d.get("steps", []) if s.get("step", -1) >= 0]
    return int(statistics.median(steps)) if steps else int(d["makespan_ns"])


def launch_rows(table):
    """Row mask of the host calls that launched GPU work (a LAUNCH dep points at them), falling
    back to the runtime calls named like a launch when the trace has no LAUNCH deps."""
    import numpy as np

    from fastrack_core.schema import DepKind

    n = table.num_rows
    ids = table.column("op_id").to_numpy()
    pos = {int(o): i for i, o in enumerate(ids)}
    mask = np.zeros(n, dtype=bool)
    for deps, kinds in zip(table.column("deps").to_pylist(), table.column("dep_kinds").to_pylist()):
        for d, k in zip(deps, kinds):
            if k == DepKind.LAUNCH and d in pos:
                mask[pos[d]] = True
    if not mask.any():
        names = np.array([str(s) for s in table.column("name").to_pylist()])
        kinds = np.array([str(s) for s in table.column("kind").to_pylist()])
        mask = (kinds == "runtime") & np.isin(names, LAUNCH_NAMES)
    return mask


def add_launch_delay(src: Path, dst: Path, delay_ns: int) -> int:
    """Write ``src`` to ``dst`` with ``delay_ns`` added to the duration of every host call that
    launched GPU work (timestamps unchanged: the replay moves what follows). Returns how many."""
    import numpy as np
    import pyarrow as pa

    from fastrack_core.traceio import read_trace, write_trace

    t = read_trace(src)
    table = t.table
    mask = launch_rows(table)
    dur = table.column("dur_ns").to_numpy().astype(np.int64) + np.where(mask, delay_ns, 0)
    i = table.schema.get_field_index("dur_ns")
    table = table.set_column(i, table.schema.field(i), pa.array(dur, table.schema.field(i).type))
    write_trace(dst, table, dict(t.metadata))
    return int(mask.sum())


def launches_per_step(trace: Path) -> float:
    import numpy as np

    from fastrack_core.traceio import read_trace

    table = read_trace(trace).table
    mask = launch_rows(table)
    step = table.column("step").to_numpy()
    steps = np.unique(step[step >= 0])
    return float(mask[step >= 0].sum() / max(1, len(steps)))


# ----------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="keep the Kineto and Parquet traces here [a temporary folder]")
    ap.add_argument("--configs", nargs="+", choices=sorted(CONFIGS), default=list(CONFIGS))
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30, help="timed steps per variant (median)")
    ap.add_argument("--profile-steps", type=int, default=3)
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("needs a CUDA GPU (and PyTorch; torch is not installed)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    lines = [f"GPU: {torch.cuda.get_device_name()}, PyTorch {torch.__version__}; {args.steps} timed steps per "
             f"variant (median of CUDA-event step times), {args.profile_steps} profiled.", "",
             "| config | variant | measured step (ms) | measured delta (ms) | compared with | replayed delta (ms) "
             "| delta error | spins / launches per step |",
             "|---|---|---:|---:|---|---:|---:|---|"]
    with tempfile.TemporaryDirectory(prefix="whatif-gpu-") as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        for cname in args.configs:
            cfg = CONFIGS[cname]
            res, traces = {}, {}
            for variant in ("clean", "host2", "host10", "copies"):
                js = out / f"{cname}_{variant}.pt.trace.json"
                res[variant] = run_variant(torch, cfg, variant, args, js)
                traces[variant] = convert(js, out / f"{cname}_{variant}.parquet")
                print(f"{cname} {variant}: {res[variant]['step_ns'] / 1e6:.3f} ms", file=sys.stderr, flush=True)
            clean_ms = res["clean"]["step_ns"]
            clean_rep = step_makespan(traces["clean"])
            launches = launches_per_step(traces["clean"])
            lines.append(f"| {cname} | clean | {clean_ms / 1e6:.3f} | - | replay of its capture: "
                         f"{clean_rep / 1e6:.3f} ms | - | - | - / {launches:.0f} |")
            for variant, delay in (("host2", 2000), ("host10", 10000)):
                edited = out / f"{cname}_clean_plus{delay}ns.parquet"
                add_launch_delay(traces["clean"], edited, delay)
                pred = step_makespan(edited) - clean_rep
                meas = res[variant]["step_ns"] - clean_ms
                lines.append(_row(cname, f"host +{delay // 1000} us per op", res[variant]["step_ns"], meas,
                                  f"clean capture, +{delay} ns per launch call", pred,
                                  f"{res[variant]['spins_per_step']:.0f} / {launches:.0f}"))
            meas = res["copies"]["step_ns"] - clean_ms
            rep = step_makespan(traces["copies"]) - clean_rep
            lines.append(_row(cname, "+8 MiB H2D + D2H", res["copies"]["step_ns"], meas,
                              "replay of its own capture", rep, "-"))
    lines += ["", "delta error = replayed delta / measured delta - 1 (a measured delta under 2% of the clean "
              "step is noise-dominated: its error is not meaningful)."]
    print("\n".join(lines))
    return 0


def _row(cname, label, step_ns, meas, against, pred, counts) -> str:
    err = f"{100 * (pred / meas - 1):+.1f}%" if meas > 0 else "-"
    return (f"| {cname} | {label} | {step_ns / 1e6:.3f} | {meas / 1e6:+.3f} | {against} | {pred / 1e6:+.3f} | "
            f"{err} | {counts} |")


if __name__ == "__main__":
    sys.exit(main())
