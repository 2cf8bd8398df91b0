"""What-if workload: a host-bound loop of small kernels (a few hundred elementwise ops on
4096-element tensors per iteration, then a scalar read back): the GPU idles between launches.
Written for a CUDA GPU."""

import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--iters", type=int, default=5)
p.add_argument("--ops", type=int, default=300)
args = p.parse_args()

x = torch.zeros(4096, device="cuda")
for it in range(args.iters):
    with torch.profiler.record_function(f"ProfilerStep#{it}"):
        y = x
        for _ in range(args.ops // 3):
            y = y * 1.0001
            y = y + 0.5
            y = torch.sin(y)
        x = y
        print(it, float(y.sum()))
