"""What measuring the script's host time costs a capture (``tracegen capture --host-time script``).

Target: measuring host time makes capture no more than 10% slower. The same workload
(a small transformer-style training loop with an AdamW step and some per-step Python
bookkeeping, written here with its device as an argument) runs

* ``meta``: on the meta device without the emulator (PyTorch's own cost of the shapes);
* ``modelled``: emulated, ``--host-time modelled`` (no clock is read);
* ``script``: emulated, ``--host-time script`` (the default: calibration at start, two thread
  CPU clock reads per interception).

Each is run ``--repeats`` times in this process after a warm-up; the figure is the fastest run's
process CPU time (``time.process_time``: the machine may be loaded; wall time is printed too).
Prints the ratios script/modelled (the target) and script/meta, modelled/meta.

    python benchmarks/speed/bench_capture_hosttime.py [--steps 4] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import textwrap
import time
from pathlib import Path

WORKLOAD = '''
import sys
import torch
import torch.nn as nn

device = sys.argv[1]
steps = int(sys.argv[2])
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, 4, d // 4).permute(2, 0, 3, 1, 4)
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(nn.functional.gelu(self.fc(self.ln2(x))))


model = nn.Sequential(*[Block(256) for _ in range(4)]).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
log = []
for step in range(steps):
    x = torch.randn(8, 128, 256, device=device)
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    log.append({"step": step, "lr": opt.param_groups[0]["lr"], "tokens": 8 * 128})  # bookkeeping
'''


def _times(fn, repeats: int) -> tuple[float, float]:
    fn()  # warm-up
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return min(cpu), min(wall)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    import io
    import contextlib

    from tracegen.capture import capture_emulated, run_script
    from tracegen.emulation import preload

    preload()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "workload.py"
        script.write_text(textwrap.dedent(WORKLOAD))
        steps = str(args.steps)
        quiet = contextlib.redirect_stderr(io.StringIO())

        def meta():
            run_script(script, ["meta", steps])

        def emulated(mode):
            def run():
                with quiet:
                    capture_emulated(script, ["cuda", steps], host_time=mode)
            return run

        res = {name: _times(fn, args.repeats) for name, fn in
               (("meta", meta), ("modelled", emulated("modelled")), ("script", emulated("script")))}
        table, meta_ = capture_emulated(script, ["cuda", steps], host_time="script")
    out = {
        "steps": args.steps, "ops": table.num_rows,
        "cpu_s": {k: round(v[0], 4) for k, v in res.items()},
        "wall_s": {k: round(v[1], 4) for k, v in res.items()},
        "script_over_modelled": round(res["script"][0] / res["modelled"][0], 3),
        "script_over_meta": round(res["script"][0] / res["meta"][0], 3),
        "modelled_over_meta": round(res["modelled"][0] / res["meta"][0], 3),
        "target_script_over_modelled": 1.10,
        "host_time": meta_["host_time"],
    }
    if args.json:
        print(json.dumps(out))
    else:
        for k in ("meta", "modelled", "script"):
            print(f"{k:9s} cpu {out['cpu_s'][k]:.3f} s  wall {out['wall_s'][k]:.3f} s")
        print(f"script / modelled = {out['script_over_modelled']:.3f} (target <= 1.10); "
              f"script / meta = {out['script_over_meta']:.3f}; modelled / meta = {out['modelled_over_meta']:.3f}; "
              f"{out['ops']} ops")
    return 0 if out["script_over_modelled"] <= 1.10 else 1


if __name__ == "__main__":
    sys.exit(main())
