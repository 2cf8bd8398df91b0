"""Emulated capture speed: recorded ops per second of CPU time on ``examples/llama_train.py``.

Target: 5,000 recorded ops/s after the torch import. In this process, torch already imported
(and :func:`tracegen.emulation.preload` done), each of these runs ``--repeats`` times after a
warm-up:

* ``meta``: the same script on PyTorch's ``meta`` device without the emulator (PyTorch's own
  cost of the shapes: the floor). The script text is run with ``device = "cuda"`` replaced by
  ``device = "meta"``, and while it runs ``torch.cuda.get_device_name``/``synchronize`` return at
  once, ``Tensor.pin_memory`` returns the tensor and ``Tensor.item`` of a meta tensor returns 0.0
  (the four calls a meta run cannot make; ``autocast("cuda")`` turns itself off with a warning,
  as ATen's autocast does not act on meta tensors anyway);
* ``modelled`` and ``script``: :func:`tracegen.capture.capture_emulated` of the unchanged script
  with that ``--host-time`` (the run, the recording and the trace table; not the Parquet write).

The figure is the fastest run's process CPU time (``time.process_time``; the machine may be
loaded, wall time is printed too); ops/s is the trace's rows over it. Prints ops/s of each
emulated mode and its ratio to the meta floor of the same run.

    python benchmarks/speed/bench_capture.py [--repeats 3] [--json] [-- SCRIPT_ARGS...]

The script arguments default to those of ``traces/llama.parquet`` (traces/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "llama_train.py"
DEFAULT_ARGS = ["--config", "small", "--batch", "8", "--seq", "512", "--steps", "4"]
TARGET_OPS_PER_S = 5000
_CUDA_LINE = 'device = "cuda"'


def _times(fn, repeats: int) -> tuple[float, float, object]:
    out = fn()  # warm-up
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        out = fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return min(cpu), min(wall), out


@contextlib.contextmanager
def _meta_patches():
    """The four calls a meta-device run of the script cannot make (module docstring)."""
    import torch

    saved = [(torch.cuda, "get_device_name"), (torch.cuda, "synchronize"), (torch.Tensor, "item"),
             (torch.Tensor, "pin_memory")]
    old = [getattr(o, n) for o, n in saved]
    item = torch.Tensor.item
    torch.cuda.get_device_name = lambda *a, **k: "meta"
    torch.cuda.synchronize = lambda *a, **k: None
    torch.Tensor.item = lambda self: 0.0 if self.is_meta else item(self)
    torch.Tensor.pin_memory = lambda self, *a, **k: self
    try:
        yield
    finally:
        for (o, n), v in zip(saved, old):
            setattr(o, n, v)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--modes", default="modelled,script", help="emulated host-time modes to time")
    ap.add_argument("script_args", nargs="*", help="arguments of examples/llama_train.py (after --)")
    args = ap.parse_args(argv)
    script_args = args.script_args or DEFAULT_ARGS

    from tracegen.capture import capture_emulated, run_script
    from tracegen.emulation import preload

    preload()
    text = SCRIPT.read_text()
    if _CUDA_LINE not in text:
        raise SystemExit(f"{SCRIPT}: no line `{_CUDA_LINE}` to turn into the meta device")
    quiet = contextlib.redirect_stdout(io.StringIO())
    with tempfile.TemporaryDirectory() as tmp:
        meta_script = Path(tmp) / SCRIPT.name
        meta_script.write_text(text.replace(_CUDA_LINE, 'device = "meta"'))

        def meta():
            sys.path.insert(0, str(SCRIPT.parent))  # toy_models
            try:
                with quiet, contextlib.redirect_stderr(io.StringIO()), _meta_patches():
                    run_script(meta_script, script_args)
            finally:
                sys.path.remove(str(SCRIPT.parent))

        def emulated(mode):
            def run():
                with quiet, contextlib.redirect_stderr(io.StringIO()):
                    return capture_emulated(SCRIPT, script_args, host_time=mode)[0].num_rows
            return run

        modes = [m for m in args.modes.split(",") if m]
        res = {"meta": _times(meta, args.repeats)}
        for m in modes:
            res[m] = _times(emulated(m), args.repeats)
    out = {"script": "examples/llama_train.py", "script_args": script_args,
           "cpu_s": {k: round(v[0], 4) for k, v in res.items()},
           "wall_s": {k: round(v[1], 4) for k, v in res.items()},
           "ops": {m: res[m][2] for m in modes},
           "ops_per_s": {m: round(res[m][2] / res[m][0]) for m in modes},
           "over_meta": {m: round(res[m][0] / res["meta"][0], 3) for m in modes},
           "target_ops_per_s": TARGET_OPS_PER_S}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"meta      cpu {out['cpu_s']['meta']:.3f} s  wall {out['wall_s']['meta']:.3f} s")
        for m in modes:
            print(f"{m:9s} cpu {out['cpu_s'][m]:.3f} s  wall {out['wall_s'][m]:.3f} s  {out['ops'][m]} ops  "
                  f"{out['ops_per_s'][m]:,} ops/s  {out['over_meta'][m]:.2f}x meta  (target {TARGET_OPS_PER_S:,} ops/s)")
    return 0 if all(v >= TARGET_OPS_PER_S for v in out["ops_per_s"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
